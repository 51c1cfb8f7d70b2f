"""The process around the gateway (issue 22): the loop it runs on and what it loads.

- The same gateway, durable store and all, answers on uvloop and on the standard loop.
- Without an ``llm:`` section the tiktoken encoding (~75 MB) is never loaded: the start
  does not load it and turns are stored uncounted; with one the start loads it, so the
  first prompt does not pay for it.
- Importing the Telegram adapter leaves ``cryptography`` (PTB would import it for
  Passport decryption only) and httpx's command-line client (click) unloaded, and
  importable for whoever needs them later.
- The gateway process runs on one glibc malloc heap unless ``MALLOC_ARENA_MAX`` says.
- ``tether run`` imports only what its configuration uses: without ``llm:`` no model
  client library, no LLM agent (prompt, tool loop, streaming, vision, compaction); no
  MCP SDK without ``mcp.servers``, no web console or HTTP server when they are off, no
  APScheduler scheduler without cron jobs.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop

from tests.fakes.discord_api import FakeDiscord
from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import ROOT, make_settings, write_config
from tests.support.processes import subprocess_env
from tether.adapters.loopback import LoopbackAdapter
from tether.gateway.app import Gateway
from tether.gateway.ops import runtime

Runner = Callable[[Coroutine[Any, Any, Any]], Any]


async def _one_turn(tmp_path: Path) -> tuple[str, str]:
    adapter = LoopbackAdapter()
    gateway = Gateway(make_settings(tmp_path), {"loopback": adapter})
    await gateway.start()
    try:
        await adapter.say("hello")
        sent = await adapter.wait_for_sent(1)
    finally:
        await gateway.stop()
    return runtime.running_loop(), sent[0].message.text


@pytest.mark.parametrize(
    ("run", "expected"),
    [(asyncio.run, "asyncio"), (uvloop.run, "uvloop")],
    ids=["asyncio", "uvloop"],
)
def test_the_gateway_answers_on_both_loops(tmp_path: Path, run: Runner, expected: str) -> None:
    loop, answer = run(_one_turn(tmp_path))
    assert (loop, answer) == (expected, "hello")


def test_tether_run_chooses_uvloop_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TETHER_LOOP", raising=False)
    assert runtime.loop_name() == "uvloop"
    assert runtime.run(_loop_of_this_run()) == "uvloop"
    monkeypatch.setenv("TETHER_LOOP", "asyncio")
    assert runtime.loop_name() == "asyncio"
    assert runtime.run(_loop_of_this_run()) == "asyncio"


async def _loop_of_this_run() -> str:
    return runtime.running_loop()


def test_release_heap_is_safe_to_call() -> None:
    runtime.release_heap()  # glibc's malloc_trim here; a no-op where there is none


_ARENAS = """
import asyncio, ctypes, sys, threading
from tether.gateway.ops import runtime

async def main():
    # Each of 4 live threads gets a heap of its own at its first malloc, up to glibc's cap.
    barrier = threading.Barrier(4)
    threads = [threading.Thread(target=barrier.wait) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sys.stderr.flush()
    ctypes.CDLL(None).malloc_stats()  # one "Arena N:" block per heap, on stderr

runtime.run(main())
"""


@pytest.mark.slow
@pytest.mark.parametrize(("env", "heaps"), [({}, 1), ({"MALLOC_ARENA_MAX": "3"}, 3)])
def test_the_gateway_process_uses_one_malloc_heap_unless_the_operator_says(
    env: dict[str, str], heaps: int
) -> None:
    try:
        ctypes.CDLL(None).malloc_stats  # noqa: B018
    except AttributeError:
        pytest.skip("not glibc")
    environment = subprocess_env(**env)
    if not env:  # not the environment of whoever runs the tests either
        environment.pop("MALLOC_ARENA_MAX", None)
    done = subprocess.run(
        [sys.executable, "-c", _ARENAS],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("Arena ") == heaps, done.stderr


_START = """
import asyncio, json, sqlite3, sys
from tether.config import load_text
from tether.adapters.loopback import LoopbackAdapter
from tether.gateway.app import Gateway
from tether.memory import tokens

async def main():
    adapter = LoopbackAdapter()
    gateway = Gateway(load_text(sys.argv[1]), {"loopback": adapter})
    await gateway.start()
    loaded = tokens.encoding.cache_info().currsize
    counts = []
    if not gateway.llm:  # an echo turn: written, and still nothing loaded
        await adapter.say("hello")
        await adapter.wait_for_sent(1)
        await gateway.drain()
        loaded += tokens.encoding.cache_info().currsize
    await gateway.stop()
    if not gateway.llm:
        path = json.loads(sys.argv[1])["memory"]["store"].removeprefix("sqlite:///")
        counts = [n for (n,) in sqlite3.connect(path).execute("SELECT tokens FROM messages")]
    print(json.dumps({"encodings_loaded": loaded, "counts": counts}))

asyncio.run(main())
"""


@pytest.mark.slow
@pytest.mark.parametrize("with_llm", [False, True], ids=["no-llm", "llm"])
def test_the_encoding_is_loaded_at_start_only_for_an_llm(tmp_path: Path, with_llm: bool) -> None:
    config: dict[str, Any] = {
        "memory": {"store": f"sqlite:///{tmp_path / 'tether.db'}"},
        "http": {"enabled": False},
        "platforms": {"console": {"enabled": False}},
        "access": {"allow": ["*"]},
    }
    if with_llm:
        config["llm"] = {
            "providers": {"local": {"base_url": "http://127.0.0.1:9/v1", "api_key": "k"}},
            "models": {"main": {"provider": "local", "model": "gpt-4o-mini"}},
        }
    done = subprocess.run(
        [sys.executable, "-c", _START, json.dumps(config)],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    # Without an llm: the echo's turns are stored uncounted (the stores charge such a row
    # by its length, more than its tokens), and the encoding is never loaded.
    assert result == {"encodings_loaded": int(with_llm), "counts": [] if with_llm else [None, None]}


@pytest.mark.slow
def test_the_telegram_adapter_leaves_cryptography_unloaded_and_importable() -> None:
    script = textwrap.dedent(
        """
        import sys
        import tether.adapters.telegram.normalize
        from tether.adapters.telegram import TelegramAdapter
        assert "telegram" in sys.modules and "httpx" in sys.modules
        print("cryptography" in sys.modules, "httpx._main" in sys.modules, "click" in sys.modules)
        import cryptography.hazmat.primitives
        try:
            import httpx._main  # the CLI's own extras may be missing: not our block's error
        except ImportError as exc:
            assert exc.name != "httpx._main", exc
        print("cryptography" in sys.modules, "click" in sys.modules)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "False", "True", "True"]


