"""The gateway: builds the store, router, pipeline, outbox and adapters from the config,
and runs them in the order that keeps the promise.

Start: store (migrated) → adapters ready to send → outbox (resume unsent rows) →
recovery (crashed and waiting
events back into their lanes) → HTTP → adapters → cron scheduler (ingress last). Stop:
ingress first (scheduler, adapters) → running handlers finish → outbox flushes → HTTP →
store.

Start is all or nothing: when a step fails, what the steps before it started is stopped
again in reverse order (the store closed, its SQLite writer ended) and the error is
raised, so ``tether run`` exits instead of hanging on a store it can no longer use.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import IO, TYPE_CHECKING

import structlog

from tether.adapters.base import Adapter
from tether.config.schema import Settings
from tether.errors import GatewayError, JobError
from tether.gateway import logs, metrics, systemd
from tether.gateway.access import Access
from tether.gateway.alerts import Alerts
from tether.gateway.assembly import _connected, _guarded, build_adapters, load_router
from tether.gateway.dispatcher import Dispatcher
from tether.gateway.inbox import Inbox
from tether.gateway.llm import LLM
from tether.gateway.outbox import Outbox
from tether.gateway.pipeline import Pipeline
from tether.gateway.reload import Reloader
from tether.gateway.rooms import Rooms
from tether.gateway.routing import Router
from tether.gateway.runtime import release_heap, running_loop
from tether.gateway.start_errors import encoding_error, listen_error, store_error
from tether.gateway.throttle import Throttle
from tether.gateway.tools.toolbox import build_toolbox
from tether.gateway.watchdog import Watchdog
from tether.memory import tokens
from tether.memory.sqlite import SqliteStore
from tether.memory.store import Store
from tether.memory.stores import open_store
from tether.scheduler.jobs import check_targets, load_jobs
from tether.scheduler.reminders import Reminders
from tether.scheduler.routing import with_jobs
from tether.scheduler.runner import Scheduler

if TYPE_CHECKING:
    from tether.gateway.http import HttpServer

#: ``build_adapters`` and ``load_router`` live in :mod:`.assembly`; kept importable here.
__all__ = ["Gateway", "build_adapters", "load_router", "settle_heap"]

log = structlog.get_logger("tether.gateway")


class Gateway:
    """One running Tether: the store, the pipeline and outbox, the adapters and cron.

    ``tether run`` and ``tether chat`` build one from the config; tests and embedders
    build one themselves, with adapters of their choice (``build_adapters`` makes the
    configured ones) and optionally a router or a store of their own::

        from tether.adapters.loopback import LoopbackAdapter
        from tether.gateway.app import Gateway

        adapter = LoopbackAdapter()
        gateway = Gateway(settings, {"loopback": adapter}, router=router)
        await gateway.start()
        await adapter.say("/weather Paris")
        await gateway.stop()

    ``start`` and ``stop`` keep the order that keeps the promise (see the module
    docstring): nothing is acknowledged to a platform before the store is open and
    recovery has run, and ingress stops before the handlers and the outbox drain.
    ``run_until_signal`` is ``tether run``; ``drain`` finishes what was accepted (``tether
    chat`` at EOF); ``readiness`` is ``/readyz``. On SQLite a gateway holds a lock next to
    the file, so a second one on the same file refuses to start.
    """

    def __init__(
        self,
        settings: Settings,
        adapters: Mapping[str, Adapter],
        *,
        router: Router | None = None,
        store: Store | None = None,
        http: bool | None = None,
        scheduler: bool = True,
        config_path: str | None = None,
    ) -> None:
        self.settings = settings
        logs.redactor.update(settings.secrets())  # embedded use is scrubbed too, not just the CLI
        self.adapters = dict(adapters)
        self.store = store or open_store(
            settings.memory.store, synchronous=settings.memory.sqlite_synchronous
        )
        self.access = Access(settings.access, self.store)
        self.router = _guarded(router or load_router(settings, self.access), self.access)
        try:
            self.jobs = load_jobs(settings)
            if scheduler:
                check_targets(self.jobs, self.adapters)
        except JobError as exc:
            raise GatewayError(str(exc)) from None
        self.router = with_jobs(self.router)  # cron fires: text, handler, prompt → agent
        self.outbox = Outbox(self.store, self.adapters, settings.outbox)
        self.llm = LLM(settings) if settings.llm else None
        #: The tools the model may call (Python, built-in, MCP): gateway/tools/toolbox.py.
        #: Reminders and recurring jobs made in chat (scheduler/reminders.py).
        interval = settings.pipeline.sweep_interval
        self.reminders = Reminders(self.store, interval=interval) if scheduler else None
        self.toolbox = build_toolbox(
            settings, lambda: self.router, self.store, reminders=self.reminders
        )
        self.pipeline = Pipeline(
            self.store,
            self.router,
            self.adapters,
            settings.pipeline,
            self.outbox.enqueue,
            llm=self.llm,
            tools=self.toolbox,
        )
        self.dispatcher = Dispatcher(
            self.pipeline.run,
            concurrency=settings.pipeline.concurrency,
            queue_size=settings.pipeline.queue_size,
            store=self.store,
        )
        self.inbox = Inbox(
            self.store,
            self.dispatcher,
            settings.agent.group_sessions,
            Throttle(settings.access.rate_limit),
        )
        #: ``agents:``: each account's ingress is stamped with its agent, and agents in one
        #: group chat hear each other's replies (gateway/rooms.py).
        self.rooms = Rooms(settings, self.inbox, self.adapters) if settings.agents else None
        if self.rooms:
            self.outbox.on_delivered = self.rooms.delivered
        self.watchdog = self._watchdog(scheduler)
        #: Cron jobs are ingress too: started after the adapters, stopped before them.
        self.scheduler = (
            Scheduler(self.jobs, self.store, self.inbox) if scheduler and self.jobs else None
        )
        use_http = settings.http.enabled if http is None else http
        self.http: HttpServer | None = None
        if use_http:  # aiohttp's server side (aiohttp.web, 2 MB) is imported only for it
            from tether.gateway.http import HttpServer

            self.http = HttpServer(settings.http, self.readiness)
        if self.http and settings.http.ui.enabled:  # the web console (gateway/web/)
            from tether.gateway.web import mount_console  # Jinja2 and all: 4 MB, if asked

            mount_console(self.http.app, self)
        #: ``tether reload`` and SIGHUP: re-reads ``config_path``, swaps what can change.
        self.reloader = Reloader(
            self,
            config_path,
            lambda new, access: _guarded(router or load_router(new, access), access),
            build_adapters,
            schedule=scheduler,
        )
        self._lock: IO[str] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._started: list[Adapter] = []
        self._up = False

    def _watchdog(self, check_target: bool) -> Watchdog | None:
        """The gateway watching itself (``ops.watchdog``), telling ``ops.alerts.deliver``."""
        ops = self.settings.ops
        target = ops.alerts.target
        if check_target and target and target.platform not in self.adapters:
            raise GatewayError(f"ops.alerts.deliver: platform {target.platform!r} is not enabled")
        if not ops.watchdog.enabled:
            return None
        alerts = Alerts(ops.alerts, self.store, self.inbox.accept)
        return Watchdog(
            ops.watchdog,
            self.store,
            lambda: self.adapters,
            alerts,
            lambda: self.pipeline.running,
            self.settings.pipeline.handler_timeout,
        )

    async def start(self) -> None:
        """Start every part in order, or none: a failure undoes the steps before it."""
        async with contextlib.AsyncExitStack() as undo:
            try:
                await self._start(undo)
            except BaseException as exc:
                log.error("gateway.start_failed", error=f"{type(exc).__name__}: {exc}")
                self._started.clear()
                raise
            undo.pop_all()  # started: from here on, stop() takes over
        self._up = True
        log.info(
            "gateway.started",
            platforms=sorted(self.adapters),
            store=self.store.__class__.__name__,
            loop=running_loop(),
        )

    async def _start(self, undo: contextlib.AsyncExitStack) -> None:
        """The steps of :meth:`start`; each pushes its undo onto ``undo`` before it runs,
        so a step that fails half-way (a store whose writer started, a runner whose port
        was taken) is undone too."""
        undo.callback(log.info, "gateway.stopped")
        self._take_lock()
        undo.callback(self._release_lock)
        undo.push_async_callback(_quietly, "store.close", self.store.close)
        try:
            await self.store.open()
        except Exception as exc:
            raise store_error(self.settings.memory.store, self.store, exc) from exc
        # Seed tiktoken's cache now, off the loop: turns are counted when written, and a
        # missing encoding should stop the start, not a turn. The parsed encoding (~75 MB)
        # is loaded now only for an `llm:`; without one turns are stored uncounted.
        tokens.count_turns(bool(self.llm))
        try:
            await asyncio.to_thread(tokens.encoding if self.llm else tokens.seed_cache)
        except Exception as exc:
            raise encoding_error(exc) from exc
        if self.llm:
            undo.push_async_callback(_quietly, "llm.close", self.llm.close)
            await asyncio.to_thread(self.llm.prepare)
        undo.push_async_callback(_quietly, "tools.stop", self.toolbox.stop)
        await self.toolbox.start()
        for adapter in self.adapters.values():
            undo.push_async_callback(_quietly, f"{adapter.platform}.close", adapter.close)
            await adapter.open()
        undo.push_async_callback(_quietly, "outbox.stop", self.outbox.stop)
        await self.outbox.start()
        undo.push_async_callback(_quietly, "dispatcher.stop", self.dispatcher.stop, 0)
        recovered = await self.store.recover()
        if recovered:
            log.info("gateway.recovered", events=len(recovered))
        await self.dispatcher.submit(recovered)
        await self.access.announce_owner(self.adapters)
        if self.http:
            for adapter in self.adapters.values():
                adapter.routes(self.http.app)
            undo.push_async_callback(_quietly, "http.stop", self.http.stop)
            try:
                await self.http.start()
            except OSError as exc:
                raise listen_error(self.http.host, self.http.port, exc) from exc
        for name, adapter in self.adapters.items():
            metrics.CONNECTED.labels(name).set_function(_connected(adapter))
            undo.push_async_callback(_quietly, f"{name}.stop", adapter.stop)
            rooms = self.rooms
            await adapter.start(rooms.inbox_for(name, self.inbox) if rooms else self.inbox)
            self._started.append(adapter)
            log.info("adapter.started", platform=name)
        if self.scheduler:
            undo.push_async_callback(_quietly, "scheduler.stop", self.scheduler.stop)
            await self.scheduler.start()
        if self.reminders:
            undo.push_async_callback(_quietly, "reminders.stop", self.reminders.stop)
            await self.reminders.start(self.inbox)
        if self.watchdog:
            undo.push_async_callback(_quietly, "watchdog.stop", self.watchdog.stop)
            await self.watchdog.start()
        self._sweeper = asyncio.create_task(self._sweep(), name="inbox-sweep")

    async def _sweep(self) -> None:
        """Pick up events queued by other processes (``tether dead retry``) while running."""
        interval = self.settings.pipeline.sweep_interval
        while True:
            await asyncio.sleep(interval)
            await self.access.tell_approved(self.inbox.accept, self.adapters)
            if self.store.shared:
                await self._sweep_shared()
            else:
                await self._sweep_received(time.time() - interval)

    async def _sweep_received(self, older_than: float) -> None:
        """Submit ``received`` rows older than ``older_than`` that no lane knows of."""
        try:
            read_at = time.monotonic()
            rows = await self.store.pending(older_than)
            fresh = [row for row in rows if not self.dispatcher.knows(row.key, read_at)]
            if fresh:
                log.info("gateway.swept", events=len(fresh))
                await self.dispatcher.submit(fresh)
        except Exception:
            log.exception("gateway.sweep_failed")

    async def _sweep_shared(self) -> None:
        """Shared store: look at every lane with work, whichever process accepted it, so
        a lane or chat whose process died is taken over within one interval."""
        try:
            for conversation in await self.store.busy_conversations():
                self.dispatcher.poke(conversation)
            for target in await self.store.busy_targets():
                self.outbox.poke(target)
        except Exception:
            log.exception("gateway.sweep_failed")

    async def stop(self) -> None:
        """Ingress first, then in-flight handlers, then the outbox, then the store.

        Does nothing unless :meth:`start` succeeded (a failed start has undone itself).
        """
        if not self._up:
            return
        self._up = False
        await self.reloader.cancel()
        timeout = self.settings.pipeline.drain_timeout
        log.info("gateway.stopping", drain_timeout_s=timeout)
        if self.watchdog:
            await self.watchdog.stop()
        if self.reminders:
            await self.reminders.stop()
        if self.scheduler:
            await self.scheduler.stop()
        for adapter in reversed(self._started):
            try:
                await adapter.stop()
            except Exception:
                log.exception("adapter.stop_failed", platform=adapter.platform)
        self._started.clear()
        if self._sweeper:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await self.dispatcher.stop(timeout)
        if not await self.outbox.flush(timeout):
            log.warning("outbox.flush_timeout")
        await self.outbox.stop()
        for adapter in self.adapters.values():
            try:
                await adapter.close()
            except Exception:
                log.exception("adapter.close_failed", platform=adapter.platform)
        await self.reloader.close()
        if self.http:
            await self.http.stop()
        await self.toolbox.stop()
        if self.llm:
            await self.llm.close()
        await self.store.close()
        self._release_lock()
        log.info("gateway.stopped")

    async def drain(self, *, ingress_done: bool = False) -> None:
        """Finish everything accepted so far and send its replies (``tether chat`` at EOF).

        ``ingress_done``: nothing is being accepted any more, so every ``received`` row
        that no lane knows is swept in first, however new. An accept whose commit landed
        but whose answer was lost (the writer died in between) left such a row; the
        retried accept found it a duplicate. (While ingress runs, only the periodic
        sweep's older rows are safe to take: a newer one may be an accept in flight.)
        """
        timeout = self.settings.pipeline.drain_timeout
        if ingress_done and not self.store.shared:
            await self._sweep_received(time.time())
        if not await self.dispatcher.drain(timeout):
            log.warning("gateway.drain_timeout", queued=self.dispatcher.depth)
        await self.outbox.flush(timeout)

    async def readiness(self) -> list[str]:
        problems = []
        try:
            await self.store.ping()
        except Exception as exc:
            problems.append(f"store unreachable: {type(exc).__name__}: {exc}")
        problems += [
            f"{name} not connected" + (f": {a.problem}" if a.problem else "")
            for name, a in self.adapters.items()
            if not a.connected
        ]
        return problems + (self.watchdog.problems() if self.watchdog else [])

    async def run_until_signal(self) -> None:
        """Run until SIGTERM/SIGINT, then stop gracefully; a second signal exits at once."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal(signame: str) -> None:
            if stop.is_set():
                log.warning("gateway.forced_exit", signal=signame)
                os._exit(1)
            log.info("gateway.signal", signal=signame)
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig.name)
        async with systemd.Notifier.from_env() as notifier:  # no NOTIFY_SOCKET: a no-op
            loop.add_signal_handler(
                signal.SIGHUP, lambda: notifier.reloading(self.reloader.request())
            )
            await self.start()
            notifier.ready(f"serving {', '.join(sorted(self.adapters)) or 'no platform'}")
            self.reloader.announce()
            settle_heap()
            try:
                await stop.wait()
            finally:
                notifier.stopping()
                await self.stop()

    def _take_lock(self) -> None:
        """One processing gateway per SQLite file: two would both recover 'running' rows."""
        if not isinstance(self.store, SqliteStore) or self.store.path == ":memory:":
            return
        try:
            handle = open(self.store.path + ".lock", "w")  # noqa: SIM115 - held for the run
        except OSError as exc:
            raise store_error(self.settings.memory.store, self.store, exc) from exc
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise GatewayError(
                f"another tether process is running on {self.store.path}; "
                "use PostgreSQL (memory.store: postgresql://...) to run several instances"
            ) from None
        self._lock = handle

    def _release_lock(self) -> None:
        if self._lock:
            self._lock.close()
            self._lock = None


