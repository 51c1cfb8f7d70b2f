"""The fake Slack for these tests (``tests/fixtures.py`` starts the other platforms' fakes;
this one moves there when the lead wires Slack into the gateway)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.slack_api import FakeSlack


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    fake = await FakeSlack().start()
    try:
        yield fake
    finally:
        await fake.stop()
