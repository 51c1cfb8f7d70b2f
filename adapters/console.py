"""Terminal chat: stdin lines in, replies on stdout, through the full durable pipeline.

stdin is read by a daemon thread (it works for TTYs, pipes and regular files alike, and
never holds up exit); lines are accepted in batches as they arrive. EOF sets
:attr:`eof`, which ``tether chat`` waits for before draining and exiting.

The ingest never gives up on the input. A failed accept (the store's writer killed, a
full disk) is retried with backoff, a line that cannot be stored (bytes that are not
UTF-8) is turned away alone with a notice on stderr, and EOF is always reached: a
script piping 3,000 lines gets 3,000 answers, or a notice for each line that got none.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys
import threading
import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, TextIO

import structlog

from tether.adapters.base import Adapter, Sent
from tether.adapters.kit import describe
from tether.backoff import equal_jitter
from tether.events import Conversation, Event, Kind, OutMessage, Sender, parse_command

if TYPE_CHECKING:
    from tether.adapters.base import Ingress

log = structlog.get_logger("tether.console")


#: One line of input: its number (from 1, blank lines counted) and its text.
Line = tuple[int, str]


class ConsoleAdapter(Adapter):
    platform = "console"
    #: Tries of one accept while the store fails, and the backoff between them (seconds,
    #: :func:`~tether.backoff.equal_jitter`): about 20 s in all before the lines are
    #: turned away with a notice, so a store that stays down cannot hold up EOF forever.
    accept_attempts = 10
    accept_backoff = (0.05, 5.0)

    def __init__(
        self,
        user: str = "local",
        *,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        name: str = "Tether",
    ) -> None:
        self.user = user
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        #: Where a line that was not sent is reported to the person typing (or piping).
        self.stderr = stderr or sys.stderr
        self.name = name
        self.eof = asyncio.Event()
        self.conversation = Conversation(platform="console", chat_id=user, chat_type="dm")
        self._lines: asyncio.Queue[Line | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self._pretty = self.stdout.isatty()

    async def start(self, inbox: Ingress) -> None:
        loop = asyncio.get_running_loop()

        def read() -> None:
            try:
                for number, line in enumerate(self._text_lines(), 1):
                    loop.call_soon_threadsafe(self._lines.put_nowait, (number, line))
            except (OSError, ValueError) as exc:  # closed or unreadable stdin
                log.warning("console.read_error", error=str(exc))
            with contextlib.suppress(RuntimeError):  # the loop may be gone at exit
                loop.call_soon_threadsafe(self._lines.put_nowait, None)

        threading.Thread(target=read, name="console-stdin", daemon=True).start()
        self._task = asyncio.create_task(self._ingest(inbox), name="console-ingest")
        if self._pretty:
            self._write(f"Chatting with {self.name}. Ctrl-D to quit.")

    def _text_lines(self) -> Iterable[str]:
        """stdin's lines, read as bytes where it has them: a text stream with strict
        errors would stop at the first byte that is not UTF-8 and lose the rest. Bad
        bytes come through as lone surrogates (``surrogateescape``), turned away later."""
        raw = getattr(self.stdin, "buffer", None)
        if raw is None:
            return self.stdin
        encoding = getattr(self.stdin, "encoding", None) or "utf-8"
        return (line.decode(encoding, "surrogateescape") for line in raw)

    async def _ingest(self, inbox: Ingress) -> None:
        try:
            while True:
                batch = [await self._lines.get()]
                while not self._lines.empty() and batch[-1] is not None:
                    batch.append(self._lines.get_nowait())
                lines = [item for item in batch if item is not None and item[1].strip()]
                events = [
                    (number, event) for number, line in lines if (event := self._read(number, line))
                ]
                if events:
                    await self._accept(inbox, events)
                if batch[-1] is None:
                    log.info("console.eof")
                    return
        finally:
            self.eof.set()  # whatever happened, ``tether chat`` must not wait forever

    async def _accept(self, inbox: Ingress, events: Sequence[tuple[int, Event]]) -> None:
        """Accept ``events``, retrying while the store fails; lines that cannot be stored
        (or not within :attr:`accept_attempts`) are turned away with a notice."""
        for attempt in range(1, self.accept_attempts + 1):
            try:
                await inbox.accept([event for _number, event in events])
                return
            except (ValueError, TypeError) as exc:  # this input, not the store: never retried
                if len(events) == 1:
                    self._reject([events[0][0]], describe(exc))
                    return
                for one in events:  # find the line at fault; the others go in
                    await self._accept(inbox, [one])
                return
            except Exception as exc:
                numbers = [number for number, _event in events]
                if attempt == self.accept_attempts:
                    self._reject(numbers, f"the store failed {attempt} times ({describe(exc)})")
                    return
                delay = equal_jitter(attempt, *self.accept_backoff)
                log.warning(
                    "console.accept_retry",
                    lines=_span(numbers),
                    error=describe(exc),
                    attempt=attempt,
                    retry_in_s=delay,
                )
                await asyncio.sleep(delay)

    def _read(self, number: int, line: str) -> Event | None:
        """The line as an event, or None (with a notice) when it cannot be stored."""
        text = line.rstrip("\r\n")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = text[exc.start]
            what = (
                f"byte 0x{ord(bad) - 0xDC00:02x}"
                if "\udc80" <= bad <= "\udcff"  # a byte that surrogateescape let through
                else f"character U+{ord(bad):04X}"
            )
            self._reject([number], f"it is not valid UTF-8 ({what} at position {exc.start})")
            return None
        return self._event(text)

    def _reject(self, numbers: Sequence[int], why: str) -> None:
        """Tell the person that these lines got no answer, and why."""
        which = f"line {numbers[0]} was" if len(numbers) == 1 else f"lines {_span(numbers)} were"
        log.info("console.rejected", lines=_span(numbers), reason=why)
        self.stderr.write(f"tether: {which} not sent: {why}\n")
        self.stderr.flush()

    def _event(self, text: str) -> Event:
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


def _span(numbers: Sequence[int]) -> str:
    """``3``, ``3-40`` or ``3-7, 9``: the input lines a notice or log line is about
    (a batch skips blank lines, so its numbers need not be consecutive)."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ", ".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)
