"""Secrets scrubbed wherever they would be written: logs, errors, snapshots, pages.

One :data:`redactor` per process holds every configured secret (the config loader adds
them as it reads ``tether.yaml``); the log pipeline (``gateway/ops/logs.py``), dead
letters, ``tether check`` and the console pass what they write through it, so no code
path has to remember to mask. It sits on the ground floor because the config, the store
and the gateway all write text that may hold a secret.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus

from structlog.typing import EventDict, WrappedLogger

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
