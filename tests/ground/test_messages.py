"""The fixed-message catalogue: every key in every language with the same placeholders,
every key the code says exists, the docs list them all, and language hints parse."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tether
from tether.config.loader import ConfigError, load_text
from tether.events import Conversation, Event, Sender
from tether.messages import KEYS, LANGUAGES, SHIPPED, Catalogue, language_of, placeholders, say

REPO = Path(tether.__file__).parent.resolve().parent
PRODUCT = ["gateway", "adapters", "memory", "scheduler", "config", "tether"]


def event(language: str | None) -> Event:
    return Event(
        key="k",
        platform="telegram",
        conversation=Conversation(platform="telegram", chat_id="1"),
        sender=Sender(id="1", language=language),
    )


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_language_has_every_key_with_the_same_placeholders(language: str) -> None:
    texts = SHIPPED[language]  # type: ignore[index]
    assert set(texts) == KEYS
    wrong = {k for k in KEYS if placeholders(texts[k]) != placeholders(SHIPPED["en"][k])}
    assert not wrong, wrong
    assert all(text.strip() for text in texts.values())


def said_keys() -> set[str]:
    """The literal keys of every ``say(event, "key", ...)`` in the product's code."""
    keys: set[str] = set()
    for folder in PRODUCT:
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "say"
                    and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant)
                ):
                    keys.add(str(node.args[1].value))
    return keys


def test_every_key_the_code_says_exists() -> None:
    used = said_keys()
    assert len(used) > 20  # the walk finds the calls
    assert used - KEYS == set()


def test_the_docs_list_every_key() -> None:
    page = (REPO / "docs" / "configuration.md").read_text()
    listed = set(re.findall(r"^\| `([a-z_]+)` \|", page, re.MULTILINE))
    assert listed == KEYS


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        ("zh", "zh"),
        ("zh-hans", "zh"),
        ("zh_CN", "zh"),
        ("ZH-TW", "zh"),
        ("en", "en"),
        ("en-US", "en"),
        ("de", "en"),
        ("", "en"),
        (None, "en"),
    ],
)
def test_language_hints(hint: str | None, expected: str) -> None:
    assert language_of(hint) == expected


@given(st.text(max_size=20))
def test_any_hint_is_a_shipped_language(hint: str) -> None:
    assert language_of(hint) in LANGUAGES


def test_outside_a_run_say_uses_the_shipped_catalogue_by_the_senders_language() -> None:
    assert say(event("zh-hans"), "stopped") == SHIPPED["zh"]["stopped"]
    assert say(event(None), "unknown_command", command="x") == (
        "Unknown command /x. /help lists what I can do."
    )
    with pytest.raises(KeyError, match="no_such_key"):
        say(None, "no_such_key")


def test_config_language_and_overrides() -> None:
    text = "messages:\n  language: en\n  en:\n    stopped: Halted.\n"
    catalogue: Catalogue = load_text(text).messages.catalogue()
    assert catalogue.say(event("zh"), "stopped") == "Halted."  # en wins over the hint
    assert catalogue.say(event("zh"), "nothing_running") == "Nothing is running."


@pytest.mark.parametrize(
    ("yaml_text", "where"),
    [
        ("messages:\n  zh:\n    unknown_comand: x\n", r"messages\.zh\.unknown_comand"),
        ("messages:\n  zh:\n    unknown_command: '/{cmd}'\n", r"messages\.zh\.unknown_command"),
        ("messages:\n  en:\n    stopped: 'Stopped {now}'\n", r"messages\.en\.stopped"),
        ("messages:\n  en:\n    greeting: 'Hi {name'\n", r"messages\.en\.greeting"),
        ("messages:\n  fr: {}\n", r"messages\.fr"),
        ("messages:\n  language: fr\n", r"messages\.language"),
    ],
)
def test_a_bad_messages_section_is_refused_at_its_key(yaml_text: str, where: str) -> None:
    with pytest.raises(ConfigError, match=where):
        load_text(yaml_text)


@given(st.text(max_size=30))
def test_any_override_text_loads_or_is_refused_by_name(text: str) -> None:
    """Whatever an operator writes, loading ends in a catalogue or a ConfigError naming
    the key, never another exception."""
    import yaml

    doc = yaml.safe_dump({"messages": {"zh": {"unknown_command": text}}})
    try:
        settings = load_text(doc)
    except ConfigError as exc:
        assert "messages.zh.unknown_command" in str(exc)
    else:
        assert settings.messages.catalogue().text("zh", "unknown_command", command="c")


def test_the_config_defaults_of_the_notices_are_the_catalogues_english() -> None:
    """``pipeline.dead_notice`` and ``llm.busy_notice`` left at their default are said in
    the chat's language: that default must be the catalogue's English text, word for word."""
    from tether.config.schema import LLMConfig, PipelineConfig

    assert PipelineConfig().dead_notice == SHIPPED["en"]["dead_notice"]
    assert LLMConfig.model_fields["busy_notice"].default == SHIPPED["en"]["busy_notice"]
