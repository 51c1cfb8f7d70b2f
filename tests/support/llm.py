"""An ``llm:`` section for the scripted model (``tether.testing.FakeModel``), and one turn
of the agent through the loopback platform."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from tests.support.config import make_settings
from tether.adapters.loopback import LoopbackAdapter
from tether.config import Settings
from tether.memory.compaction import SUMMARY_INSTRUCTIONS
from tether.testing.model import API_KEY, Body, FakeModel


def llm_section(fake: FakeModel, **extra: Any) -> dict[str, Any]:
    section: dict[str, Any] = {
        "providers": {"fake": {"base_url": fake.url, "api_key": API_KEY, "timeout": 5}},
        "models": {
            "main": {
                "provider": "fake",
                "model": "main-model",
                "price_prompt": 1000.0,
                "price_completion": 2000.0,
            },
            "backup": {"provider": "fake", "model": "backup-model"},
        },
        "default": "main",
        "fallbacks": ["backup"],
    }
    section.update(extra)
    return section


def llm_settings(
    tmp_path: Path, fake: FakeModel, llm: dict[str, Any] | None = None, **memory: Any
) -> Settings:
    return make_settings(tmp_path, llm=llm or llm_section(fake), memory=memory)


async def turn(adapter: LoopbackAdapter, text: str, chat: str = "1") -> str:
    """Say ``text`` and return the reply it produced (its checkpoint has committed)."""
    before = len(adapter.sent)
    await adapter.say(text, chat=chat, key=f"loopback:{uuid.uuid4()}")  # unique across restarts
    sent = await adapter.wait_for_sent(before + 1)
    return sent[before].message.text


def default_reply(body: Body) -> str:
    if is_summary(body):
        return f"SUMMARY covering: {body['messages'][-1]['content'][-60:]}"
    return f"answer to: {body['messages'][-1]['content'][:40]}"


def is_summary(body: Body) -> bool:
    return bool(body["messages"]) and body["messages"][0]["content"].startswith(
        SUMMARY_INSTRUCTIONS[:40]
    )
