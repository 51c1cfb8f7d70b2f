"""Model Markdown renders: converted for Telegram (MarkdownV2, checked by the fake's
parser, which refuses what Telegram refuses), native on Discord, an ``md`` post on
Feishu; a refused conversion still delivers the text, once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import structlog
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tests.fakes.telegram_api import FakeTelegram
from tests.fakes.telegram_text import Refused, parse_markdown_v2
from tests.support.config import make_settings
from tether.adapters.telegram.adapter import TelegramAdapter
from tether.adapters.telegram.markdown import readable, shown_length, to_markdown_v2
from tether.events import OutMessage, Target
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters
from tether.testing.model import API_KEY, FakeModel
from tether.text import split_text, utf16_len

MODEL_ANSWER = """\
Here is **the plan** for _today_ (v2.0!):

- read [the docs](https://example.com/a_(b)?q=1&x=y.z)
- run `make test-all`
- ship #1 = done

```python
def total(xs: list[int]) -> int:
    return sum(x * 2 for x in xs)  # `doubled` \\o/
```

1. first
2. second
"""


@pytest.fixture
async def adapter(tmp_path: Path, fake: FakeTelegram) -> AsyncIterator[TelegramAdapter]:
    telegram = {"token": fake.token, "base_url": fake.base_url, "rate_limits": False}
    settings = make_settings(tmp_path, platforms={"telegram": telegram})
    assert settings.platforms.telegram is not None
    opened = TelegramAdapter(settings.platforms.telegram)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


def markdown(text: str, key: str = "tg:1:1#0") -> OutMessage:
    return OutMessage(key=key, target=Target(platform="telegram", chat_id="42"), text=text,
                      format="markdown")  # fmt: skip


# -- the fake enforces MarkdownV2 -------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["Version 2.0", "a_b", "*bold", "[link](https://x.y", "1 + 1 = 2", "(note)", "a > b", "wow!"],
)
def test_the_fakes_parser_refuses_what_telegram_refuses(text: str) -> None:
    with pytest.raises(Refused):
        parse_markdown_v2(text)


def test_the_fakes_parser_reads_entities_as_telegram_does() -> None:
    plain, entities = parse_markdown_v2(
        "*b* _i_ __u__ ~s~ ||sp|| `c\\`` [l](https://e.x/\\)) \\. ```py\nx = 1\n```"
    )
    assert plain == "b i u s sp c` l . x = 1\n"
    kinds = {e["type"]: e for e in entities}
    assert set(kinds) == {"bold", "italic", "underline", "strikethrough", "spoiler", "code",
                          "text_link", "pre"}  # fmt: skip
    assert kinds["text_link"]["url"] == "https://e.x/)"
    assert kinds["pre"]["language"] == "py"


# -- Telegram: converted, accepted, rendered -------------------------------------------


async def test_model_markdown_is_accepted_and_rendered_on_telegram(
    adapter: TelegramAdapter, fake: FakeTelegram
) -> None:
    with structlog.testing.capture_logs() as logs:
        sent = await adapter.send(markdown(MODEL_ANSWER))
    assert not [e for e in logs if e["event"] == "telegram.format_fallback"]
    [call] = fake.sent
    assert call["parse_mode"] == "MarkdownV2"
    shown, entities = parse_markdown_v2(call["text"])
    assert fake.texts.in_chat(42) == [shown]
    assert sent.platform_id is not None
    kinds = [e["type"] for e in entities]
    assert "bold" in kinds and "italic" in kinds and "code" in kinds
    [link] = [e for e in entities if e["type"] == "text_link"]
    assert link["url"] == "https://example.com/a_(b)?q=1&x=y.z"
    [pre] = [e for e in entities if e["type"] == "pre"]
    assert pre["language"] == "python"
    # What the person reads: no markup characters left, the words and symbols kept.
    assert "**" not in shown and "the plan" in shown and "(v2.0!)" in shown
    assert "return sum(x * 2 for x in xs)  # `doubled` \\o/" in shown
    assert "read the docs" in shown and "ship #1 = done" in shown


async def test_a_refused_conversion_falls_back_to_the_readable_text_once(
    adapter: TelegramAdapter, fake: FakeTelegram
) -> None:
    fake.fail_next("sendMessage", 400, "Bad Request: can't parse entities: Character '.' is")
    with structlog.testing.capture_logs() as logs:
        await adapter.send(markdown("**Done.** See [here](https://e.x)."))
    assert [e["event"] for e in logs].count("telegram.format_fallback") == 1
    assert fake.texts.in_chat(42) == ["Done. See here."]
    assert "parse_mode" not in fake.sent[-1] or fake.sent[-1]["parse_mode"] is None


@pytest.mark.parametrize("text", ["*0||0*0||", "**a ||b** c||", "||a *b|| c*"])
def test_crossing_marks_keep_the_first_and_telegram_accepts_it(text: str) -> None:
    """Model text whose marks cross (Hypothesis found ``*0||0*0||``): MarkdownV2 marks
    only nest, so the second is dropped rather than the message refused."""
    shown, entities = parse_markdown_v2(to_markdown_v2(text))  # Refused fails the test
    assert len(entities) == 1 and shown.strip()


_PIECES = ["**", "```", "```py\n", "\n- ", "\n1. ", "](http://a.b)", "> ", "\n\n", "|", "\\"]
model_text = st.lists(
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=8)
    | st.sampled_from([*_PIECES, *"_*[]()~`>#+-=|{}.!"]),
    max_size=40,
).map("".join)


@pytest.mark.slow
@given(text=model_text)
@hsettings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_any_model_text_converts_to_markdown_v2_telegram_accepts(text: str) -> None:
    converted = to_markdown_v2(text)
    if not text.strip():
        return
    shown, _entities = parse_markdown_v2(converted)  # Refused fails the property
    assert shown.strip()  # Telegram refuses an empty message
    assert utf16_len(shown) <= max(shown_length(text), utf16_len(readable(text)))


@given(text=model_text.filter(lambda t: t.strip() != ""))
@hsettings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
async def test_any_model_text_reaches_the_chat_exactly_once(
    adapter: TelegramAdapter, fake: FakeTelegram, text: str
) -> None:
    before = len(fake.texts.in_chat(42))
    await adapter.send(markdown(text))
    assert len(fake.texts.in_chat(42)) == before + 1


def test_splitting_measures_what_telegram_shows() -> None:
    """A long answer's parts each fit 4,096 units once converted, fences balanced."""
    text = ("# Heading\n\n---\n\n" + "word " * 60 + "\n") * 60
    parts = split_text(text, 4096, shown_length)
    assert len(parts) > 1
    for part in parts:
        shown, _ = parse_markdown_v2(to_markdown_v2(part))
        assert utf16_len(shown) <= 4096


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("*:*0**", ":0"),  # the converter nests italic in italic: MarkdownV2 cannot say that
        ("```", "```"),  # markup with nothing to show is sent as written, escaped
        ("**a** and ***b***", "a and b"),
    ],
)
def test_odd_model_text_still_converts_to_what_telegram_accepts(text: str, shown: str) -> None:
    assert parse_markdown_v2(to_markdown_v2(text))[0] == shown


