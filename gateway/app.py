"""The gateway: builds the store, router, pipeline, outbox and adapters from the config,
and runs them in the order that keeps the promise.

Start: store (migrated) → adapters ready to send → outbox (resume unsent rows) → recovery
(crashed and retry-waiting events back into their lanes; waits past their deadline
expired) → HTTP → adapters → cron scheduler (ingress last). Stop: ingress first
(scheduler, adapters) → running handlers finish → outbox flushes → HTTP → store.

Start is all or nothing: when a step fails, what the steps before it started is stopped
again in reverse order (the store closed, its SQLite writer ended) and the error is
raised, so ``tether run`` exits instead of hanging on a store it can no longer use.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import structlog

from tether import metrics
from tether.adapters.base import Adapter
from tether.config.schema import Settings
from tether.errors import GatewayError, JobError
from tether.gateway import assembly
from tether.gateway.agent import menu
from tether.gateway.agent.rooms import Rooms
from tether.gateway.assembly import Parts, assemble, build_adapters, build_watchdog, connected
from tether.gateway.core.dispatcher import Dispatcher
from tether.gateway.core.inbox import Inbox
from tether.gateway.core.outbox import Outbox
from tether.gateway.core.pipeline import Pipeline
from tether.gateway.core.stop import Turns
from tether.gateway.core.sweep import Sweep
from tether.gateway.core.waits import Waits
from tether.gateway.handler.routing import Router
from tether.gateway.ops.lockfile import StoreLock
from tether.gateway.ops.pruner import Pruner
from tether.gateway.ops.runtime import running_loop
from tether.gateway.ops.start_errors import encoding_error, listen_error, quietly, store_error
from tether.gateway.recall import Recall
from tether.gateway.reload import Reloader
from tether.gateway.tasks import Tasks, TaskTools
from tether.gateway.tools import approvals
from tether.gateway.tools.toolbox import build_toolbox
from tether.memory import tokens
from tether.memory.store import Store
from tether.memory.stores import open_store
from tether.redaction import redactor
from tether.scheduler.jobs import Job, now_utc
from tether.scheduler.reminders import Reminders
from tether.scheduler.runner import Clock, Scheduler

if TYPE_CHECKING:
    from tether.gateway.ops.http import HttpServer

log = structlog.get_logger("tether.gateway")


class Gateway:
    """One running Tether: the store, the pipeline and outbox, the adapters and cron.

    ``tether run`` and ``tether chat`` build one from the config; embedders build one
    themselves, with adapters of their choice (``build_adapters`` makes the configured
    ones), and optionally their own routers (``plugins``, beside the built-in agent, or
    ``router``, instead of it), store or clock. A test drives one through
    ``tether.testing.Bot``.

    ``start`` and ``stop`` keep the order that keeps the promise (see the module docstring):
    nothing is acknowledged to a platform before the store is open and recovery has run, and
    ingress stops before the handlers and the outbox drain. ``tether run`` serves one until a
    signal (:mod:`tether.gateway.serve`); ``drain`` finishes what was accepted (``tether
    chat`` at EOF); ``readiness`` is ``/readyz``. A second gateway on a SQLite file refuses.
    """

    def __init__(
        self,
        settings: Settings,
        adapters: Mapping[str, Adapter],
        *,
        router: Router | None = None,
        plugins: Sequence[Router] = (),
        store: Store | None = None,
        http: bool | None = None,
        scheduler: bool = True,
        config_path: str | None = None,
        clock: Clock = now_utc,
    ) -> None:
        self.settings = settings
        redactor.update(settings.secrets())  # embedded use is scrubbed too, not just the CLI
        self.adapters = dict(adapters)
        self.store = store or open_store(
            settings.memory.store, synchronous=settings.memory.sqlite_synchronous
        )
        #: The running turn of each conversation: the pipeline's, and ``/stop``'s.
        self.turns = Turns(self.store)
        #: Turns that ask (ctx.ask, approvals), and the events that answer them.
        self.waits = Waits(self.store, shared=self.store.shared, clock=lambda: clock().timestamp())
        self._own_router, self._plugins = router, tuple(plugins)
        self._schedule = scheduler
        #: What cron jobs and reminders take for now: the wall clock, or a test's.
        self.clock = clock
        try:
            parts = self.assemble(settings)
        except JobError as exc:
            raise GatewayError(str(exc)) from None
        self._take(parts)
        self.outbox = Outbox(self.store, self.adapters, settings.outbox)
        #: Reminders and recurring jobs made in chat (scheduler/reminders.py).
        interval = settings.pipeline.sweep_interval
        self.reminders = (
            Reminders(self.store, interval=interval, clock=clock) if scheduler else None
        )
        #: Background tasks and sub-agents (gateway/tasks/): ctx.spawn, start_task.
        self.tasks = Tasks(self.store, lambda: self.settings)
        #: The tools the model may call (Python, built-in, tasks, MCP): tools/toolbox.py.
        more, routes = [TaskTools(self.tasks)], lambda: self.router
        self.toolbox = build_toolbox(settings, routes, self.store, more, reminders=self.reminders)
        self.pipeline = Pipeline(
            self.store,
            self.router,
            self.adapters,
            settings.pipeline,
            self.outbox.enqueue,
            llm=self.llm,
            tools=self.toolbox,
            turns=self.turns,
            media_config=lambda: self.settings.media,  # a reload's, from its next event on
            waits=self.waits,
        )
        self.pipeline.tasks, self.pipeline.messages = self.tasks, lambda: self.settings.messages
        self.recall = Recall(settings, self.store, self.pipeline)  # documents, embeddings
        self.dispatcher = Dispatcher(
            self.pipeline.run,
            concurrency=settings.pipeline.concurrency,
            queue_size=settings.pipeline.queue_size,
            store=self.store,
        )
        self.turns.lanes = self.dispatcher  # /stop reaches a turn waiting in its lane
        self.waits.resume = self.dispatcher.resume  # an answer runs its turn next in its lane
        approvals.attach(self.waits, lambda: self.access)  # presses on approval cards
        self.inbox = Inbox(
            self.store, self.dispatcher, settings.agent.group_sessions, parts.throttle
        )
        self.tasks.accept = self.inbox.accept
        #: ``agents:``: each account's ingress is stamped with its agent, and agents in one
        #: group chat hear each other's replies (gateway/agent/rooms.py).
        self.rooms = Rooms(settings, self.inbox, self.adapters) if settings.agents else None
        if self.rooms:
            self.outbox.on_delivered = self.rooms.delivered
        self.watchdog = build_watchdog(
            settings,
            self.store,
            lambda: self.adapters,
            self.inbox.accept,
            lambda: self.pipeline.running,
            check_target=scheduler,
            readings=lambda: self.llm.readings() if self.llm else [],
        )
        #: Cron jobs are ingress too: started after the adapters, stopped before them.
        jobs = scheduler and self.jobs
        self.scheduler = Scheduler(self.jobs, self.store, self.inbox, clock=clock) if jobs else None
        self.sweep = Sweep(
            self.store,
            self.dispatcher,
            self.outbox,
            interval,
            chores=lambda: self.access.tell_approved(self.inbox.accept, self.adapters),
        )
        self.pruner = Pruner(self.store, lambda: self.settings)  # memory.retention, if set
        use_http = settings.http.enabled if http is None else http
        self.http: HttpServer | None = None
        if use_http:  # aiohttp's server side (aiohttp.web, 2 MB) is imported only for it
            from tether.gateway.ops.http import HttpServer

            self.http = HttpServer(settings.http, self.readiness)
        if self.http and settings.http.ui.enabled:  # the web console (gateway/web/)
            from tether.gateway.web import mount_console  # Jinja2 and all: 4 MB, if asked

            mount_console(self.http.app, self)
        #: ``tether reload`` and SIGHUP: re-reads ``config_path``, swaps what can change.
        self.reloader = Reloader(self, config_path, build_adapters, schedule=scheduler)
        self._lock = StoreLock(self.store)
        self._started: list[Adapter] = []
        self._up = False

    # -- what a reload changes, through one door -----------------------------------------

    @property
    def up(self) -> bool:
        """Started and not stopping: the only state a reload may swap parts into."""
        return self._up

    def assemble(self, settings: Settings) -> Parts:
        """The parts ``settings`` make for this gateway: at its build, and for a reload."""
        platforms = self.adapters if self._schedule else None
        return assemble(
            settings,
            self.store,
            self.turns,
            router=self._own_router,
            plugins=self._plugins,
            platforms=platforms,
        )

    def apply(self, parts: Parts) -> None:
        """Swap in a reload's parts, all at once, between two events: an event already
        running finishes with the router and model client it started with."""
        before = self.settings
        self._take(parts)
        self.pipeline.router, self.pipeline.llm = parts.router, parts.llm
        if parts.settings.access.rate_limit != before.access.rate_limit:
            self.inbox.throttle = parts.throttle  # an unchanged limit keeps its counts

    async def refresh_documents(self, settings: Settings) -> None:
        """``memory.documents`` (re)indexed: at the start, at each reload."""
        await self.recall.refresh(settings)

    def _take(self, parts: Parts) -> None:
        self.settings, self.access, self.router = parts.settings, parts.access, parts.router
        self.jobs, self.llm = parts.jobs, parts.llm

    async def replace_adapter(self, name: str, adapter: Adapter) -> Adapter:
        """Platform ``name`` is served by ``adapter`` (opened already) from now on: the
        old adapter's ingress stops (what it fetched is committed, the rest stays with
        the platform) and the new one takes over from the stored cursor. Returns the old
        one, which may still finish a send in flight: close it after the outbox."""
        old = self.adapters[name]
        try:
            await old.stop()
        except Exception:
            log.exception("adapter.stop_failed", platform=name)
        self.adapters[name] = adapter  # the outbox and pipeline share this mapping
        metrics.CONNECTED.labels(name).set_function(connected(adapter))
        if old in self._started:
            self._started[self._started.index(old)] = adapter
        await self._start_ingress(name, adapter)
        log.info("adapter.restarted", platform=name)
        return old

    async def replace_scheduler(self, jobs: list[Job]) -> None:
        """A new scheduler for ``jobs``: its catch-up asks the ledger what each schedule
        owes, as at a restart (nothing decided is decided again)."""
        if self.scheduler:
            await self.scheduler.stop()
        self.scheduler = Scheduler(jobs, self.store, self.inbox, clock=self.clock) if jobs else None
        if self.scheduler:
            await self.scheduler.start()

    async def _start_ingress(self, name: str, adapter: Adapter) -> None:
        await adapter.start(self.rooms.inbox_for(name, self.inbox) if self.rooms else self.inbox)

    # -- running --------------------------------------------------------------------------

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
        store, loop = type(self.store).__name__, running_loop()
        log.info("gateway.started", platforms=sorted(self.adapters), store=store, loop=loop)

    async def _start(self, undo: contextlib.AsyncExitStack) -> None:
        """The steps of :meth:`start`; each pushes its undo onto ``undo`` before it runs,
        so a step that fails half-way (a store's writer started, a port taken) is undone."""
        undo.callback(log.info, "gateway.stopped")
        self._lock.take()
        undo.callback(self._lock.release)
        undo.push_async_callback(quietly, "store.close", self.store.close)
        try:
            await self.store.open()
        except Exception as exc:
            raise store_error(self.store, exc) from exc
        # Seed tiktoken's cache off the loop: a missing encoding stops the start, not a
        # turn. The parsed one (~75 MB) is loaded only for an `llm:` (else uncounted).
        tokens.count_turns(bool(self.llm))
        try:
            await asyncio.to_thread(tokens.encoding if self.llm else tokens.seed_cache)
        except Exception as exc:
            raise encoding_error(exc) from exc
        if self.llm:
            undo.push_async_callback(quietly, "llm.close", self.llm.close)
            await asyncio.to_thread(self.llm.prepare)
        undo.push_async_callback(quietly, "tools.stop", self.toolbox.stop)
        await self.toolbox.start()
        await self.recall.start(self.settings, undo)  # documents indexed, embeddings' indexer
        for adapter in self.adapters.values():
            undo.push_async_callback(quietly, f"{adapter.platform}.close", adapter.close)
            await adapter.open()
        undo.push_async_callback(quietly, "outbox.stop", self.outbox.stop)
        await self.outbox.start()
        undo.push_async_callback(quietly, "dispatcher.stop", self.dispatcher.stop, 0)
        recovered = await self.store.recover()
        if recovered:
            log.info("gateway.recovered", events=len(recovered))
        await self.dispatcher.submit(recovered)
        undo.push_async_callback(quietly, "waits.stop", self.waits.stop)
        await self.waits.start()  # expires what passed its deadline while we were down
        await self.access.announce_owner(self.adapters)
        if self.http:
            for adapter in self.adapters.values():
                adapter.routes(self.http.app)
            undo.push_async_callback(quietly, "http.stop", self.http.stop)
            try:
                await self.http.start()
            except OSError as exc:
                raise listen_error(self.http.host, self.http.port, exc) from exc
        for name, adapter in self.adapters.items():
            metrics.CONNECTED.labels(name).set_function(connected(adapter))
            undo.push_async_callback(quietly, f"{name}.stop", adapter.stop)
            await self._start_ingress(name, adapter)
            self._started.append(adapter)
            log.info("adapter.started", platform=name)
        await menu.register(self.adapters, self.router)  # a refusal is a warning
        if self.scheduler:
            undo.push_async_callback(quietly, "scheduler.stop", self.scheduler.stop)
            await self.scheduler.start()
        if self.reminders:
            undo.push_async_callback(quietly, "reminders.stop", self.reminders.stop)
            await self.reminders.start(self.inbox)
        if self.watchdog:
            undo.push_async_callback(quietly, "watchdog.stop", self.watchdog.stop)
            await self.watchdog.start()
        self.sweep.start()
        self.pruner.start()

    async def stop(self) -> None:
        """Ingress first, then in-flight handlers, then the outbox, then the store.

        Does nothing unless :meth:`start` succeeded (a failed start has undone itself).
        """
        if not self._up:
            return
        self._up = False
        await self.reloader.cancel()
        timeout = self.settings.pipeline.drain_timeout
        deadline = time.monotonic() + timeout  # one for everything: handlers, then the flush
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
        await self.sweep.stop()
        await self.pruner.stop()
        await self.waits.stop()
        await self.dispatcher.stop(max(0.0, deadline - time.monotonic()))
        await self.outbox.flush(max(0.0, deadline - time.monotonic()))  # outbox.flush_timeout
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
        await self.recall.stop()
        await self.store.close()
        self._lock.release()
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
            await self.sweep.received(time.time())
        if not await self.dispatcher.drain(timeout):
            log.warning("gateway.drain_timeout", queued=self.dispatcher.depth)
        await self.outbox.flush(timeout)

    async def readiness(self) -> list[str]:
        """``/readyz``: what keeps this gateway from serving (empty: ready)."""
        return await assembly.readiness(self.store, self.adapters, self.watchdog)
