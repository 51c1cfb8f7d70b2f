"""An event's timeline as the event page draws it: one list, in time order.

The store gives the parts apart (:class:`~tether.memory.console.Timeline`): when it
arrived, its steps and LLM calls, its moves off the plain path (each failed attempt and
when it runs again, a new attempt begun, a death, a requeue, a run cut off by a
restart), its current state, and its replies. Drawn part after part, a retried event
read "done after 1 attempt(s)" under its steps with nothing of the death in between;
here every part is an :class:`Entry` with its time, sorted once. The current state is
the last move unless the history already ends with it, and after a requeue its attempts
are counted from the retry, which it says.

A turn that waited for a person (``ctx.ask``, an approval) shows each of its waits
(:class:`~tether.memory.waits.Wait`) twice: when it asked (the question, or the tool,
hash and arguments' approvers), and how it ended (answered by whom, approved or denied by
whom, expired, cancelled). Its moves say it was suspended, and that the answer — not an
operator — put it back to run: a resume read "retried by the operator" before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.memory.console import Moved, Timeline
from tether.memory.waits import Wait

#: At one instant, what came first: the arrival, a question and its end, then moves,
#: work, the state, the sends.
_RANK = {"received": 0, "asked": 1, "ended": 1, "move": 2, "step": 3, "llm": 4, "state": 5,
         "send": 6}  # fmt: skip


@dataclass(slots=True)
class Entry:
    """One line of the timeline: ``kind`` picks how the template draws ``data``; ``css``
    is the class of its ``<li>`` (``status-dead``, ...); ``text`` the words, no user text."""

    at: float
    kind: str
    text: str = ""
    css: str = ""
    data: dict[str, Any] = field(default_factory=dict)


def entries(timeline: Timeline, waits: Sequence[Wait] = ()) -> list[Entry]:
    """Every part of ``timeline`` and of its turn's ``waits`` as one list, oldest first."""
    event = timeline.event
    arrived = event.created
    found = [Entry(arrived, "received", "received")]
    found += [Entry(s.created or arrived, "step", data={"step": s}) for s in timeline.steps]
    found += [
        Entry(created or arrived, "llm", data={"name": n, "model": m, "tokens": t, "cost": c})
        for n, m, t, c, created in timeline.usage
    ]
    found += [_moved(move) for move in timeline.moves]
    for wait in waits:
        found += _waited(wait)
    last = timeline.moves[-1] if timeline.moves else None
    if last is None or last.status != event.status or last.at != event.updated:
        requeued = any(_requeued(m) for m in timeline.moves)
        since = " since the retry" if requeued else ""
        text = f"{event.status} after {event.attempts} attempt(s){since}"
        state = Entry(event.updated, "state", text, f"status-{event.status}")
        state.data["error"] = event.error if event.status != "done" else None
        found.append(state)
    found += [Entry(s.updated or s.created, "send", css=f"send status-{s.status}", data={"send": s})
              for s in timeline.sends]  # fmt: skip
    return sorted(found, key=lambda entry: (entry.at, _RANK[entry.kind]))


def _requeued(move: Moved) -> bool:
    """An operator's retry: back to ``received`` from anything but a run (a restart) or
    a wait (its answer)."""
    return move.status == "received" and move.before not in ("running", "waiting")


def _waited(wait: Wait) -> list[Entry]:
    """When ``wait`` asked, and (once it ended) how; ``data`` holds the user text."""
    tool, hashed = wait.detail.get("tool"), wait.detail.get("hash")
    approval = wait.kind == "approval"
    data: dict[str, Any] = {"wait": wait.id, "chat": wait.chat, "deadline": wait.deadline}
    if approval:
        data.update(tool=tool, hash=hashed, approvers=", ".join(wait.detail.get("approvers") or []))
        text = "approval requested for"
    else:
        data.update(question=wait.question, sender=wait.sender)
        text = "asked"
    found = [Entry(wait.created, "asked", text, f"wait wait-{wait.kind}", data)]
    if wait.status == "open" or wait.resolved is None:
        return found
    answer = wait.answer or {}
    ended: dict[str, Any] = {"wait": wait.id, "tool": tool, "hash": hashed}
    who = answer.get("name") or answer.get("sender") or "someone"
    if wait.status == "answered" and approval:
        text = f"{answer.get('decision') or 'answered'} by"
        ended.update(who=who, sender=answer.get("sender"))
    elif wait.status == "answered":
        text = "answered by"
        ended.update(who=who, sender=answer.get("sender"), answer=answer.get("text"))
    elif wait.status == "expired":
        text = "expired: nobody answered before its deadline"
    else:
        text = "cancelled before an answer"
    css = f"wait wait-{wait.status}"
    found.append(Entry(wait.resolved, "ended", text, css, ended))
    return found


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
    elif move.status == "waiting":
        text, data = f"suspended after attempt {n}: waiting for a person", {}
    elif move.status == "received" and move.before == "waiting":
        text, data = "the wait ended; it runs again from the top, finished steps replayed", {}
    elif move.status == "received" and move.before == "running":
        text, data = f"attempt {n} cut off by a restart; received again", {}
    elif move.status == "received":
        text, data = f"retried by the operator (was {move.before}; attempts from zero)", {}
    else:
        text, data = f"{move.status} after {n} attempt(s)", {}
    return Entry(move.at, "move", text, f"move status-{move.status}", data)