@pytest.mark.slow
async def test_the_llm_agents_markdown_answer_renders_on_telegram(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    """End to end: the agent's answer is model Markdown, sent as MarkdownV2 and rendered."""
    model = FakeModel(reply=lambda body: MODEL_ANSWER)
    await model.start()
    telegram = {"token": fake.token, "base_url": fake.base_url, "poll_timeout": 1,
                "rate_limits": False, "typing": False}  # fmt: skip
    llm = {
        "providers": {"fake": {"base_url": model.url, "api_key": API_KEY}},
        "models": {"main": {"provider": "fake", "model": "main-model"}},
    }
    settings = make_settings(
        tmp_path, platforms={"telegram": telegram}, llm=llm, agent={"handler": "llm"}
    )
    gateway = Gateway(settings, build_adapters(settings))
    await gateway.start()
    try:
        with structlog.testing.capture_logs() as logs:
            fake.push(message=fake.message(42, "what is the plan?"))
            await fake.wait_for(lambda: bool(fake.sent), timeout=30)
            await gateway.drain()
    finally:
        await gateway.stop()
        await model.close()
    assert not [e for e in logs if e["event"] == "telegram.format_fallback"]
    [sent] = fake.sent
    assert sent["parse_mode"] == "MarkdownV2"
    shown, entities = parse_markdown_v2(sent["text"])
    assert fake.texts.in_chat(42) == [shown] == [readable(MODEL_ANSWER)]
    assert {"bold", "text_link", "code", "pre"} <= {e["type"] for e in entities}
