"""A newcomer's first hour: the operator is admitted from the start, the built-in
commands answer under every agent, a stranger in a group hears how to get in, and an
edit is re-answered only when asked for (issue 23)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes.discord_api import CHANNEL_ID, DM_CHANNEL_ID, FakeDiscord
from tests.fakes.feishu_api import APP_ID as FEISHU_APP
from tests.fakes.feishu_api import APP_SECRET as FEISHU_SECRET
from tests.fakes.feishu_api import FakeFeishu, message_event
from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import ROOT, make_settings, merge, write_config
from tests.support.gateway import gateway_for, running
from tests.support.processes import TETHER
from tether.adapters.loopback import LoopbackAdapter
from tether.config import Settings, load_text
from tether.events import Event, Kind
from tether.gateway.builtin.access import APPROVED_NOTICE, HINT
from tether.gateway.builtin.echo import EDITED
from tether.testing.model import FakeModel

OWNER_LINE = re.compile(r"send /owner ([A-Z0-9]{8}) to the bot")
NOBODY: dict[str, Any] = {"allow": [], "admins": []}


async def turn(adapter: LoopbackAdapter, text: str, **kwargs: Any) -> str:
    """Say ``text`` and return the one answer it gets."""
    count = len(adapter.sent)
    await adapter.say(text, **kwargs)
    sent = await adapter.wait_for_sent(count + 1)
    return sent[count].message.text


def owner_code(err: str) -> str:
    match = OWNER_LINE.search(err)
    assert match, err
    return match.group(1)


# -- built-in commands under echo -----------------------------------------------------------


async def test_echo_answers_the_built_in_commands_instead_of_echoing_them(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, access={"admins": ["loopback:root"]})
    async with running(settings) as (_gateway, adapter):
        help_ = await turn(adapter, "/help")
        start = await turn(adapter, "/start")
        remembered = await turn(adapter, "/remember I like tea")
        facts = await turn(adapter, "/forget")
        forgotten = await turn(adapter, "/forget tea")
        usage = await turn(adapter, "/usage")
        whoami = await turn(adapter, "/whoami", user="ada", chat="5")
        echoed = await turn(adapter, "hello")
    assert help_.startswith("I answer with your text. Commands:")
    for command in ("/help", "/start", "/usage", "/remember", "/forget", "/whoami"):
        assert f"\n{command} - " in help_, command
    assert "/approve" not in help_  # u1 is no admin
    assert start.startswith("Hi, I'm Tether.\n\nI answer with your text.")
    assert remembered == "I'll remember: I like tea"
    assert facts.startswith("Saved facts:\n1. I like tea")
    assert forgotten == "Forgotten:\n- I like tea"
    assert usage.startswith("Token usage in this chat")
    assert whoami == "user loopback:ada, chat loopback:5"
    assert echoed == "hello"


async def test_help_lists_the_plugins_commands_and_admin_ones_to_admins_only(
    tmp_path: Path,
) -> None:
    settings = make_settings(
        tmp_path,
        access={"admins": ["loopback:root"]},
        plugins=["tests.plugins.first_message:router"],
    )
    async with running(settings) as (_gateway, adapter):
        guest = await turn(adapter, "/help", user="guest")
        admin = await turn(adapter, "/help", user="root", chat="2")
    assert "\n/weather - the forecast for a city" in guest
    assert "/reindex" not in guest and "/approve" not in guest
    assert "\n/reindex - rebuild the search index" in admin
    assert "\n/approve - " in admin


# -- the operator is admitted from the start ---------------------------------------------------


async def test_the_first_start_prints_an_owner_code_that_makes_its_sender_admin_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = make_settings(tmp_path, access=NOBODY)
    async with running(settings) as (_gateway, adapter):
        code = owner_code(capsys.readouterr().err)
        assert await turn(adapter, "hello", chat="9", user="9") != "hello"  # a pairing code
    async with running(settings) as (_gateway, adapter):
        assert owner_code(capsys.readouterr().err) == code  # survives a restart until used
        wrong = await turn(adapter, "/owner AAAAAAAA", chat="8", user="8")
        claimed = await turn(adapter, f"/owner {code.lower()}", chat="8", user="8")
        echoed = await turn(adapter, "hello", chat="8", user="8")
        again = await turn(adapter, f"/owner {code}", chat="7", user="7")
        help_ = await turn(adapter, "/help", chat="8", user="8")
    assert wrong == "That is not a valid owner code."
    assert claimed.startswith("You are the bot's owner now")
    assert echoed == "hello"
    assert again == "That is not a valid owner code."  # single use
    assert "\n/approve - " in help_  # the owner is an admin
    async with running(settings) as _:
        assert "/owner" not in capsys.readouterr().err  # an owner exists: no new code


@pytest.mark.slow
async def test_the_cli_neither_lists_nor_approves_the_owner_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, access=NOBODY)
    async with running(load_text(config.read_text())) as (_gateway, adapter):
        code = owner_code(capsys.readouterr().err)
        listed = await asyncio.to_thread(
            subprocess.run,
            [TETHER, "pair", "list", "-c", str(config)],
            capture_output=True,
            text=True,
        )
        approve = await asyncio.to_thread(
            subprocess.run,
            [TETHER, "pair", "approve", code, "-c", str(config)],
            capture_output=True,
            text=True,
        )
        claimed = await turn(adapter, f"/owner {code}", chat="8", user="8")
    assert listed.returncode == 0, listed.stderr
    assert code not in listed.stdout and "tether." not in listed.stdout
    assert approve.returncode == 1 and "no pairing request" in approve.stderr
    assert claimed.startswith("You are the bot's owner now")  # the code was not burnt


async def test_no_owner_code_when_access_is_configured_or_only_the_console_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running(make_settings(tmp_path, access={"allow": ["loopback:1"]})):
        pass
    assert "/owner" not in capsys.readouterr().err


async def test_an_admin_approval_is_told_to_the_person_who_asked(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, access={"allow": [], "admins": ["loopback:root"]})
    async with running(settings) as (gateway, adapter):
        asked = await turn(adapter, "hi", chat="dm-7", user="7")
        code = asked.rsplit(" ", 1)[1]
        await adapter.say(f"/approve {code}", chat="1", user="root")
        sent = await adapter.wait_for_sent(3)
        await gateway.drain()
    told = {(d.message.target.chat_id, d.message.text) for d in sent[1:]}
    assert told == {("1", "Approved loopback:7 (7)."), ("dm-7", APPROVED_NOTICE)}


@pytest.mark.slow
async def test_an_approval_from_the_cli_is_told_once_by_the_running_gateway(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, access={"allow": [], "admins": ["loopback:root"]})
    settings = load_text(config.read_text())
    async with running(settings) as (gateway, adapter):
        asked = await turn(adapter, "hi", chat="dm-7", user="7")
        code = asked.rsplit(" ", 1)[1]
        cli = [TETHER, "pair", "approve", code, "-c", str(config)]
        done = await asyncio.to_thread(subprocess.run, cli, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        sent = await adapter.wait_for_sent(2)
        await gateway.access.tell_approved(gateway.inbox.accept, gateway.adapters)  # again
        await gateway.drain()
        await gateway.outbox.flush(5)
    told = [(d.message.target.chat_id, d.message.text) for d in adapter.sent[1:]]
    assert told == [("dm-7", APPROVED_NOTICE)] and len(sent) == 2


# -- a stranger in a group ---------------------------------------------------------------------


async def test_a_stranger_in_a_group_gets_one_hint_per_chat_not_one_per_message(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, access=NOBODY)
    async with running(settings) as (gateway, adapter):
        for text in ("@bot hello", "@bot anyone?", "@bot please"):
            await adapter.say(text, chat="-100", user="9", chat_type="group")
        await adapter.say("@bot hi", chat="-200", user="9", chat_type="group")
        await gateway.drain()
        await gateway.outbox.flush(5)
    hints = [(d.message.target.chat_id, d.message.text) for d in adapter.sent]
    assert hints == [("-100", HINT), ("-200", HINT)]


# -- edits ---------------------------------------------------------------------------------------


def edit(adapter: LoopbackAdapter, text: str) -> Event:
    event = adapter.event(text)
    return event.model_copy(update={"kind": Kind.EDIT, "key": event.key + ":edit"})


async def test_an_edit_is_ignored_by_default_and_reanswered_when_asked(tmp_path: Path) -> None:
    for on_edit, expected in (("ignore", []), ("reanswer", [f"{EDITED}hello there"])):
        (tmp_path / on_edit).mkdir()
        settings = make_settings(tmp_path / on_edit, agent={"on_edit": on_edit})
        async with running(settings) as (gateway, adapter):
            await adapter.deliver(edit(adapter, "hello there"))
            await gateway.drain()
            await gateway.outbox.flush(5)
        assert [d.message.text for d in adapter.sent] == expected, on_edit


@pytest.mark.slow
async def test_the_llm_agent_leaves_an_edit_alone_unless_told(tmp_path: Path) -> None:
    fake = FakeModel()
    await fake.start()
    try:
        for on_edit in ("ignore", "reanswer"):
            llm = {
                "providers": {"p": {"base_url": fake.url, "api_key": "k"}},
                "models": {"m": {"provider": "p", "model": "gpt"}},
            }
            agent = {} if on_edit == "ignore" else {"on_edit": on_edit}
            (tmp_path / on_edit).mkdir()
            settings = make_settings(tmp_path / on_edit, llm=llm, agent=agent)
            async with running(settings) as (gateway, adapter):
                await adapter.deliver(edit(adapter, "fixed typo"))
                await gateway.drain()
                await gateway.outbox.flush(5)
            sent = [d.message.text for d in adapter.sent]
            if on_edit == "ignore":
                assert sent == [] and fake.calls == 0
            else:
                assert len(sent) == 1 and sent[0].startswith(EDITED) and fake.calls == 1
    finally:
        await fake.close()


# -- every platform's setup section, followed as written -----------------------------------------


def setup_section(page: str) -> str:
    """The ``## Setup`` section of ``docs/{page}.md``: what a newcomer follows."""
    text = (ROOT / "docs" / f"{page}.md").read_text()
    return text.split("\n## Setup\n", 1)[1].split("\n## ", 1)[0]


