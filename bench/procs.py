"""The machine's processes as the benches read them from ``/proc``: who is whose child,
and how much CPU each has used. One reading for ``idle.py`` (a gateway's process tree)
and ``scaleout.py`` (the CPU of the instances' trees and of PostgreSQL).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

TICKS = os.sysconf("SC_CLK_TCK")


class Proc(NamedTuple):
    parent: int
    name: str
    #: User plus system CPU seconds so far.
    cpu: float


def processes() -> dict[int, Proc]:
    """Every process on the machine, by pid (one that ends while being read is left out)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # ended meanwhile
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        # fields[1] is the parent (stat field 4); utime and stime are fields 14 and 15
        found[int(entry)] = Proc(int(fields[1]), name, (int(fields[11]) + int(fields[12])) / TICKS)
    return found


def descendants(roots: list[int], procs: dict[int, Proc] | None = None) -> list[int]:
    """``roots`` and every process below them."""
    procs = processes() if procs is None else procs
    children: dict[int, list[int]] = {}
    for pid, proc in procs.items():
        children.setdefault(proc.parent, []).append(pid)
    found, todo = [], list(roots)
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found
