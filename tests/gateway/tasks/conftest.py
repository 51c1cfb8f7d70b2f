"""What the tasks tests share: telling a task's model request from the chat's, and
holding the task's requests at the fake model while a test looks at it running."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tether.gateway.tasks.run import BRIEF
from tether.testing.model import Body, FakeModel


def is_task(body: Body) -> bool:
    """A request whose system prompt carries the task brief is the task's."""
    return any(BRIEF in str(m.get("content") or "") for m in body.get("messages", []))


@pytest.fixture
async def gate(model: FakeModel) -> AsyncIterator[asyncio.Event]:
    """Held task requests go on waiting until the test ends (then the fake can close)."""
    release = asyncio.Event()
    model.hold(is_task, release)
    yield release
    release.set()
