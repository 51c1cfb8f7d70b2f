"""Structured logging: one JSON line per transition, secrets scrubbed before output.

Every module logs through ``structlog.get_logger()``; :func:`configure` decides the
renderer (JSON lines, or a readable console on a TTY) and installs the redactor, which
replaces every configured secret wherever it appears — in values, exception text and
tracebacks — so no code path has to remember to mask.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any, TextIO
from urllib.parse import quote, quote_plus

import orjson
import structlog
from structlog.typing import EventDict, WrappedLogger

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
MASK = "***"
#: Shorter secrets are not masked: they would hit ordinary words and ids.
MIN_LENGTH = 4
#: A secret's part (:func:`parts`) is masked on its own only from this length on.
MIN_PART_LENGTH = 8
_PERCENT_ESCAPE = re.compile(r"%[0-9A-F]{2}")


class Redactor:
    """Replaces every configured secret, in every form it is written in, by ``***``.

    A secret leaks in more shapes than the one configured: a Telegram token's secret half
    (after the ``:``) alone, a token or password percent-encoded in a URL, a value escaped
    inside a JSON string or an error's ``{value!r}``. :func:`forms` lists them; all the
    forms of all the secrets become one compiled alternation, built once per secret set,
    so a log line costs one regex scan however many secrets there are. Strings shorter
    than :data:`MIN_LENGTH` are ignored as too common to mask.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets: tuple[str, ...] = ()
        self._pattern: re.Pattern[str] | None = None
        self.update(secrets)

    def update(self, secrets: Iterable[str]) -> None:
        merged = {*self.secrets, *(s for s in secrets if s and len(s) >= MIN_LENGTH)}
        if merged == set(self.secrets):
            return
        self.secrets = tuple(sorted(merged, key=len, reverse=True))
        written = {form for secret in merged for form in forms(secret)}
        # Grouped by first character (the engine tries one group where a flat alternation
        # tried every form), longest first inside a group: a form that contains another
        # is masked whole, not around it.
        groups: dict[str, list[str]] = {}
        for form in sorted(written, key=lambda form: (-len(form), form)):
            groups.setdefault(form[0], []).append(re.escape(form[1:]))
        self._pattern = re.compile(
            "|".join(f"{re.escape(first)}(?:{'|'.join(rests)})" for first, rests in groups.items())
        )

    def scrub(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(MASK, text)

    def scrub_line(self, _logger: WrappedLogger, _name: str, line: str) -> str:
        """The processor after the JSON renderer: the rendered line, scrubbed."""
        return line if self._pattern is None else self._pattern.sub(MASK, line)

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
        if self._pattern is None:
            return event_dict
        return {k: self.scrub_value(v) for k, v in event_dict.items()}


def forms(secret: str) -> set[str]:
    """Every way ``secret`` may be written where it could leak, at least MIN_LENGTH long.

    The secret and its significant parts (:func:`parts`), each as typed, percent-encoded
    (a URL path or query, a form body; upper- and lower-case escapes), and escaped as in a
    JSON string (ASCII-only or not, and once more for JSON inside JSON) or a Python repr.
    """
    found: set[str] = set()
    for part in {secret, *parts(secret)}:
        for encoded in (quote(part, safe=""), quote(part), quote_plus(part)):
            found.update((encoded, _PERCENT_ESCAPE.sub(lambda m: m.group().lower(), encoded)))
        escaped = json.dumps(part)[1:-1]
        found.update(
            (
                part,
                escaped,
                json.dumps(part, ensure_ascii=False)[1:-1],
                json.dumps(escaped)[1:-1],
                repr(part)[1:-1],
            )
        )
    # Each form once more as written inside a rendered JSON line (a repr in an exception's
    # text, then JSON-escaped): JSON lines are scrubbed after rendering.
    found |= {
        json.dumps(form, ensure_ascii=ascii)[1:-1] for form in found for ascii in (True, False)
    }
    return {form for form in found if len(form) >= MIN_LENGTH}


def parts(secret: str) -> list[str]:
    """The parts of ``secret`` that are secret on their own: what follows the first ``:``
    (a Telegram token's ``123456:AAH…`` half after the bot id, a ``user:password`` pair's
    password). The part before it is an id that event keys and logs must keep showing."""
    _, colon, rest = secret.partition(":")
    return [rest] if colon and len(rest) >= MIN_PART_LENGTH else []


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
