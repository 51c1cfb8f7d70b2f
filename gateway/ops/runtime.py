"""The process around the gateway: which event loop it runs on, and what it gives back.

uvloop (libuv under asyncio's API) when it imports: the pipeline is a loop of small
awaits, socket reads and subprocess pipe writes, and uvloop runs that loop in C. It is
a dependency on every platform it builds for; where it does not import (Windows, an
interpreter it has no wheel for), the standard loop runs the same code. ``TETHER_LOOP=
asyncio`` chooses the standard loop on purpose (to rule uvloop out when hunting a bug).

:func:`release_heap` hands memory that start-up used and freed (parsed configs, a
Discord READY payload, import-time temporaries) back to the operating system. glibc
keeps freed memory in its heap until asked; an idle gateway should not pay for its own
start for the rest of its life. :func:`cap_malloc_arenas` keeps glibc from giving each
thread (aiosqlite's, the resolver's) its own heap, which each holds on to.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
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
    """``asyncio.run(main)`` on uvloop when it imports, else on the standard loop; one
    malloc heap for the process (:func:`cap_malloc_arenas`)."""
    cap_malloc_arenas()
    if loop_name() == "uvloop":
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)


def running_loop() -> str:
    """Which loop this code runs on, for the ``gateway.started`` line."""
    loop = type(asyncio.get_running_loop())
    return "uvloop" if loop.__module__.startswith("uvloop") else "asyncio"


#: glibc's ``mallopt`` parameter number for the most heaps (arenas) malloc may create.
_M_ARENA_MAX = -8


def cap_malloc_arenas(arenas: int = 1) -> None:
    """Let glibc's malloc use at most ``arenas`` heaps, unless ``MALLOC_ARENA_MAX`` is set.

    glibc gives each thread that allocates while another holds the lock a heap of its
    own (up to 8 per core), and each keeps pages it freed. The gateway's Python code
    runs one thread at a time under the GIL and its helper threads (aiosqlite's
    connection, the resolver's executor) allocate little, so one heap is rarely
    contended, and it saves ~1.8 MB of an idle gateway's resident memory
    (bench/idle.py). Called by :func:`run`, before the gateway starts a thread: a heap
    already made stays. ``MALLOC_ARENA_MAX`` in the environment (read by glibc when the
    process starts) is the operator's choice and wins. A no-op where the C library has
    no ``mallopt`` (musl, macOS, Windows).
    """
    if "MALLOC_ARENA_MAX" in os.environ:
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: libc's
    except (OSError, AttributeError):
        return
    mallopt(_M_ARENA_MAX, arenas)


def release_heap() -> None:
    """Return the C heap's free pages to the system (glibc ``malloc_trim``); a no-op
    where the C library has no such call."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own symbols: libc's
    except (OSError, AttributeError):
        return
    trim(0)


#: Allocations between two young-generation collections (CPython's default: 700).
GC_YOUNG_THRESHOLD = 10_000


def settle_heap() -> None:
    """Take everything alive after start-up out of the garbage collector's sight.

    A gateway imports a lot (pydantic schemas, python-telegram-bot, discord.py,
    lark-oapi) and keeps all of it for its life, yet every full collection walks it
    again: on ``bench/pipeline.py`` collections took about a quarter of the run, with
    pauses of up to 0.25 s. Frozen objects are never collected, even once garbage, so
    this is for a process that is the gateway (``tether run``, ``tether chat``), once,
    after start.

    Then the young generation is collected every :data:`GC_YOUNG_THRESHOLD` allocations
    instead of 700. Under load the replies waiting in the outbox (a pydantic message, its
    sets and lists each) were still alive at most young collections, so they were
    promoted, and the old generation grew until full collections walked 120,000 objects:
    on ``bench/telegram.py`` (20,000 updates) collections took 2.2 s of 14 s of CPU. With
    fewer young collections most of them are freed before one comes: 0.34 s. The
    per-event path leaves no cycles (tests/gateway/core/test_pipeline.py), so what waits longer for
    a collection is little.
    """
    gc.collect()
    release_heap()  # what start-up freed goes back to the system
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)
