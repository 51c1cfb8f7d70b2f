"""A Discord interaction's ``locale`` is the language of its person's fixed messages
(issue 33); a locale that is not text is no hint."""

from __future__ import annotations

from typing import Any

import pytest

from tether.adapters.discord.normalize import interaction_origin
from tether.messages import language_of


def payload(**extra: Any) -> dict[str, Any]:
    """An interaction in a DM, as Discord sends it, reduced to what the origin reads."""
    user = {"id": "80351110224678912", "username": "ada", "global_name": "Ada"}
    return {"id": "1", "type": 2, "channel_id": "41771983423143937", "user": user, **extra}


def test_an_interaction_carries_its_persons_locale() -> None:
    _, sender, _ = interaction_origin(payload(locale="en-US"), "1")
    assert sender.language == "en-US"
    assert language_of(sender.language) == "en"


@pytest.mark.parametrize(("locale", "language"), [("zh-CN", "zh"), ("zh-TW", "zh"), ("de", "en")])
def test_a_chinese_client_gets_chinese(locale: str, language: str) -> None:
    _, sender, _ = interaction_origin(payload(locale=locale), "1")
    assert language_of(sender.language) == language


@pytest.mark.parametrize("locale", [None, 42, "", ["zh"]])
def test_a_locale_that_is_not_text_is_no_hint(locale: object) -> None:
    _, sender, _ = interaction_origin(payload(locale=locale), "1")
    assert sender.language is None
