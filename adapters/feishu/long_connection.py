"""In, by the SDK's long connection: no public URL needed, acked after the commit.

``lark_oapi.ws.Client`` blocks forever on a module-level event loop and acks each event
when its synchronous handler returns. It runs here in a thread with a loop of its own;
the handler waits for the inbox commit on Tether's loop before it returns, so the ack
follows the commit. An exception there makes the SDK answer 500, and Feishu delivers
the event again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import lark_oapi as lark
import lark_oapi.ws.client as lark_ws
import structlog

from tether.adapters.kit import describe
from tether.config.schema import FeishuConfig

log = structlog.get_logger("tether.feishu")

#: How long the handler waits for the inbox commit before it gives up (the SDK then
#: answers 500 and Feishu delivers the event again).
COMMIT_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0

#: Normalize one event and commit it to the inbox; raises when it was not committed.
Commit = Callable[[dict[str, Any]], Coroutine[Any, Any, None]]


class LongConnection:
    """One run of the SDK's client, from :meth:`start` to :meth:`stop`."""

    def __init__(self, config: FeishuConfig, commit: Commit) -> None:
        self.config = config
        self.thread: threading.Thread | None = None
        #: Why the connection ended when it was not stopped (readiness shows it).
        self.error: str | None = None
        self._commit = commit
        self._main_loop: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: lark_ws.Client | None = None
        self._stopping = False

    @property
    def connected(self) -> bool:
        client = self._client
        return client is not None and getattr(client, "_conn", None) is not None

    async def start(self) -> None:
        """Run the client in its thread; returns once it is built (it connects on)."""
        self._main_loop = asyncio.get_running_loop()
        ready = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(ready,), name="feishu-ws", daemon=True
        )
        self.thread.start()
        await asyncio.to_thread(ready.wait)

    async def stop(self) -> None:
        """Refuse further events, end the client's loop and wait for its thread."""
        thread = self.thread
        if thread is None:
            return
        self.thread = None
        self._stopping = True
        client, loop = self._client, self._loop
        if client is not None:
            client._auto_reconnect = False  # a closed connection must not be reopened
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile: it is on its way out
                loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, STOP_TIMEOUT)
        if thread.is_alive():
            # Only a blocking call inside the SDK (its endpoint lookup has no timeout)
            # can hold it; the thread is a daemon, so it cannot keep the process alive.
            log.warning("feishu.ws_stop_timeout", timeout_s=STOP_TIMEOUT)

    def _run(self, ready: threading.Event) -> None:
        """The SDK's client on a loop of its own, in this thread, until :meth:`stop`."""
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        lark_ws.loop = loop  # the SDK schedules everything on this module-level name
        self._loop = loop
        client: lark_ws.Client | None = None
        try:
            client = lark_ws.Client(
                self.config.app_id,
                self.config.app_secret.get_secret_value(),
                log_level=lark.LogLevel.WARNING,
                event_handler=_Handler(self._deliver),
                domain=self.config.domain,
                auto_reconnect=True,
            )
            self._client = client
            ready.set()
            log.info("feishu.ws_starting", domain=self.config.domain)
            client.start()
        except Exception as exc:
            if not self._stopping:  # stop() ends start() by stopping its loop
                self.error = describe(exc)
                log.error("feishu.ws_failed", error=self.error)
        finally:
            ready.set()
            _close_loop(loop, client)
            self._client = None
            log.info("feishu.ws_stopped")

    def _deliver(self, payload: bytes) -> None:
        """Runs in the SDK's thread: commit on Tether's loop, return (→ ack) only after."""
        loop = self._main_loop
        if loop is None or self._stopping:
            raise RuntimeError("tether is stopping; not accepted (Feishu will redeliver)")
        data = json.loads(payload)
        if not isinstance(data, dict):
            raise ValueError("event payload is not a JSON object")
        future = asyncio.run_coroutine_threadsafe(self._commit(data), loop)
        future.result(timeout=COMMIT_TIMEOUT)


class _Handler(lark.EventDispatcherHandler):  # type: ignore[misc]
    """Hands the long connection's raw event bytes to :class:`LongConnection`.

    ``lark_oapi.ws.Client`` calls ``_do_without_validation(payload)`` and acks with 200
    when it returns (500 if it raises). Taking the bytes here, instead of registering
    typed processors, gives the same JSON the webhook route sees, so both modes share
    one normalizer.
    """

    def __init__(self, deliver: Callable[[bytes], None]) -> None:
        super().__init__()
        self._deliver = deliver

    def _do_without_validation(self, payload: bytes) -> None:
        self._deliver(payload)

    def do_without_validation(self, payload: bytes) -> None:  # older SDK name
        self._deliver(payload)


def _close_loop(loop: asyncio.AbstractEventLoop, client: Any) -> None:
    """Cancel the SDK's tasks (receive, ping, cache sweep), close its socket, close the loop."""
    try:
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        if client is not None and getattr(client, "_conn", None) is not None:
            loop.run_until_complete(asyncio.wait_for(client._disconnect(), 2.0))
        loop.run_until_complete(loop.shutdown_asyncgens())
    except Exception as exc:
        log.debug("feishu.ws_cleanup_failed", error=describe(exc))
    finally:
        loop.close()
