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

from tether.redaction import redactor

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


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
    ]
    if pretty:
        processors.append(redactor)
        processors.append(structlog.dev.ConsoleRenderer(colors=out.isatty()))
    else:
        # Scrubbed once rendered: one regex scan of the line instead of one per value
        # (half the cost of a line with secrets configured). The forms a secret is
        # masked in include its JSON-escaped ones (:func:`forms`), so a secret in a
        # value, an exception text or a traceback is masked in the line as in the value.
        processors.append(structlog.processors.JSONRenderer(serializer=_json))
        processors.append(redactor.scrub_line)
    sink = _new_sink(out)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, 20)),
        logger_factory=lambda *_args: sink,
        cache_logger_on_first_use=False,
    )
    # Libraries that use stdlib logging (aiohttp, asyncio, SDKs) and warnings go through
    # the same processors to the same sink: one format on the stream, scrubbed.
    root = logging.getLogger()
    root.handlers[:] = [_StdlibHandler(processors, sink)]
    root.setLevel(max(_LEVELS.get(level, 20), logging.INFO))
    logging.captureWarnings(True)


class _StdlibHandler(logging.Handler):
    """A stdlib ``logging`` record rendered like Tether's own lines.

    aiohttp's "Error handling request", asyncio's "Task exception was never retrieved"
    and a library's warnings used to be plain multi-line text in the middle of a JSON
    stream, which a log shipper splits into garbage. Here a record becomes an event dict
    (``event``, ``logger``, the level, and the traceback as one ``exception`` field), runs
    through structlog's processors (timestamp, redactor, renderer) and goes to the sink,
    so with ``logging.format: json`` every line on the stream parses as JSON.
    """

    def __init__(self, processors: list[Any], sink: LineSink) -> None:
        super().__init__()
        self.processors = processors
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        try:
            method = record.levelname.lower()
            rendered: Any = {"event": record.getMessage(), "logger": record.name}
            if record.exc_info:
                rendered["exc_info"] = record.exc_info
            for processor in self.processors:
                rendered = processor(None, method, rendered)
            if record.levelno >= logging.WARNING:
                self.sink.write_now(rendered)
            else:
                self.sink.msg(rendered)
        except structlog.DropEvent:  # a processor (a filter, capture_logs) dropped it
            return
        except Exception:  # a record that cannot be formatted must not break the caller
            self.handleError(record)


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


def _new_sink(out: TextIO) -> LineSink:
    """The sink every logger writes to from now on; the previous one is emptied first."""
    global _sink
    flush()
    _sink = LineSink(out)
    return _sink


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
