"""Terminal chat: stdin lines in, replies on stdout, through the full durable pipeline.

stdin is read by a daemon thread (it works for TTYs, pipes and regular files alike, and
never holds up exit); lines are accepted in batches as they arrive. EOF sets
:attr:`eof`, which ``tether chat`` waits for before draining and exiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys
import threading
import uuid
from typing import TYPE_CHECKING, TextIO

import structlog

from tether.adapters.base import Adapter, Sent
from tether.events import Conversation, Event, Kind, OutMessage, Sender, parse_command

if TYPE_CHECKING:
    from tether.gateway.inbox import Inbox

log = structlog.get_logger("tether.console")


class ConsoleAdapter(Adapter):
    platform = "console"

    def __init__(
        self,
        user: str = "local",
        *,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        name: str = "Tether",
    ) -> None:
        self.user = user
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.name = name
        self.eof = asyncio.Event()
        self.conversation = Conversation(platform="console", chat_id=user, chat_type="dm")
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self._pretty = self.stdout.isatty()

    async def start(self, inbox: Inbox) -> None:
        loop = asyncio.get_running_loop()

        def read() -> None:
            try:
                for line in self.stdin:
                    loop.call_soon_threadsafe(self._lines.put_nowait, line)
            except (OSError, ValueError) as exc:  # closed or unreadable stdin
                log.warning("console.read_error", error=str(exc))
            with contextlib.suppress(RuntimeError):  # the loop may be gone at exit
                loop.call_soon_threadsafe(self._lines.put_nowait, None)

        threading.Thread(target=read, name="console-stdin", daemon=True).start()
        self._task = asyncio.create_task(self._ingest(inbox), name="console-ingest")
        if self._pretty:
            self._write(f"Chatting with {self.name}. Ctrl-D to quit.")

    async def _ingest(self, inbox: Inbox) -> None:
        while True:
            batch = [await self._lines.get()]
            while not self._lines.empty() and batch[-1] is not None:
                batch.append(self._lines.get_nowait())
            events = [self._event(line) for line in batch if line is not None and line.strip()]
            if events:
                await inbox.accept(events)
            if batch[-1] is None:
                log.info("console.eof")
                self.eof.set()
                return

    def _event(self, line: str) -> Event:
        text = line.rstrip("\r\n")
        command = parse_command(text)
        return Event(
            key=f"console:{uuid.uuid4()}",
            platform=self.platform,
            kind=Kind.COMMAND if command else Kind.MESSAGE,
            conversation=self.conversation,
            sender=Sender(id=self.user, name=self.user),
            message_id=str(uuid.uuid4()),
            text=text,
            command=command[0] if command else None,
            args=command[1] if command else "",
        )

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def send(self, message: OutMessage) -> Sent:
        self._write(f"{self.name}: {message.text}" if self._pretty else message.text)
        return Sent(platform_id=str(next(self._ids)))

    def _write(self, text: str) -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()
