"""Shared fixtures: settings on a temp store, and a gateway running on the loopback adapter."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from tests.fakes.cluster import SECRET as CLUSTER_SECRET
from tests.fakes.discord_api import TOKEN as DISCORD_TOKEN
from tests.fakes.feishu_api import APP_SECRET as FEISHU_APP_SECRET
from tests.fakes.feishu_api import ENCRYPT_KEY as FEISHU_ENCRYPT_KEY
from tests.fakes.feishu_api import VERIFICATION_TOKEN as FEISHU_VERIFICATION_TOKEN
from tests.fakes.telegram_api import TOKEN as TELEGRAM_TOKEN
from tests.fakes.telegram_api import FakeTelegram
from tether.adapters.loopback import LoopbackAdapter
from tether.config import Settings, load_text
from tether.gateway.app import Gateway
from tether.gateway.handler.routing import Router
from tether.gateway.ops import logs
from tether.testing.model import API_KEY as OPENAI_API_KEY

ROOT = Path(__file__).resolve().parent.parent

# Hypothesis: few examples per property in the suite, so `make test` stays fast; many
# under `make fuzz` (HYPOTHESIS_PROFILE=fuzz, on the tests Hypothesis marks `hypothesis`).
# Tests leave max_examples to the profile. No deadline: two shared cores and a slow first
# import make per-example timings noise, not findings.
_PROFILE = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
hypothesis_settings.register_profile("suite", max_examples=50, **_PROFILE)
hypothesis_settings.register_profile("fuzz", max_examples=5_000, print_blob=True, **_PROFILE)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))
TETHER = str(Path(sys.executable).with_name("tether"))


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def config_dict(tmp_path: Path, **sections: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "memory": {"store": f"sqlite:///{tmp_path / 'tether.db'}"},
        "http": {"enabled": False},
        "platforms": {"console": {"enabled": False}},
        "pipeline": {"backoff_base": 0.01, "backoff_max": 0.05, "sweep_interval": 0.1},
        "outbox": {"backoff_base": 0.01, "backoff_max": 0.05},
        "logging": {"format": "json"},
        "access": {"allow": ["*"], "rate_limit": {"messages": 0}},
    }
    return merge(base, sections)


def make_settings(tmp_path: Path, **sections: Any) -> Settings:
    return load_text(yaml.safe_dump(config_dict(tmp_path, **sections)))


def write_config(tmp_path: Path, **sections: Any) -> Path:
    path = tmp_path / "tether.yaml"
    path.write_text(yaml.safe_dump(config_dict(tmp_path, **sections)))
    return path


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a `tether` subprocess that can import the tests' plugins."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


async def spawn_run(
    config: Path, log: Path, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    """`tether run -c config` as a subprocess, stderr appended to ``log``, no stdin."""
    with log.open("ab") as stderr:
        return await asyncio.create_subprocess_exec(
            TETHER, "run", "-c", str(config),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
            env=env or subprocess_env(),
        )  # fmt: skip


def db_rows(tmp_path: Path, sql: str, *params: object) -> list[tuple[Any, ...]]:
    """Query the test's SQLite store directly, as an operator would."""
    with sqlite3.connect(tmp_path / "tether.db") as db:
        return list(db.execute(sql, params))


def inbox_rows(tmp_path: Path) -> list[tuple[str, str]]:
    return db_rows(tmp_path, "SELECT key, status FROM inbox ORDER BY seq")


def events_named(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The captured structlog entries of one event name."""
    return [entry for entry in logs if entry["event"] == name]


@asynccontextmanager
async def running(
    settings: Settings, router: Router | None = None, adapter: LoopbackAdapter | None = None
) -> AsyncIterator[tuple[Gateway, LoopbackAdapter]]:
    adapter = adapter or LoopbackAdapter()
    gateway = Gateway(settings, {"loopback": adapter}, router=router)
    await gateway.start()
    try:
        yield gateway, adapter
    finally:
        await gateway.stop()


#: Secrets the tests configure; none may appear in any test's captured output.
SECRETS: set[str] = {
    TELEGRAM_TOKEN,
    TELEGRAM_TOKEN.split(":", 1)[1],
    "s3cret-webhook_token",  # tests/test_telegram.py's webhook secret
    FEISHU_APP_SECRET,
    FEISHU_ENCRYPT_KEY,
    FEISHU_VERIFICATION_TOKEN,
    DISCORD_TOKEN,
    OPENAI_API_KEY,
    CLUSTER_SECRET,
}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Fail any test whose captured logs (stdout/stderr/log records) contain a secret."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or report.failed:
        return
    captured = "".join(content for _name, content in report.sections)
    leaked = sorted(s for s in SECRETS if s in captured)
    if leaked:
        report.outcome = "failed"
        report.longrepr = f"a configured secret appeared in captured output: {leaked}"


@pytest.fixture(autouse=True)
def _logging() -> None:
    """Log to this test's captured stderr (a CLI call in an earlier test may have
    pointed structlog at a stream that is closed now)."""
    logs.configure("info", "json", stream=sys.stderr)


PG_ADMIN = os.environ.get("TETHER_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


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
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@asynccontextmanager
async def bot_api() -> AsyncIterator[FakeTelegram]:
    """A fake Bot API on 127.0.0.1, stopped when the block ends."""
    server = await FakeTelegram().start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    """A fake Bot API for the test. A module testing another platform's fake (Discord,
    Feishu, OpenAI) defines its own ``fake``, which pytest prefers to this one."""
    async with bot_api() as server:
        yield server


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    """A fake Bot API, by the name modules that test several platforms at once use."""
    async with bot_api() as server:
        yield server