def test_the_sqlite_writer_process_imports_no_more_than_it_needs() -> None:
    """The writer is a bare interpreter for the life of the gateway: each module it
    imports is resident the whole time (``typing`` 0.5 MB, ``pickle`` with ``re`` 0.7 MB;
    pickle is imported only for a message marshal cannot encode)."""
    writer = ROOT / "memory" / "sqlite" / "writer.py"
    script = textwrap.dedent(
        f"""
        import sys
        bare = set(sys.modules)
        exec(compile(open({str(writer)!r}).read(), "writer", "exec"), {{"__name__": "writer"}})
        print(" ".join(sorted({{name.split(".")[0] for name in set(sys.modules) - bare}})))
        """
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script],  # as the store starts it
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    assert "sqlite3" in loaded  # the probe ran the module's imports
    unneeded = {"typing", "pickle", "re", "tether", "json", "traceback", "urllib", "asyncio"}
    assert not loaded & unneeded, loaded


#: What a gateway without ``llm:``, ``mcp.servers``, ``http``, ``http.ui`` and cron jobs
#: never uses, each resident for the life of the process once imported (bench/idle.py).
_UNUSED_WITHOUT_LLM = {
    "openai", "tiktoken", "tether.gateway.agent.chat", "tether.gateway.agent.streaming",
    "tether.gateway.agent.vision", "tether.gateway.tools.loop", "tether.memory.compaction",
    "tether.memory.prompt", "mcp", "jinja2", "tether.gateway.web", "aiohttp.web",
    "tether.gateway.ops.http", "cryptography", "httpx._main", "click",
    "apscheduler.schedulers", "multiprocessing",
}  # fmt: skip

#: ``tether run`` as its console script runs it, which writes the modules it holds when
#: it exits (after the drain that SIGTERM starts) to the file named by argv[1].
_RUN_AND_LIST_MODULES = """
import atexit, runpy, sys
listing = sys.argv.pop(1)
atexit.register(lambda: open(listing, "w").write("\\n".join(sorted(sys.modules))))
runpy.run_module("tether.gateway.cli", run_name="__main__")
"""


@pytest.mark.slow
async def test_tether_run_without_an_llm_imports_none_of_what_it_does_not_use(
    tmp_path: Path,
) -> None:
    telegram = await FakeTelegram().start()
    discord = await FakeDiscord().start()
    try:
        platforms = {
            "console": {"enabled": False},
            "telegram": {"token": telegram.token, "base_url": telegram.base_url},
            "discord": {
                "token": discord.token,
                "api_base": discord.api_base,
                "gateway_url": discord.gateway_url,
            },
        }
        config = write_config(tmp_path, platforms=platforms)
        listing = tmp_path / "modules.txt"
        with (tmp_path / "tether.log").open("wb") as log:
            gateway = await asyncio.create_subprocess_exec(
                sys.executable, "-c", _RUN_AND_LIST_MODULES, str(listing), "run", "-c", str(config),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                env=subprocess_env(),
            )  # fmt: skip
        try:
            await discord.wait_for(lambda: discord.connected >= 1, timeout=60)
            await telegram.wait_for(lambda: bool(telegram.calls_to("getMe")), timeout=60)
        finally:
            gateway.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(gateway.wait(), 60) == 0
    finally:
        await discord.stop()
        await telegram.stop()
    imported = set(listing.read_text().split())
    assert {"tether.adapters.telegram.adapter", "tether.adapters.discord.adapter"} <= imported
    assert not imported & _UNUSED_WITHOUT_LLM, sorted(imported & _UNUSED_WITHOUT_LLM)