def setup_config(page: str, tmp_path: Path, **fake: Any) -> Settings:
    """The setup section's YAML exactly as written, pointed at the fake platform (``fake``
    merged into the platform's section) with the store in ``tmp_path``."""
    block = re.search(r"```yaml\n(.*?)```", setup_section(page), re.DOTALL)
    assert block, page
    written = yaml.safe_load(textwrap.dedent(block.group(1)))
    assert set(written["platforms"]) == {"console", page}
    config = merge(written, {"platforms": {page: fake}})
    config["memory"] = {"store": f"sqlite:///{tmp_path / 'tether.db'}"}
    config["http"] = {"enabled": False}
    return load_text(yaml.safe_dump(config))


def documented(section: str, *answers: str) -> None:
    """Each answer the bot gave is written in the setup section, word for word."""
    flat = " ".join(section.split())
    for answer in answers:
        assert " ".join(answer.split()) in flat, answer


async def test_the_telegram_setup_works_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = await FakeTelegram().start()
    monkeypatch.setenv("TELEGRAM_TOKEN", fake.token)
    settings = setup_config("telegram", tmp_path, base_url=fake.base_url, poll_timeout=1)
    try:
        async with gateway_for(settings) as gateway:
            code = owner_code(capsys.readouterr().err)
            fake.push(message=fake.message(42, f"/owner {code}"))
            await fake.wait_for(lambda: len(fake.sent) >= 1)
            hello = fake.push(message=fake.message(42, "hello"))
            await fake.wait_for(lambda: len(fake.sent) >= 2)
            await gateway.drain()
    finally:
        await fake.stop()
    claimed, answered = fake.sent
    assert answered["text"] == "hello"
    assert answered["reply_parameters"]["message_id"] == hello["message"]["message_id"]
    documented(setup_section("telegram"), "send /owner", claimed["text"], "answers `hello`")


