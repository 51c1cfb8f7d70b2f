"""The fixtures of the fake servers and the stores: the one place each is started.

Every fake server runs on 127.0.0.1 and is stopped after its test. A test module names
the fixture it needs (``telegram``, ``discord_fake``, ``feishu``, ``model``); one that talks
to a single platform may alias it as ``fake`` (``tests/adapters/discord/...``), and one
that needs a fake with more behaviour (the media fakes) defines that fixture itself.
``store`` is every store the contract holds: SQLite, in-memory and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.fakes.counter import Counter
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.feishu_api import FakeFeishu
from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import make_settings
from tether.config import Settings
from tether.memory.inmemory import MemoryStore
from tether.memory.sqlite import SqliteStore
from tether.memory.store import Store
from tether.memory.stores import open_store
from tether.testing import FakeModel

PG_ADMIN = os.environ.get("TETHER_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


# -- the fake platforms and the model -------------------------------------------------


@asynccontextmanager
async def bot_api() -> AsyncIterator[FakeTelegram]:
    """A fake Bot API on 127.0.0.1, stopped when the block ends."""
    server = await FakeTelegram().start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    async with bot_api() as server:
        yield server


@pytest.fixture
async def discord_fake() -> AsyncIterator[FakeDiscord]:
    server = await FakeDiscord().start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def feishu() -> Iterator[FakeFeishu]:
    server = FakeFeishu().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def model() -> AsyncIterator[FakeModel]:
    """The scripted OpenAI-compatible model (``tether.testing``), answering "ok"."""
    async with FakeModel() as server:
        yield server


# -- stores ---------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "memory", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """Each store in turn, opened: what the contract says of one, it says of all."""
    if request.param == "sqlite":
        found: Store = SqliteStore(str(tmp_path / "contract.db"))
    elif request.param == "postgres":
        found = open_store(request.getfixturevalue("pg_dsn"))
    else:
        found = MemoryStore()
    await found.open()
    try:
        yield found
    finally:
        await found.close()


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The test PostgreSQL server: skipped when unreachable, except in CI, where it fails."""
    import asyncpg

    async def probe() -> str | None:
        try:
            conn = await asyncpg.connect(PG_ADMIN, timeout=5)
        except (OSError, asyncpg.PostgresError) as exc:
            return f"{type(exc).__name__}: {exc}"
        await conn.close()
        return None

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # outside any running loop
        problem = pool.submit(asyncio.run, probe()).result()
    if problem:
        message = f"PostgreSQL at {PG_ADMIN} is not reachable ({problem})"
        if os.environ.get("CI") == "true":
            pytest.fail(message + "; CI needs it", pytrace=False)
        pytest.skip(message)
    return PG_ADMIN


def _pg(sql: str) -> None:
    """Run one admin statement from outside any event loop (fixtures run inside one)."""
    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect(PG_ADMIN)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, run()).result()


@pytest.fixture
def pg_dsn(pg_server: str) -> Iterator[str]:
    """A DSN for a fresh, empty schema of its own, dropped afterwards."""
    schema = f"tether_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    _pg(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{pg_server}?search_path={schema}"
    finally:
        _pg(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def fake(telegram: FakeTelegram) -> FakeTelegram:
    """The Bot API by the name Telegram's test modules use; a module of another platform
    names its own fake ``fake`` (an alias of that platform's fixture)."""
    return telegram


@pytest.fixture
async def counter() -> AsyncIterator[Counter]:
    """The fake HTTP counter a tool's side effect hits (tests/fakes/counter.py): the
    proof of how many times it ran."""
    service = Counter()
    await service.start()
    try:
        yield service
    finally:
        await service.close()
