"""The process around the gateway: which event loop it runs on, and what it gives back.

uvloop (libuv under asyncio's API) when it imports: the pipeline is a loop of small
awaits, socket reads and subprocess pipe writes, and uvloop runs that loop in C. It is
a dependency on every platform it builds for; where it does not import (Windows, an
interpreter it has no wheel for), the standard loop runs the same code. ``TETHER_LOOP=
asyncio`` chooses the standard loop on purpose (to rule uvloop out when hunting a bug).

:func:`release_heap` hands memory that start-up used and freed (parsed configs, a
Discord READY payload, import-time temporaries) back to the operating system. glibc
keeps freed memory in its heap until asked; an idle gateway should not pay for its own
start for the rest of its life.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_name() -> str:
    """``uvloop`` when it imports and is not turned off by ``TETHER_LOOP=asyncio``."""
    if os.environ.get("TETHER_LOOP", "").lower() == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on uvloop when it imports, else on the standard loop."""
    if loop_name() == "uvloop":
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)


def running_loop() -> str:
    """Which loop this code runs on, for the ``gateway.started`` line."""
    loop = type(asyncio.get_running_loop())
    return "uvloop" if loop.__module__.startswith("uvloop") else "asyncio"


def release_heap() -> None:
    """Return the C heap's free pages to the system (glibc ``malloc_trim``); a no-op
    where the C library has no such call."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own symbols: libc's
    except (OSError, AttributeError):
        return
    trim(0)
