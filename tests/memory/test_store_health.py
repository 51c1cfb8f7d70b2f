"""Readiness tells the truth about the store, and the writer never makes a database
(issue 14, bug 8), and its errors are log lines like the gateway's own.

``/readyz`` stayed 200 while nothing could be written: a full disk, the database's
directory deleted under the running gateway (SQLite goes on writing into the deleted
file without a word). And a writer started after the directory was made again created an
empty database without tables, so every write failed until a restart. The faults here
are real: the writer process's file-size limit set to zero (the kernel then refuses its
writes, as a full disk does), the directory removed with ``rmtree``, a corrupt frame on
the writer's pipe.
"""

from __future__ import annotations

import asyncio
import json
import resource
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from tests.fixtures import _pg
from tests.support.config import make_settings
from tests.support.gateway import running
from tether.adapters.loopback import LoopbackAdapter
from tether.config import Settings
from tether.gateway.app import Gateway
from tether.gateway.ops import logs
from tether.memory.sqlite import SqliteStore


async def readyz(gateway: Gateway) -> tuple[int, dict[str, Any]]:
    assert gateway.http is not None
    url = f"http://127.0.0.1:{gateway.http.port}/readyz"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.json()


def settings_in(data: Path, tmp_path: Path) -> Settings:
    return make_settings(
        tmp_path,
        memory={"store": f"sqlite:///{data / 'tether.db'}"},
        http={"enabled": True, "port": 0},
    )


def sqlite_of(gateway: Gateway) -> SqliteStore:
    assert isinstance(gateway.store, SqliteStore)
    return gateway.store


def disk_full(store: SqliteStore, full: bool) -> None:
    """Make the kernel refuse (or allow again) every file write of the writer process."""
    writer = store._link.process
    assert writer is not None
    _soft, hard = resource.prlimit(writer.pid, resource.RLIMIT_FSIZE)
    resource.prlimit(writer.pid, resource.RLIMIT_FSIZE, (0 if full else hard, hard))


async def test_readyz_is_503_while_writes_fail_and_200_once_one_succeeds(tmp_path: Path) -> None:
    loop = LoopbackAdapter()
    async with running(settings_in(tmp_path, tmp_path), adapter=loop) as (gateway, _):
        store = sqlite_of(gateway)
        assert (await readyz(gateway))[0] == 200

        disk_full(store, True)
        with pytest.raises(Exception, match="disk I/O error"):
            await store.accept([(loop.event("lost"), "loopback:1")])
        status, body = await readyz(gateway)
        assert status == 503
        assert any(
            "writes to" in reason and "disk I/O error" in reason for reason in body["reasons"]
        ), body

        # Room again: readiness comes back by itself (its probe write succeeds), without
        # waiting for traffic that a load balancer would keep away meanwhile.
        disk_full(store, False)
        assert await readyz(gateway) == (200, {"status": "ready"})
        [row] = await store.accept([(loop.event("kept"), "loopback:1")])
        assert row is not None


async def test_a_deleted_database_directory_is_503_and_no_empty_database_is_made(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    loop = LoopbackAdapter()
    async with running(settings_in(data, tmp_path), adapter=loop) as (gateway, _):
        store = sqlite_of(gateway)
        assert (await readyz(gateway))[0] == 200

        shutil.rmtree(data)
        status, body = await readyz(gateway)
        assert status == 503
        assert any("tether.db was deleted" in reason for reason in body["reasons"]), body
        # A commit into the deleted file reaches no disk: it is not acknowledged.
        with pytest.raises(Exception, match="deleted"):
            await store.accept([(loop.event("into the void"), "loopback:1")])

        # The directory is back, empty: a new writer refuses to make a database there.
        data.mkdir()
        writer = store._link.process
        if writer is not None:
            writer.kill()
            await writer.wait()
        with pytest.raises(Exception, match=r"cannot open .*tether\.db"):
            await store.accept([(loop.event("nowhere"), "loopback:1")])
        assert list(data.iterdir()) == []
        status, body = await readyz(gateway)
        assert status == 503, body


@pytest.fixture
def pg_role_dsn(pg_dsn: str) -> Iterator[tuple[str, str, str]]:
    """``pg_dsn`` as a role of its own, no superuser, so that privileges bind; with the
    role's and the schema's names."""
    role = f"tether_writer_{uuid.uuid4().hex[:8]}"
    schema = pg_dsn.rsplit("search_path=", 1)[1]
    _pg(f'CREATE ROLE "{role}" LOGIN')
    _pg(f'GRANT ALL ON SCHEMA "{schema}" TO "{role}"')
    try:
        yield pg_dsn.replace("://postgres@", f"://{role}@"), role, schema
    finally:
        _pg(f'DROP OWNED BY "{role}"')
        _pg(f'DROP ROLE "{role}"')


async def test_postgres_readyz_is_503_while_writes_are_refused(
    tmp_path: Path, pg_role_dsn: tuple[str, str, str]
) -> None:
    """PostgreSQL answers queries but refuses writes (privileges revoked, as a read-only
    failover would): not ready, until a probe write succeeds again."""
    dsn, role, schema = pg_role_dsn
    settings = make_settings(tmp_path, memory={"store": dsn}, http={"enabled": True, "port": 0})
    tables = f'ALL TABLES IN SCHEMA "{schema}"'
    loop = LoopbackAdapter()
    async with running(settings, adapter=loop) as (gateway, _):
        assert (await readyz(gateway))[0] == 200

        await asyncio.to_thread(_pg, f'REVOKE INSERT, UPDATE ON {tables} FROM "{role}"')
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await gateway.store.accept([(loop.event("refused"), "loopback:1")])
        status, body = await readyz(gateway)
        assert status == 503
        assert any(
            "writes fail" in reason and "permission denied" in reason for reason in body["reasons"]
        ), body
        assert role not in json.dumps(body)  # the DSN is never in a reason

        await asyncio.to_thread(_pg, f'GRANT INSERT, UPDATE ON {tables} TO "{role}"')
        assert await readyz(gateway) == (200, {"status": "ready"})


async def test_writer_errors_reach_a_json_log_as_json_lines(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """With JSON logging, every line on stderr is JSON — the writer's errors included:
    one it answers (a database it cannot open) and one that ends it (a corrupt frame)."""
    logs.configure("info", "json", stream=sys.stderr)  # the stream capfd captures
    data = tmp_path / "data"
    data.mkdir()
    store = SqliteStore(str(data / "tether.db"))
    await store.open()
    try:
        writer = store._link.process
        assert writer is not None and writer.stdin is not None
        writer.stdin.write(b"\x00\x00\x00\x04junk")  # a frame that does not unpickle
        await writer.wait()
        shutil.rmtree(data)  # the next writer cannot open the database
        with pytest.raises(Exception):  # noqa: B017 -- what it says is asserted below, in the log
            await store.accept([(LoopbackAdapter().event("x"), "loopback:1")])
    finally:
        data.mkdir()
        await store.close()
    err = capfd.readouterr().err
    entries = [json.loads(line) for line in err.splitlines() if line.strip()]
    events = {entry["event"] for entry in entries}
    assert "store.writer_crashed" in events, events
    assert any("cannot open" in json.dumps(entry) for entry in entries), entries