async def test_the_discord_setup_works_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = await FakeDiscord().start()
    monkeypatch.setenv("DISCORD_TOKEN", fake.token)
    section = {"api_base": fake.api_base, "gateway_url": fake.gateway_url}
    settings = setup_config("discord", tmp_path, **section)
    try:
        async with gateway_for(settings) as gateway:
            await fake.wait_for(lambda: fake.connected >= 1)
            code = owner_code(capsys.readouterr().err)
            await fake.say(CHANNEL_ID, "hello", mention_bot=True)  # before: a hint
            await fake.wait_for(lambda: len(fake.sent) >= 1)
            await fake.say(DM_CHANNEL_ID, f"/owner {code}")
            await fake.wait_for(lambda: len(fake.sent) >= 2)
            hello = await fake.say(CHANNEL_ID, "hello", mention_bot=True)
            await fake.wait_for(lambda: len(fake.sent) >= 3)
            await gateway.drain()
    finally:
        await fake.stop()
    hint, claimed, answered = (sent["content"] for sent in fake.sent)
    assert hint == HINT
    assert answered == "@Tether hello"
    assert str(fake.sent[2]["message_reference"]["message_id"]) == hello["id"]
    documented(setup_section("discord"), hint, claimed, "answers `@Tether hello`")


async def test_the_feishu_setup_works_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeFeishu().start()
    monkeypatch.setenv("FEISHU_APP_SECRET", FEISHU_SECRET)
    settings = setup_config("feishu", tmp_path, app_id=FEISHU_APP, domain=fake.domain)
    try:
        async with gateway_for(settings) as gateway:
            adapter = gateway.adapters["feishu"]
            await fake.until(lambda: adapter.connected)
            code = owner_code(capsys.readouterr().err)
            fake.push_event(message_event("om_1", f"/owner {code}", token=""))
            await fake.until(lambda: len(fake.messages) >= 1)
            fake.push_event(message_event("om_2", "hello", token=""))
            await fake.until(lambda: len(fake.messages) >= 2)
            await gateway.drain()
    finally:
        fake.stop()
    claimed, answered = fake.messages
    assert answered["content"] == {"text": "hello"} and answered["parent_id"] == "om_2"
    documented(setup_section("feishu"), claimed["content"]["text"], "answers `hello`")
