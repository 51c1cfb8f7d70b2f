"""An event's timeline as the event page draws it: one list, in time order.

The store gives the parts apart (:class:`~tether.memory.console.Timeline`): when it
arrived, its steps and LLM calls, its moves off the plain path (each failed attempt and
when it runs again, a new attempt begun, a death, a requeue, a run cut off by a
restart), its current state, and its replies. Drawn part after part, a retried event
read "done after 1 attempt(s)" under its steps with nothing of the death in between;
here every part is an :class:`Entry` with its time, sorted once. The current state is
the last move unless the history already ends with it, and after a requeue its attempts
are counted from the retry, which it says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tether.memory.console import Moved, Timeline

#: At one instant, what came first: the arrival, then moves, work, the state, the sends.
_RANK = {"received": 0, "move": 1, "step": 2, "llm": 3, "state": 4, "send": 5}


@dataclass(slots=True)
class Entry:
    """One line of the timeline: ``kind`` picks how the template draws ``data``; ``css``
    is the class of its ``<li>`` (``status-dead``, ...); ``text`` the words, no user text."""

    at: float
    kind: str
    text: str = ""
    css: str = ""
    data: dict[str, Any] = field(default_factory=dict)


def entries(timeline: Timeline) -> list[Entry]:
    """Every part of ``timeline`` as one list, oldest first."""
    event = timeline.event
    arrived = event.created
    found = [Entry(arrived, "received", "received")]
    found += [Entry(s.created or arrived, "step", data={"step": s}) for s in timeline.steps]
    found += [
        Entry(created or arrived, "llm", data={"name": n, "model": m, "tokens": t, "cost": c})
        for n, m, t, c, created in timeline.usage
    ]
    found += [_moved(move) for move in timeline.moves]
    last = timeline.moves[-1] if timeline.moves else None
    if last is None or last.status != event.status or last.at != event.updated:
        requeued = any(m.status == "received" and m.before != "running" for m in timeline.moves)
        since = " since the retry" if requeued else ""
        text = f"{event.status} after {event.attempts} attempt(s){since}"
        state = Entry(event.updated, "state", text, f"status-{event.status}")
        state.data["error"] = event.error if event.status != "done" else None
        found.append(state)
    found += [Entry(s.updated or s.created, "send", css=f"send status-{s.status}", data={"send": s})
              for s in timeline.sends]  # fmt: skip
    return sorted(found, key=lambda entry: (entry.at, _RANK[entry.kind]))


def _moved(move: Moved) -> Entry:
    n, error = move.attempts, move.error
    data: dict[str, Any]
    if move.status == "retry_wait":
        text, data = f"attempt {n} failed; it runs again at", {"retry_at": move.retry_at}
        data["error"] = error
    elif move.status == "running":
        text, data = f"attempt {n} begun", {}
    elif move.status == "dead":
        text, data = f"dead after {n} attempt(s)", {"error": error}
    elif move.status == "received" and move.before == "running":
        text, data = f"attempt {n} cut off by a restart; received again", {}
    elif move.status == "received":
        text, data = f"retried by the operator (was {move.before}; attempts from zero)", {}
    else:
        text, data = f"{move.status} after {n} attempt(s)", {}
    return Entry(move.at, "move", text, f"move status-{move.status}", data)
