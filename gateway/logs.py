"""Structured logging: one JSON line per transition, secrets scrubbed before output.

Every module logs through ``structlog.get_logger()``; :func:`configure` decides the
renderer (JSON lines, or a readable console on a TTY) and installs the redactor, which
replaces every configured secret wherever it appears — in values, exception text and
tracebacks — so no code path has to remember to mask.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any, TextIO

import orjson
import structlog
from structlog.typing import EventDict, WrappedLogger

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
MASK = "***"


class Redactor:
    """Replaces known secret strings by ``***``. Short strings are ignored as too common."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets: tuple[str, ...] = ()
        self.update(secrets)

    def update(self, secrets: Iterable[str]) -> None:
        merged = {*self.secrets, *(s for s in secrets if s and len(s) >= 4)}
        # Longest first, so a secret that contains another is masked whole.
        self.secrets = tuple(sorted(merged, key=len, reverse=True))

    def scrub(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def scrub_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, dict):
            return {k: self.scrub_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.scrub_value(v) for v in value]
        if isinstance(value, int | float | bool) or value is None:
            return value
        return self.scrub(str(value))

    def __call__(self, _logger: WrappedLogger, _name: str, event_dict: EventDict) -> EventDict:
        if not self.secrets:
            return event_dict
        return {k: self.scrub_value(v) for k, v in event_dict.items()}


redactor = Redactor()


def configure(
    level: str = "info",
    fmt: str = "auto",
    secrets: Iterable[str] = (),
    stream: TextIO | None = None,
) -> None:
    """Set up structlog for the process. Safe to call again (tests, CLI sub-commands)."""
    redactor.update(secrets)
    out = stream or sys.stderr
    pretty = fmt == "console" or (fmt == "auto" and out.isatty())
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        _timestamp,
        structlog.processors.format_exc_info,
        redactor,
    ]
    if pretty:
        processors.append(structlog.dev.ConsoleRenderer(colors=out.isatty()))
    else:
        processors.append(structlog.processors.JSONRenderer(serializer=_json))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, 20)),
        logger_factory=_sink_for(out),
        cache_logger_on_first_use=False,
    )
    # Libraries that use stdlib logging (aiohttp, asyncio) go to the same stream, scrubbed.
    handler = logging.StreamHandler(out)
    handler.setFormatter(_ScrubbingFormatter("%(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(_LEVELS.get(level, 20), logging.INFO))


class LineSink:
    """structlog's output: lines gathered during one event-loop turn, written together.

    A gateway logs four lines per event; writing and flushing each one was a system call
    per line, which released the GIL to whatever thread wanted it: measured, a third of
    the pipeline bench's time. Lines logged inside a running loop are written once per loop
    turn (or when 1,000 are waiting); warnings and errors, lines from other threads and
    lines logged with no loop running are written at once, after those still waiting,
    so the order holds. A ``kill -9`` loses at most the current turn's lines — the
    same as being killed a moment earlier.
    """

    max_waiting = 1000

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._waiting: list[str] = []
        self._lock = threading.Lock()
        self._scheduled: asyncio.AbstractEventLoop | None = None

    def msg(self, message: str) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.write_now(message)
            return
        with self._lock:
            self._waiting.append(message)
            if len(self._waiting) < self.max_waiting and self._scheduled is loop:
                return
        if len(self._waiting) >= self.max_waiting:
            self.flush()
        else:
            self._scheduled = loop
            loop.call_soon(self.flush)

    def write_now(self, message: str) -> None:
        with self._lock:
            self._waiting.append(message)
        self.flush()

    def flush(self) -> None:
        with self._lock:
            self._scheduled = None
            if not self._waiting:
                return
            text = "\n".join(self._waiting) + "\n"
            self._waiting.clear()
            try:
                self.out.write(text)
                self.out.flush()
            except (ValueError, OSError):  # a closed stream or a full disk: never crash for a log
                pass

    log = debug = info = msg
    warn = warning = err = error = critical = exception = fatal = failure = write_now


_sink: LineSink | None = None


def _sink_for(out: TextIO) -> Any:
    """The sink every structlog logger writes to; the previous one is emptied first."""
    global _sink
    flush()
    sink = _sink = LineSink(out)
    return lambda *_args: sink


def flush() -> None:
    """Write every waiting line now (before exit, or a test reading captured output)."""
    if _sink is not None:
        _sink.flush()


atexit.register(flush)


_second: tuple[int, str] = (-1, "")


def _timestamp(_logger: WrappedLogger, _name: str, event_dict: EventDict) -> EventDict:
    """ISO 8601 UTC with microseconds, as structlog's ``TimeStamper(fmt="iso", utc=True)``
    writes it, at a third of its cost: the date and time of day change once a second."""
    global _second
    second, micro = divmod(round(time.time() * 1_000_000), 1_000_000)
    if second != _second[0]:
        _second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    event_dict["timestamp"] = f"{_second[1]}.{micro:06d}Z"
    return event_dict


def _json(value: Any, **_kwargs: Any) -> str:
    """orjson: several times faster than json.dumps, and there are four lines per event."""
    return orjson.dumps(value, default=str).decode()


class _ScrubbingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redactor.scrub(super().format(record))
