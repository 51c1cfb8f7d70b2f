"""The first hour on the command line: ``tether init``, plugins beside their config,
inspection that never makes a store, ``--version``, ``-c`` anywhere, plain help, ISO
times in JSON, and a quiet terminal under ``tether run`` (issue 23).

Each test runs the installed ``tether`` console script as a subprocess, as a new user
does: the environment has no ``PYTHONPATH`` pointing at the code under test's plugins
unless the test says so.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import pty
import signal
import socket
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from tests.fakes.cluster import free_port
from tests.support.config import ROOT, make_settings, write_config
from tests.support.gateway import running
from tests.support.processes import TETHER, ready
from tether import Context, Fatal, Router
from tether.config import load
from tether.errors import GatewayError

SECRET = "7777777:AAH-secret-value-never-written"


def tether(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TETHER, *args],
        stdin=subprocess.DEVNULL,  # never a terminal: no questions asked
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=60,
    )


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without PYTHONPATH: only what the command itself finds."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(extra)
    return env


# -- tether init -------------------------------------------------------------------


@pytest.mark.slow
def test_init_writes_a_commented_config_with_references_not_secrets(tmp_path: Path) -> None:
    path = tmp_path / "bot.yaml"
    env = clean_env(TELEGRAM_TOKEN=SECRET)
    args = ["init", "--platform", "telegram", "--platform", "discord"]
    args += ["--owner", "telegram:12345", "--llm", "openai", "-o", str(path)]
    done = tether(*args, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    text = path.read_text()
    assert "${TELEGRAM_TOKEN}" in text and "${DISCORD_TOKEN}" in text
    assert "${OPENAI_API_KEY}" in text and "\n# " in text[1:]  # commented
    assert SECRET not in text + done.stdout + done.stderr
    # It loads: with the variables set, it is a config `tether check` takes.
    values = {"TELEGRAM_TOKEN": SECRET, "DISCORD_TOKEN": "d", "OPENAI_API_KEY": "k"}
    settings = load(path, env=values)
    assert settings.access.admins == ["telegram:12345"] == settings.access.allow
    assert settings.platforms.telegram is not None and settings.platforms.discord is not None
    assert not settings.platforms.console.enabled and settings.agent.handler == "llm"
    checked = tether("check", "-c", str(path), cwd=tmp_path, env={**env, **values})
    assert checked.returncode == 0, checked.stderr
    # The next command names what is still unset, and the file to run.
    [next_line] = [line for line in done.stdout.splitlines() if line.startswith("next:")]
    assert "DISCORD_TOKEN=..." in next_line and "TELEGRAM_TOKEN" not in next_line
    assert next_line.endswith(f"tether run -c {path}")


@pytest.mark.slow
def test_init_keeps_an_existing_file_unless_forced(tmp_path: Path) -> None:
    (tmp_path / "tether.yaml").write_text("# mine\n")
    refused = tether("init", cwd=tmp_path, env=clean_env())
    assert refused.returncode != 0 and "--force" in refused.stderr
    assert (tmp_path / "tether.yaml").read_text() == "# mine\n"
    forced = tether("init", "--force", cwd=tmp_path, env=clean_env())
    assert forced.returncode == 0, forced.stderr
    assert "console" in (tmp_path / "tether.yaml").read_text()
    assert forced.stdout.splitlines()[-1] == "next: tether run"
    assert load(tmp_path / "tether.yaml").platforms.console.enabled


@pytest.mark.slow
def test_init_refuses_an_owner_on_a_platform_not_chosen(tmp_path: Path) -> None:
    done = tether("init", "--platform", "discord", "--owner", "telegram:1", cwd=tmp_path)
    assert done.returncode == 2 and "--owner" in done.stderr
    assert list(tmp_path.iterdir()) == []


def read_terminal(terminal: int) -> str:
    """Everything written to a pseudo-terminal whose other side is closed."""
    seen = b""
    while True:
        try:
            chunk = os.read(terminal, 4096)
        except OSError:  # EIO: the other side is closed and everything was read
            break
        if not chunk:
            break
        seen += chunk
    os.close(terminal)
    return seen.decode(errors="replace")


@pytest.mark.slow
def test_init_on_a_terminal_asks_what_the_flags_say(tmp_path: Path) -> None:
    terminal, side = pty.openpty()
    answers = b"telegram, nope\ntelegram\ntelegram:4242\n\n"  # a wrong name is asked again
    os.write(terminal, answers)
    done = subprocess.run(
        [TETHER, "init"], stdin=side, stdout=side, stderr=subprocess.PIPE,
        cwd=tmp_path, env=clean_env(), timeout=60,
    )  # fmt: skip
    os.close(side)
    seen = read_terminal(terminal)
    assert done.returncode == 0, done.stderr
    assert "not one of console, telegram, discord, feishu, slack: nope" in seen
    settings = load(tmp_path / "tether.yaml", env={"TELEGRAM_TOKEN": SECRET})
    assert settings.platforms.telegram is not None and settings.agent.handler == "echo"
    assert settings.access.admins == ["telegram:4242"]
    assert "next: TELEGRAM_TOKEN=... tether run" in seen


# -- plugins import beside their config ------------------------------------------


@pytest.mark.slow
def test_plugins_and_job_handlers_import_from_the_configs_directory(tmp_path: Path) -> None:
    package = tmp_path / "deploy" / "ourbot"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "handlers.py").write_text("from tether import Router\n\nrouter = Router()\n")
    (package / "jobs.py").write_text("async def tick(ctx):\n    pass\n")
    write_config(
        tmp_path / "deploy",
        plugins=["ourbot.handlers:router"],
        jobs=[{"id": "tick", "cron": "0 8 * * *", "handler": "ourbot.jobs:tick"}],
    )
    done = tether("check", "-c", "deploy/tether.yaml", cwd=tmp_path, env=clean_env())
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_a_handler_imports_a_sibling_module_lazily_after_start(tmp_path: Path) -> None:
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    (deploy / "lazybot.py").write_text(
        "from tether import Router\n\nrouter = Router()\n\n\n"
        "@router.text()\nasync def answer(ctx):\n"
        "    import lazyhelper  # imported at the first message, long after start\n\n"
        "    await ctx.reply(lazyhelper.shout(ctx.event.text))\n"
    )
    (deploy / "lazyhelper.py").write_text("def shout(text):\n    return text.upper() + '!'\n")
    write_config(deploy, plugins=["lazybot:router"])
    done = subprocess.run(
        [TETHER, "chat", "-c", "deploy/tether.yaml"],
        input="hello\n", capture_output=True, text=True, cwd=tmp_path, env=clean_env(), timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "HELLO!\n"


@pytest.mark.slow
def test_the_example_config_checks_from_the_repository_root() -> None:
    done = tether("check", "-c", "examples/tether.yaml", cwd=ROOT, env=clean_env())
    assert done.returncode == 0, done.stderr


# -- the first run with port 8080 taken -------------------------------------------


def holding(port: int) -> socket.socket | None:
    """A socket listening on ``port`` on 127.0.0.1 (None: something else already does)."""
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", port))
    except OSError:
        held.close()
        return None
    held.listen()
    return held


@pytest.mark.slow
async def test_the_first_run_chats_when_port_8080_is_taken(tmp_path: Path) -> None:
    held = holding(8080)
    proc = await asyncio.create_subprocess_exec(
        TETHER, "run", cwd=tmp_path, env=clean_env(),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        proc.stdin.write(b"hello there\n")
        await proc.stdin.drain()
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line == b"hello there\n"  # the echo agent answered the typed line
    finally:
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        if held is not None:
            held.close()
    moved = [json.loads(x) for x in err.decode().splitlines() if "http.port_moved" in x]
    assert len(moved) == 1 and moved[0]["asked"] == 8080 and moved[0]["port"] != 8080


async def test_a_configured_port_in_use_still_fails_naming_the_key(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        settings = make_settings(tmp_path, http={"enabled": True, "port": port})
        with pytest.raises(GatewayError, match=f"http.port {port} is in use on 127.0.0.1"):
            async with running(settings):
                pass


# -- inspection never creates a store --------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "command", [["status"], ["dead", "list"], ["pair", "list"], ["jobs", "list"]]
)
def test_inspection_in_an_empty_directory_creates_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    done = tether(*command, cwd=tmp_path, env=clean_env())
    assert done.returncode != 0
    assert done.stderr == "tether: no store at ./tether.db (config: none)\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_inspection_names_the_config_that_pointed_at_no_store(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    done = tether("status", "-c", str(config), cwd=tmp_path, env=clean_env())
    assert done.returncode != 0
    assert done.stderr == f"tether: no store at {tmp_path / 'tether.db'} (config: {config})\n"
    assert list(tmp_path.iterdir()) == [config]


# -- the command line itself -------------------------------------------------------


@pytest.mark.slow
def test_version() -> None:
    done = tether("--version")
    assert done.returncode == 0 and done.stdout == f"tether {metadata.version('tether-gateway')}\n"


@pytest.mark.slow
@pytest.mark.parametrize("before", [True, False])
def test_config_before_or_after_the_command(tmp_path: Path, before: bool) -> None:
    config = write_config(tmp_path, agent={"name": "Placed"})
    args = ["-c", str(config), "check"] if before else ["check", "-c", str(config)]
    done = tether(*args, cwd=tmp_path, env=clean_env())
    assert done.returncode == 0, done.stderr
    assert "name: Placed" in done.stdout and f"config: {config}" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [[], ["run"], ["chat"], ["check"], ["init"], ["status"], ["dead"], ["pair"], ["jobs"]],
)
def test_help_is_plain_text(command: list[str]) -> None:
    done = tether(*command, "--help")
    assert done.returncode == 0 and "usage: tether" in done.stdout
    assert "`" not in done.stdout


# -- JSON times --------------------------------------------------------------------


def utc(text: str) -> dt.datetime:
    when = dt.datetime.fromisoformat(text)
    assert when.utcoffset() == dt.timedelta(0), text
    return when


@pytest.mark.slow
async def test_json_output_shows_iso_times_and_says_what_it_read(tmp_path: Path) -> None:
    router = Router()

    @router.text()
    async def refuse(ctx: Context) -> None:
        raise Fatal("a dead letter, and its notice: something received and sent")

    config = write_config(tmp_path)
    before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    async with running(make_settings(tmp_path), router) as (gateway, loop):
        dead = await loop.say("bad")
        await loop.wait_for_sent(1)  # the dead notice
        await gateway.drain()
    status = await asyncio.to_thread(tether, "status", "--json", "-c", str(config))
    assert status.returncode == 0, status.stderr
    seen = json.loads(status.stdout)["platforms"]["loopback"]
    assert before <= utc(seen["received"]) and before <= utc(seen["sent"])
    assert status.stderr == f"tether: config: {config}, store: sqlite:///{tmp_path}/tether.db\n"
    shown = await asyncio.to_thread(tether, "dead", "show", dead.key, "-c", str(config))
    assert before <= utc(json.loads(shown.stdout)["created"])


# -- tether run on a terminal ------------------------------------------------------


async def run_on_a_terminal(tmp_path: Path, *flags: str) -> str:
    """`tether run` with its stderr on a pseudo-terminal until a graceful stop: what the
    person at that terminal saw."""
    port = free_port()
    config = write_config(
        tmp_path, http={"enabled": True, "port": port}, logging={"format": "auto"}
    )
    terminal, side = pty.openpty()
    proc = await asyncio.create_subprocess_exec(
        TETHER, "run", *flags, "-c", str(config),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=side, env=clean_env(),
    )  # fmt: skip
    os.close(side)
    try:
        await ready(port, proc)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 60) == 0  # stopped by its own handler
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return read_terminal(terminal)


@pytest.mark.slow
async def test_run_on_a_terminal_shows_a_banner_and_only_warnings(tmp_path: Path) -> None:
    seen = await run_on_a_terminal(tmp_path)
    config = tmp_path / "tether.yaml"
    banner = f"tether: config: {config}, store: sqlite:///{tmp_path}/tether.db, platforms: none"
    assert seen.splitlines() == [banner]  # gateway.started & co. are info: not shown


@pytest.mark.slow
async def test_run_verbose_on_a_terminal_shows_every_log_line(tmp_path: Path) -> None:
    seen = await run_on_a_terminal(tmp_path, "-v")
    assert "gateway.started" in seen and "gateway.stopped" in seen


@pytest.mark.slow
def test_chat_on_a_terminal_says_which_config_and_store(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    terminal, side = pty.openpty()
    done = subprocess.run(
        [TETHER, "chat", "-c", str(config)], stdin=subprocess.DEVNULL, stdout=side,
        stderr=subprocess.PIPE, text=True, env=clean_env(), timeout=60,
    )  # fmt: skip
    os.close(side)
    read_terminal(terminal)
    assert done.returncode == 0
    assert done.stderr == f"tether: config: {config}, store: sqlite:///{tmp_path}/tether.db\n"
