"""Reload without restart: ``tether reload`` and SIGHUP re-read the config and swap it in.

A reload is all or nothing. The file is read and validated, plugins and job handlers
imported, a new LLM client prepared and the adapters whose credentials changed opened
(getMe with the new token), all before anything running is touched; any failure leaves
the running configuration as it was and is logged as ``config.reload_failed`` with the
reason (the key path, for a config error). Then the swap cannot fail half-way: the
pipeline takes the new router (access lists, personas, plugins) and LLM for the events
it starts from now on, while an event already running finishes with the ones it started
with (the old LLM is closed once the last of them is done: each holds a connection pool
and a megabyte, which twenty reloads used to keep until the stop); a changed platform's
old adapter stops its ingress (what it fetched is committed, the rest stays with the
platform) and the new one takes over from the stored cursor; changed jobs get a new
scheduler, whose catch-up asks the ledger what a changed schedule owes, as at a restart.
Settings the running parts were built around (the store, the HTTP server, the pipeline's
and outbox's limits, logging, a platform added, removed or on a webhook) are reported as
needing a restart and left as they are.

The running gateway keeps a small state file (:func:`state_path`, keyed by the config
file's path) with its pid and the outcome of its latest reload: ``tether reload``
validates the file itself, signals the pid found there and waits for the outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import structlog
from prometheus_client import Counter

from tether.adapters.base import Adapter
from tether.config import load, plugin_path
from tether.config.schema import Settings
from tether.errors import ConfigError, GatewayError, JobError
from tether.gateway.agent import menu
from tether.gateway.assembly import Parts
from tether.gateway.llm.client import LLM
from tether.gateway.tools.toolbox import Toolbox
from tether.redaction import redactor
from tether.scheduler.jobs import Job

log = structlog.get_logger("tether.reload")

RELOADS = Counter("tether_config_reloads_total", "Configuration reloads by outcome", ["outcome"])
RELOADED, FAILED = "config.reloaded", "config.reload_failed"
#: Settings the running parts were built around: a change waits for a restart.
RESTART_ONLY = (
    "memory.store",
    "memory.sqlite_synchronous",
    "memory.embeddings",  # the indexer embeds with the model it started with
    "agent.group_sessions",
    "http",
    "pipeline",
    "outbox",
    "logging",
    "ops",
    "mcp",  # the servers were started with the gateway (gateway/tools/mcp.py)
    "platforms.console",
    "agents",
    "rooms",
)
PLATFORMS = ("telegram", "discord", "feishu", "slack")
#: How long ``tether reload`` waits for the gateway's outcome: opening a platform with
#: a new token retries for a while before it gives up.
ANSWER_TIMEOUT = 120.0

#: The adapters a config enables (``assembly.build_adapters``).
BuildAdapters = Callable[..., dict[str, Adapter]]


class Running(Protocol):
    """What a reload needs of a running :class:`~tether.gateway.app.Gateway`: its
    settings and adapters to compare with, and the door its parts are swapped through.
    Nothing private: the gateway decides how a swap happens."""

    settings: Settings
    adapters: dict[str, Adapter]
    llm: LLM | None
    toolbox: Toolbox

    @property
    def up(self) -> bool: ...

    def assemble(self, settings: Settings) -> Parts: ...

    def apply(self, parts: Parts) -> None: ...

    async def refresh_documents(self, settings: Settings) -> None: ...

    async def replace_adapter(self, name: str, adapter: Adapter) -> Adapter: ...

    async def replace_scheduler(self, jobs: list[Job]) -> None: ...


def _at(settings: Settings, dotted: str) -> Any:
    value: Any = settings
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _webhook(config: Any) -> bool:
    """A webhook's route (Slack's Events API's too) is bound to its adapter in the HTTP
    server, which lives on."""
    return getattr(config, "mode", None) in ("webhook", "events")


def needs_restart(old: Settings, new: Settings) -> list[str]:
    """The key paths that changed but cannot change while running."""
    out = [path for path in RESTART_ONLY if _at(old, path) != _at(new, path)]
    for name in PLATFORMS:
        before, after = getattr(old.platforms, name), getattr(new.platforms, name)
        added_or_removed = (before is None) != (after is None)
        if added_or_removed or (before != after and (_webhook(before) or _webhook(after))):
            out.append(f"platforms.{name}")
    return out


def effective(old: Settings, new: Settings, restart: list[str]) -> Settings:
    """``new``, except what needs a restart, which stays as it runs."""
    memory = new.memory.model_copy(
        update={
            "store": old.memory.store,
            "sqlite_synchronous": old.memory.sqlite_synchronous,
            "embeddings": old.memory.embeddings,
        }
    )
    agent = new.agent.model_copy(update={"group_sessions": old.agent.group_sessions})
    kept = {
        name: getattr(old.platforms, name)
        for name in ("console", *PLATFORMS)
        if f"platforms.{name}" in restart
    }
    return new.model_copy(
        update={
            "memory": memory,
            "agent": agent,
            "http": old.http,
            "pipeline": old.pipeline,
            "outbox": old.outbox,
            "logging": old.logging,
            "ops": old.ops,
            "platforms": new.platforms.model_copy(update=kept),
        }
    )


def state_path(config: str | Path | None) -> Path:
    """Where the gateway run with ``config`` keeps its pid and latest reload outcome."""
    where = Path(config or "tether.yaml").resolve()
    digest = hashlib.sha256(str(where).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"tether-{os.getuid()}-{digest}.reload.json"


def _read_state(path: Path) -> dict[str, Any] | None:
    """The state file, if it is ours and whole (it is replaced atomically)."""
    try:
        if path.stat().st_uid != os.getuid():
            return None  # someone else's file in a shared /tmp: never signal from it
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def _is_gateway(pid: int) -> bool:
    """Is ``pid`` alive, and (where /proc tells) a tether process, not a reused pid?"""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.parent.exists():
        return True
    with contextlib.suppress(OSError):
        return b"tether" in cmdline.read_bytes()
    return False


class Reloader:
    """Re-reads ``config_path`` on request and swaps it into the running gateway."""

    def __init__(
        self,
        gateway: Running,
        config_path: str | Path | None,
        build_adapters: BuildAdapters,
        *,
        schedule: bool,
    ) -> None:
        self.gateway = gateway
        self.config_path = config_path
        self._build_adapters = build_adapters
        self._schedule = schedule
        self._state = state_path(config_path)
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[bool]] = set()
        #: Swapped out by a reload, not yet closed: each closes when its events are done.
        self._retired_llms: list[LLM] = []
        self._retiring: set[asyncio.Task[None]] = set()
        self._retired_adapters: list[Adapter] = []
        self.generation = 0
        self._announced = False
        self._swapping = False

    # -- the running gateway's side --------------------------------------------------

    def announce(self) -> None:
        """Started: ``tether reload`` can find this process from now on."""
        self._announced = True
        self._record({"outcome": "started"})

    def request(self) -> asyncio.Task[bool]:
        """SIGHUP: reload in the background (one at a time, in order)."""
        task = asyncio.create_task(self.reload(), name="config-reload")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def reload(self) -> bool:
        """Re-read the config and swap it in; False (and nothing changed) when it fails."""
        async with self._lock:
            self.generation += 1
            if not self.gateway.up:
                return self._failed("the gateway is not running (starting or stopping)")
            try:
                changed, restart = await self._apply()
            except (ConfigError, GatewayError, JobError) as exc:
                return self._failed(str(exc))
            except Exception as exc:
                return self._failed(f"{type(exc).__name__}: {exc}")
            RELOADS.labels("reloaded").inc()
            log.info(RELOADED, config=str(self.config_path), changed=changed, restart=restart)
            self._record({"outcome": RELOADED, "changed": changed, "restart": restart})
            return True

    def _failed(self, error: str) -> bool:
        error = redactor.scrub(error)
        RELOADS.labels("failed").inc()
        log.warning(FAILED, config=str(self.config_path), error=error)
        self._record({"outcome": FAILED, "error": error})
        return False

    async def _apply(self) -> tuple[list[str], list[str]]:
        """Prepare everything that can fail, then swap; returns (changed, needs restart)."""
        gateway = self.gateway
        new = load(self.config_path)
        if self.config_path is not None:  # an added plugin imports beside it, CLI or not
            plugin_path.use_config(self.config_path)
        redactor.update(new.secrets())  # before anything could log or raise with them
        old = gateway.settings
        restart = needs_restart(old, new)
        settings = effective(old, new, restart)
        changed = [name for name in Settings.model_fields if _at(old, name) != _at(settings, name)]
        parts = gateway.assemble(settings)  # plugins, jobs and the client, as at start
        gateway.toolbox.check(parts.router)  # a plugin tool named like another: refused
        swapped = [
            name
            for name in PLATFORMS
            if getattr(old.platforms, name) != getattr(settings.platforms, name)
        ]
        fresh = await self._open(settings, swapped, parts.llm)
        # Nothing below refuses: from here on the reload happens, whole (see cancel).
        self._swapping = True
        try:
            if gateway.llm:
                self._retire(gateway.llm)  # events running on it still use it
            gateway.apply(parts)
            for name, adapter in fresh.items():
                # a send in flight on the old one finishes; it is closed at stop
                self._retired_adapters.append(await gateway.replace_adapter(name, adapter))
            if self._schedule and settings.jobs != old.jobs:
                await gateway.replace_scheduler(parts.jobs)
            await gateway.refresh_documents(settings)  # what changed on disk, re-read
            await menu.register(gateway.adapters, parts.router)  # a new command shows
        finally:
            self._swapping = False
        return changed, restart

    async def _open(
        self, settings: Settings, platforms: list[str], llm: LLM | None
    ) -> dict[str, Adapter]:
        """The new LLM prepared and the changed platforms' adapters opened, or none."""
        only = {name: getattr(settings.platforms, name) for name in platforms}
        bare = settings.platforms.model_copy(update={name: None for name in PLATFORMS} | only)
        fresh = self._build_adapters(settings.model_copy(update={"platforms": bare}), console=False)
        opened: list[Adapter] = []
        try:
            if llm:
                await asyncio.to_thread(llm.prepare)
            for adapter in fresh.values():
                opened.append(adapter)
                await adapter.open()
        except BaseException:
            for adapter in opened:
                with contextlib.suppress(Exception):
                    await adapter.close()
            if llm:
                with contextlib.suppress(Exception):
                    await llm.close()
            raise
        return fresh

    def _retire(self, llm: LLM) -> None:
        self._retired_llms.append(llm)
        task = asyncio.create_task(self._close_when_unused(llm), name="llm-retire")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _close_when_unused(self, llm: LLM) -> None:
        try:
            await llm.retire()
        except Exception:
            log.exception("llm.close_failed")
        self._retired_llms.remove(llm)  # cancelled instead (the stop): close() closes it
        log.info("llm.retired", clients_open=llm.clients_open())

    async def retired(self) -> None:
        """Wait until every LLM that reloads retired is closed (once its events are done)."""
        await asyncio.gather(*self._retiring, return_exceptions=True)

    async def cancel(self) -> None:
        """Gateway stop, first: a reload still preparing is abandoned (it closes what it
        opened); one already swapping finishes, so the stop sees one configuration."""
        for task in list(self._tasks):
            if not self._swapping:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close(self) -> None:
        """Gateway stop, last: what reloads retired is closed, once the outbox is done."""
        await self.cancel()
        for adapter in self._retired_adapters:
            with contextlib.suppress(Exception):
                await adapter.close()
        for task in list(self._retiring):  # the events they waited for are over or cut off
            task.cancel()
        await asyncio.gather(*self._retiring, return_exceptions=True)
        for llm in self._retired_llms:
            with contextlib.suppress(Exception):
                await llm.close()
        self._retired_adapters.clear()
        self._retired_llms.clear()
        if self._announced and (_read_state(self._state) or {}).get("pid") == os.getpid():
            with contextlib.suppress(OSError):
                self._state.unlink()
        self._announced = False

    def _record(self, outcome: Mapping[str, Any]) -> None:
        """Replace the state file atomically (a reader never sees half of it)."""
        if not self._announced:
            return
        state = {"pid": os.getpid(), "generation": self.generation, **outcome}
        temporary = self._state.with_suffix(f".{os.getpid()}.tmp")
        try:
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                json.dump(state, handle)
            os.replace(temporary, self._state)
        except OSError as exc:
            log.warning("config.state_unwritable", path=str(self._state), error=str(exc))


# -- tether reload's side ------------------------------------------------------------


def request_reload(config: str | Path | None, timeout: float = ANSWER_TIMEOUT) -> dict[str, Any]:
    """Signal the gateway running with ``config`` and wait for its reload's outcome."""
    path = state_path(config)
    state = _read_state(path)
    pid = state.get("pid") if state else None
    if not isinstance(pid, int) or not _is_gateway(pid):
        raise GatewayError(
            f"no running gateway found for {config or 'tether.yaml'}"
            " (tether run writes its pid to " + str(path) + ")"
        )
    assert state is not None
    before = state.get("generation", 0)
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.05)  # the gateway answers through the file; nothing to await here
        state = _read_state(path)
        if state and state.get("pid") == pid and state.get("generation", 0) > before:
            return state
        if not _is_gateway(pid):
            raise GatewayError(f"the gateway (pid {pid}) exited during the reload")
    raise GatewayError(f"the gateway (pid {pid}) did not answer in {timeout:g} s; see its log")
