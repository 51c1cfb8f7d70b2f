"""pytest fixtures for testing a Tether bot; in a ``conftest.py``::

    pytest_plugins = ["tether.testing.plugin"]

``fake_model`` is a started :class:`~tether.testing.model.FakeModel` (answering "ok"
until the test sets ``fake_model.reply``, or scripts it with
``fake_model.reply = scripted(...)``), stopped after the test. It needs pytest-asyncio,
which async tests need anyway.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from tether.testing.model import FakeModel


@pytest_asyncio.fixture
async def fake_model() -> AsyncIterator[FakeModel]:
    async with FakeModel() as model:
        yield model
