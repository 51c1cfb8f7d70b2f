"""What a webhook route reads from a request anyone on the internet can send.

Three things in the standard library and aiohttp turn a stranger's bytes into a 500:

- aiohttp decodes header values as UTF-8 with ``surrogateescape``, so one non-UTF-8
  byte becomes a lone surrogate that ``str.encode()`` refuses. :func:`header` reads the
  bytes that arrived instead, so a secret or a signature is compared as bytes.
- ``json.loads`` raises ``RecursionError`` (not ``ValueError``) on deep nesting, and
  decodes bytes in UTF-16/32 or with encoded surrogates too. :func:`load_json` takes
  strict UTF-8 only, bounds the nesting, and raises :class:`Malformed` for all of it.
- ``"\\ud800"`` is valid JSON for a string that is not valid Unicode: nothing can store,
  log or send it. :func:`unstorable` tells an event that holds one, so a route can
  acknowledge and skip it instead of failing its commit on every redelivery.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tether.events import Event

if TYPE_CHECKING:
    from aiohttp import web

#: Platform payloads nest a dozen levels at most; anything deeper is not one of them.
MAX_DEPTH = 64


class Malformed(ValueError):
    """A body that is not a usable JSON document; the message says why, in one line."""


def header(request: web.BaseRequest, name: str) -> bytes | None:
    """The first ``name`` header's value as the bytes that arrived, or None."""
    wanted = name.lower().encode("ascii")
    for key, value in request.raw_headers:
        if key.lower() == wanted:
            return value
    return None


def load_json(raw: bytes) -> Any:
    """The JSON document in ``raw`` (UTF-8, at most :data:`MAX_DEPTH` deep)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Malformed(f"not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text)
    except RecursionError:
        raise Malformed(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise Malformed(f"invalid JSON: {exc}") from None
    if _deeper_than(value, MAX_DEPTH):
        raise Malformed(f"nested deeper than {MAX_DEPTH} levels")
    return value


def unstorable(event: Event) -> str | None:
    """Why ``event`` can never be stored, or None.

    Serializing it is the test the store applies; what fails it here is a lone
    surrogate (``"\\ud800"`` in the JSON the platform sent, or in a message's content
    once normalize decoded it), which no store, log line or platform API accepts.
    """
    try:
        event.to_json()
    except ValueError:  # pydantic's serialization error: UTF-8 refused a surrogate
        return "holds text that is not valid Unicode (a lone surrogate)"
    return None


def _deeper_than(value: Any, limit: int) -> bool:
    """Iteratively, so that measuring a deep document cannot exhaust the stack."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
