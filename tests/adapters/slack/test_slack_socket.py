"""Socket Mode through the real slack_sdk aiohttp client against the fake Socket Mode
server: every envelope acknowledged only after its payload is in the store, redeliveries
converging, failed commits left unacknowledged, reconnection on ``disconnect``, drops and
dead pings, and malformed envelopes acknowledged and skipped without blocking the rest."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog

from tests.adapters.slack.support import StoreInbox, config, opened, store_inbox
from tests.fakes.slack_api import APP_ID, FakeSlack
from tests.fakes.slack_events import block_actions, message_event, slash_command
from tests.fakes.slack_socket import FakeSocketMode
from tether.adapters.slack.adapter import SlackAdapter
from tether.errors import GatewayError
from tether.events import Event
from tether.memory.sqlite import SqliteStore

KEY = f"sl:{APP_ID}:msg:D0ADADM0001:1712345678.000100"


class WatchedInbox(StoreInbox):
    """The store's accept, with what each call returned and, when :attr:`held`, a gate
    that holds the commit until the test releases it."""

    def __init__(self, store: SqliteStore) -> None:
        super().__init__(store)
        self.fresh: list[bool] = []
        self.held = False
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def accept(
        self, events: Sequence[Event], cursors: Mapping[str, str] | None = None
    ) -> list[bool]:
        if self.held:
            self.entered.set()
            await self.release.wait()
        fresh = await super().accept(events, cursors)
        self.fresh.extend(fresh)
        return fresh


class Logged:
    """A structlog processor that lets a test await a log line (no polling)."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self._changed = asyncio.Event()

    def __call__(self, _logger: Any, _method: str, event: Any) -> Any:
        self.entries.append(dict(event))
        self._changed.set()
        return event

    def named(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.entries if e.get("event") == name]

    async def until(self, condition: Callable[[], bool], timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while not condition():
                self._changed.clear()
                await self._changed.wait()


@pytest.fixture
async def socket(slack: FakeSlack) -> AsyncIterator[FakeSocketMode]:
    fake = await FakeSocketMode(slack).start()
    try:
        yield fake
    finally:
        await fake.stop()


@asynccontextmanager
async def socket_mode(
    slack: FakeSlack, socket: FakeSocketMode, tmp_path: Path, ping_interval: float = 1.0
) -> AsyncIterator[tuple[WatchedInbox, SlackAdapter]]:
    async with store_inbox(tmp_path) as plain, opened(slack, mode="socket") as adapter:
        inbox = WatchedInbox(plain.store)
        adapter.socket_ping_interval = ping_interval
        await adapter.start(inbox)
        await socket.connected()
        yield inbox, adapter


def store_keys(inbox: StoreInbox) -> Callable[[str], Any]:
    """An ack probe: the inbox keys at the moment an acknowledgement arrives."""

    async def probe(_envelope_id: str) -> list[str]:
        return await inbox.keys()

    return probe


async def test_a_message_is_stored_before_its_envelope_is_acknowledged(
    slack: FakeSlack, socket: FakeSocketMode, tmp_path: Path
) -> None:
    async with socket_mode(slack, socket, tmp_path) as (inbox, adapter):
        assert adapter.connected and adapter.problem is None
        assert socket.connection_opens == 1
        inbox.held = True
        socket.ack_probe = store_keys(inbox)
        envelope = await socket.push("events_api", message_event("hello"))
        await inbox.entered.wait()
        # The commit is held: everything the client wrote before this pong has arrived,
        # and no acknowledgement is among it.
        await socket.round_trip()
        assert socket.acks == []
        inbox.release.set()
        await socket.acked(envelope)
        assert socket.probes[envelope.envelope_id] == [KEY]  # in the store at ack time
        assert socket.acks == [envelope.envelope_id]
        assert await inbox.keys() == [KEY]


async def test_redeliveries_are_acknowledged_and_are_one_row(
    slack: FakeSlack, socket: FakeSocketMode, tmp_path: Path
) -> None:
    async with socket_mode(slack, socket, tmp_path) as (inbox, _adapter):
        first = await socket.push("events_api", message_event("hello"))
        await socket.acked(first)
        again = await socket.redeliver(first)
        third = await socket.redeliver(again)
        assert (again.retry_attempt, third.retry_attempt) == (1, 2)
        assert again.envelope_id != first.envelope_id  # the key comes from the payload
        await socket.acked(again)
        await socket.acked(third)
        assert await inbox.keys() == [KEY]
        assert inbox.fresh == [True, False, False]  # one new row: one handler run


async def test_a_failed_commit_is_not_acknowledged_and_its_redelivery_is_stored_once(
    slack: FakeSlack, socket: FakeSocketMode, tmp_path: Path
) -> None:
    logged = Logged()
    with structlog.testing.capture_logs(processors=[logged]):
        async with socket_mode(slack, socket, tmp_path) as (inbox, _adapter):
            path = tmp_path / "slack.db"
            await inbox.store.close()  # the store is gone: nothing can be committed
            lost = await socket.push("events_api", message_event("hello"))
            await logged.until(lambda: bool(logged.named("slack.accept_failed")))
            await socket.round_trip()
            assert socket.acks == []
            (failed,) = logged.named("slack.accept_failed")
            assert failed["envelope"] == lost.envelope_id

            inbox.store = SqliteStore(str(path))  # the store is back
            await inbox.store.open()
            try:
                again = await socket.redeliver(lost)
                await socket.acked(again)
                assert socket.acks == [again.envelope_id]
                assert await inbox.keys() == [KEY]
                assert inbox.fresh == [True]
            finally:
                await inbox.store.close()


async def test_while_stopping_an_envelope_is_refused_and_not_acknowledged(
    slack: FakeSlack, socket: FakeSocketMode, tmp_path: Path
) -> None:
    logged = Logged()
    with structlog.testing.capture_logs(processors=[logged]):
        async with socket_mode(slack, socket, tmp_path) as (inbox, adapter):
            adapter._inbox = None  # what stop() does first: nothing more is taken
            late = await socket.push("events_api", message_event("late"))
            await logged.until(lambda: bool(logged.named("slack.accept_failed")))
            await socket.round_trip()
            assert socket.acks == []
            assert await inbox.keys() == []

            adapter._inbox = inbox  # a later run takes the redelivery
            again = await socket.redeliver(late)
            await socket.acked(again)
            assert socket.acks == [again.envelope_id]
            assert await inbox.keys() == [KEY]


async def test_stop_lets_a_commit_in_flight_finish_and_be_acknowledged(
    slack: FakeSlack, socket: FakeSocketMode, tmp_path: Path
) -> None:
    async with socket_mode(slack, socket, tmp_path) as (inbox, adapter):
        inbox.held = True
        envelope = await socket.push("events_api", message_event("hello"))
        await inbox.entered.wait()
        stopping = asyncio.create_task(adapter.stop())  # runs before the commit resumes
        inbox.release.set()
        await stopping
        assert envelope.envelope_id in socket.acks  # acknowledged before the socket closed
        assert await inbox.keys() == [KEY]
        await socket.wait_for(lambda: not socket.open)
        assert not adapter.connected and adapter.problem is not None


async def test_a_disconnect_message_moves_the_client_to_a_new_connection(
    slack: FakeSlack, socket: FakeSocketMode, tmp_path: Path
) -> None:
    async with socket_mode(slack, socket, tmp_path) as (inbox, adapter):
        await socket.disconnect("refresh_requested")
        await socket.connected(connections=2)
        assert socket.connection_opens == 2  # a fresh URL was asked for
        envelope = await socket.push("events_api", message_event("after refresh"))
        assert envelope.connection == 2
        await socket.acked(envelope)
        assert await inbox.keys() == [KEY]
        assert adapter.connected


@pytest.mark.parametrize("abrupt", [False, True], ids=["close-frame", "tcp-cut"])
async def test_a_dropped_socket_is_replaced(
    slack: FakeSlack, socket: FakeSocketMode, tmp_path: Path, abrupt: bool
) -> None:
    async with socket_mode(slack, socket, tmp_path, ping_interval=0.5) as (inbox, _adapter):
        await socket.drop(abrupt=abrupt)
        await socket.connected(connections=2)
        envelope = await socket.push("events_api", message_event("after drop"))
        await socket.acked(envelope)
        assert await inbox.keys() == [KEY]


async def test_unanswered_pings_replace_the_connection(
    slack: FakeSlack, socket: FakeSocketMode, tmp_path: Path
) -> None:
    async with socket_mode(slack, socket, tmp_path, ping_interval=0.5) as (inbox, _adapter):
        socket.answer_pings = False
        await socket.wait_for(lambda: socket.connections >= 2)
        socket.answer_pings = True
        await socket.connected(connections=2)
        envelope = await socket.push("events_api", message_event("after a stale socket"))
        await socket.acked(envelope, timeout=20)
        assert socket.pings > 0
        assert await inbox.keys() == [KEY]


async def test_a_slash_command_and_a_button_press_are_committed_then_acknowledged(
    slack: FakeSlack, socket: FakeSocketMode, tmp_path: Path
) -> None:
    async with socket_mode(slack, socket, tmp_path) as (inbox, _adapter):
        socket.ack_probe = store_keys(inbox)
        command = await socket.push("slash_commands", slash_command("/ask", "now", trigger_id="T1"))
        await socket.acked(command)
        press = await socket.push("interactive", block_actions("yes", trigger_id="T2"))
        await socket.acked(press)
        assert command.accepts_response_payload and press.accepts_response_payload
        assert socket.probes[command.envelope_id] == [f"sl:{APP_ID}:cmd:T1"]
        assert socket.probes[press.envelope_id] == [f"sl:{APP_ID}:cmd:T1", f"sl:{APP_ID}:act:T2"]
        (row,) = [r for r in await inbox.store.recover() if r.key.endswith(":cmd:T1")]
        assert "response_url" not in (row.event.raw or {})


async def test_malformed_envelopes_are_acknowledged_and_skipped_without_blocking(
    slack: FakeSlack, socket: FakeSocketMode, tmp_path: Path
) -> None:
    logged = Logged()
    with structlog.testing.capture_logs(processors=[logged]):
        async with socket_mode(slack, socket, tmp_path) as (inbox, _adapter):
            not_object = await socket.push("events_api", ["not", "an", "object"])
            unreadable = await socket.push(
                "events_api", {"type": "event_callback", "event": "not an event"}
            )
            unknown = await socket.push("a_future_kind", {"anything": 1})
            await socket.send_raw("not json at all")
            await socket.send_raw('{"type": "events_api", "payload": {}}')  # no envelope id
            good = await socket.push("events_api", message_event("hello"))
            for envelope in (not_object, unreadable, unknown, good):
                await socket.acked(envelope)
            assert await inbox.keys() == [KEY]
            skipped = logged.named("slack.skipped")
            (shape,) = [e for e in skipped if e.get("envelope") == not_object.envelope_id]
            assert "not an object" in shape["reason"]  # the envelope could not be read
            (dropped,) = [e for e in skipped if "envelope" not in e]  # the normalizer's
            assert "without event" in dropped["reason"]
            (ignored,) = [e for e in logged.named("slack.ignored") if e.get("envelope")]
            assert (
                ignored["envelope"] == unknown.envelope_id and "a_future_kind" in ignored["reason"]
            )


async def test_a_refused_app_token_fails_the_start_and_names_it(
    slack: FakeSlack, socket: FakeSocketMode, tmp_path: Path
) -> None:
    async with store_inbox(tmp_path) as inbox:
        adapter = SlackAdapter(config(slack, mode="socket", app_token="xapp-1-wrong-token"))
        adapter.open_attempts = 1
        await adapter.open()
        try:
            with pytest.raises(GatewayError, match="app_token was rejected"):
                await adapter.start(inbox)
            assert not adapter.connected
            assert socket.connections == 0
        finally:
            await adapter.stop()
            await adapter.close()
