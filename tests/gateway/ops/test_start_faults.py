"""Start is all-or-nothing, and what stops it is one line naming the key.

Every test runs the real ``tether`` command as a subprocess, because what went wrong
lived there: after a start failure the store's reader thread and the SQLite writer
child kept the interpreter alive, so the process printed its error and hung forever
(systemd's ``Restart=on-failure`` never fired), and infrastructure errors came out as
tracebacks of 11 to 70 lines. Each test asserts: a non-zero exit by itself (the timeout
only turns a hang into a failure), exactly one line on stderr (logs go to a file), the
key named in it, no secret in it, and no SQLite writer left behind.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.telegram_api import TOKEN, FakeTelegram
from tests.support.config import write_config
from tests.support.processes import TETHER, subprocess_env, writers

#: Seconds before a start that should fail is called hung (it takes a few at most).
HANG = 30.0
PASSWORD = "hunter2-pg-secret"


async def fails_to_start(
    command: str, config: Path, *, env: dict[str, str] | None = None, stdin: bytes = b""
) -> str:
    """Run ``tether COMMAND -c CONFIG``; it must exit non-zero on its own, with one line
    on stderr and no writer left. Returns that line."""
    proc = await asyncio.create_subprocess_exec(
        TETHER, command, "-c", str(config),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=env or subprocess_env(),
    )  # fmt: skip
    try:
        _out, err = await asyncio.wait_for(proc.communicate(stdin), HANG)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        pytest.fail(f"tether {command} did not exit within {HANG:g} s after a start failure")
    assert proc.returncode not in (0, None)
    lines = err.decode(errors="replace").splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n" + "\n".join(
        lines[:40]
    )
    assert lines[0].startswith("tether: ") and "Traceback" not in lines[0]
    assert writers(config.parent / "tether.db") == []
    return lines[0]


def config(tmp_path: Path, **sections: Any) -> Path:
    """A config whose logs go to a file, so stderr holds only what the CLI prints."""
    return write_config(
        tmp_path, logging={"format": "json", "file": str(tmp_path / "log")}, **sections
    )


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound once, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another socket listens on for the test's duration."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


# -- run: the platform, the port ---------------------------------------------------


@pytest.mark.slow
async def test_run_exits_when_the_bot_api_is_unreachable(tmp_path: Path, closed_port: int) -> None:
    base_url = f"http://127.0.0.1:{closed_port}/bot"
    path = config(tmp_path, platforms={"telegram": {"token": TOKEN, "base_url": base_url}})
    line = await fails_to_start("run", path)
    assert line.startswith("tether: platforms.telegram: cannot reach the Bot API")
    assert TOKEN.split(":", 1)[1] not in line
    logged = (tmp_path / "log").read_text()
    assert "telegram.open_retry" in logged and "gateway.start_failed" in logged
    assert "gateway.stopped" in logged  # what had started was stopped


@pytest.mark.slow
async def test_run_exits_when_the_token_is_refused(tmp_path: Path) -> None:
    fake = await FakeTelegram(token="999:not-the-configured-token").start()
    try:
        path = config(tmp_path, platforms={"telegram": {"token": TOKEN, "base_url": fake.base_url}})
        line = await fails_to_start("run", path)
    finally:
        await fake.stop()
    assert line == ("tether: platforms.telegram.token was rejected by the Bot API (getMe failed)")


@pytest.mark.slow
async def test_run_exits_when_the_http_port_is_taken(tmp_path: Path, taken_port: int) -> None:
    path = config(tmp_path, http={"enabled": True, "host": "127.0.0.1", "port": taken_port})
    line = await fails_to_start("run", path)
    assert line == f"tether: http.port {taken_port} is in use on 127.0.0.1"


# -- run and chat: the store -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "chat"])
async def test_a_missing_store_directory_is_one_line(tmp_path: Path, command: str) -> None:
    db = tmp_path / "missing" / "tether.db"
    path = config(tmp_path, memory={"store": f"sqlite:///{db}"})
    line = await fails_to_start(command, path)
    assert line == (
        f"tether: memory.store: cannot open the SQLite database {db}:"
        f" directory {db.parent} does not exist"
    )


@pytest.mark.slow
async def test_a_store_directory_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("not a directory\n")
    db = tmp_path / "plain" / "tether.db"
    line = await fails_to_start("run", config(tmp_path, memory={"store": f"sqlite:///{db}"}))
    assert line == (
        f"tether: memory.store: cannot open the SQLite database {db}:"
        f" {db.parent} is not a directory"
    )


@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "chat", "status"])
async def test_a_file_that_is_not_a_database_is_one_line(tmp_path: Path, command: str) -> None:
    (tmp_path / "tether.db").write_bytes(
        b"this is not an SQLite database, it is a text file\n" * 40
    )
    line = await fails_to_start(command, config(tmp_path))
    assert line == (
        f"tether: memory.store: cannot open the SQLite database {tmp_path / 'tether.db'}:"
        " DatabaseError: file is not a database"
    )


@pytest.mark.slow
async def test_chat_exits_when_start_fails_after_the_store_opened(tmp_path: Path) -> None:
    """The tiktoken encoding loads after the store (and its writer) started."""
    (tmp_path / "plain").write_text("not a directory\n")
    env = subprocess_env(TIKTOKEN_CACHE_DIR=str(tmp_path / "plain" / "cache"))
    line = await fails_to_start("chat", config(tmp_path), env=env, stdin=b"hello\n")
    assert line.startswith("tether: cannot load the tiktoken encoding o200k_base")
    assert "TIKTOKEN_CACHE_DIR" in line
    assert "gateway.stopped" in (tmp_path / "log").read_text()


def _pg_url(netloc: str, database: str = "test") -> str:
    return f"postgresql://postgres:{PASSWORD}@{netloc}/{database}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("where", "problem"),
    [
        ("closed", "cannot connect to PostgreSQL at 127.0.0.1:{port}/test: connection refused"),
        ("bad-host", "cannot connect to PostgreSQL at no-such-host.invalid:5432/test:"),
        ("bad-port", "cannot connect to PostgreSQL at 127.0.0.1:99999/test:"),
        ("bad-port-text", "cannot connect to PostgreSQL at 127.0.0.1:db/test:"),
    ],
)
async def test_postgres_that_cannot_be_reached_is_one_line_without_the_password(
    tmp_path: Path, closed_port: int, where: str, problem: str
) -> None:
    netloc = {
        "closed": f"127.0.0.1:{closed_port}",
        "bad-host": "no-such-host.invalid:5432",
        "bad-port": "127.0.0.1:99999",
        "bad-port-text": "127.0.0.1:db",
    }[where]
    line = await fails_to_start("run", config(tmp_path, memory={"store": _pg_url(netloc)}))
    assert line.startswith("tether: memory.store: " + problem.format(port=closed_port))
    assert PASSWORD not in line


async def test_an_unknown_postgres_database_is_one_line(tmp_path: Path, pg_server: str) -> None:
    store = _pg_url("127.0.0.1:5432", "tether_surely_missing_db")
    line = await fails_to_start("run", config(tmp_path, memory={"store": store}))
    assert line == (
        "tether: memory.store: cannot connect to PostgreSQL at"
        " 127.0.0.1:5432/tether_surely_missing_db: InvalidCatalogNameError:"
        ' database "tether_surely_missing_db" does not exist'
    )


# -- check: the log file, the plugins ----------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("where", ["missing-dir", "a-directory"])
async def test_an_unwritable_log_file_is_one_line(tmp_path: Path, where: str) -> None:
    target = tmp_path / "missing" / "tether.log" if where == "missing-dir" else tmp_path
    path = write_config(tmp_path, logging={"file": str(target)})
    line = await fails_to_start("check", path)
    assert line.startswith(f"tether: logging.file: cannot write to {target}: ")


@pytest.mark.slow
async def test_a_plugin_that_raises_at_import_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "exploding_plugin.py").write_text("raise RuntimeError('boom at import')\n")
    env = subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    path = config(tmp_path, plugins=["tests.plugins.blocking:router", "exploding_plugin:router"])
    for command in ("check", "run"):
        line = await fails_to_start(command, path, env=env)
        assert line == (
            "tether: plugins[1]: importing 'exploding_plugin' raised RuntimeError: boom at import"
        )