async def _quietly(step: str, undo: Callable[..., Awaitable[object]], *args: object) -> None:
    """Undo one step of a failed start; a failure is logged and the other steps still run."""
    try:
        await undo(*args)
    except Exception:
        log.exception("gateway.undo_failed", step=step)


#: Allocations between two young-generation collections (CPython's default: 700).
GC_YOUNG_THRESHOLD = 10_000


def settle_heap() -> None:
    """Take everything alive after start-up out of the garbage collector's sight.

    A gateway imports a lot (pydantic schemas, python-telegram-bot, discord.py,
    lark-oapi) and keeps all of it for its life, yet every full collection walks it
    again: on ``bench/pipeline.py`` collections took about a quarter of the run, with
    pauses of up to 0.25 s. Frozen objects are never collected, even once garbage, so
    this is for a process that is the gateway (``tether run``, ``tether chat``), once,
    after start.

    Then the young generation is collected every :data:`GC_YOUNG_THRESHOLD` allocations
    instead of 700. Under load the replies waiting in the outbox (a pydantic message, its
    sets and lists each) were still alive at most young collections, so they were
    promoted, and the old generation grew until full collections walked 120,000 objects:
    on ``bench/telegram.py`` (20,000 updates) collections took 2.2 s of 14 s of CPU. With
    fewer young collections most of them are freed before one comes: 0.34 s. The
    per-event path leaves no cycles (tests/test_pipeline.py), so what waits longer for
    a collection is little.
    """
    gc.collect()
    release_heap()  # what start-up freed goes back to the system
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)
