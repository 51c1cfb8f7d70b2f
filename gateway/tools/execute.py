"""One tool call, run at most once per event — the tool's side effect included.

A call is named by its place in the turn, ``tool:{round}:{index}`` (DESIGN §13): the
provider's call id changes when the model is asked again, the position does not, and a
re-run replays the model's rounds from their own memoized steps, so the same position
means the same call. Two steps make the promise:

1. ``tool:R:I:started`` is saved (durably: the store's ``save_step`` returns after the
   commit) *before* the tool runs, naming the call (tool and arguments);
2. ``tool:R:I`` holds the outcome and result once the tool returned.

Both are read on every run, the first attempt included (``tether dead retry`` starts an
event at attempt 1 again, its steps kept), and a mark counts only for the same call: a
model asked again that chose another call at that place gets that call run.

On a re-run (a retry, or the restart after a crash) a call whose result is stored is not
run again: the stored result goes back to the model (``tool.cached``), and what the tool
queued for the checkpoint (replies through ``ctx.send``, facts through ``ctx.memory``) is
queued again, since that checkpoint never happened. A call found started by an earlier
attempt but not finished is the ambiguous case, like an outbox send cut off mid-way: an
``idempotent`` tool runs again; any other tool is not run blindly — the model is told it
may or may not have happened (``tool.unknown``), and that outcome is stored like any
other, so the event's steps (and its dead-letter snapshot) show it.

Whatever a tool raises (a :class:`ToolError`, a bug, bad JSON from the model) becomes a
result the model reads; only a budget stop (:class:`BudgetExceeded`) and cancellation end
the turn.

What a call may cost is bounded before it runs: arguments over
``agent.tools.max_argument_bytes`` are refused before either step is written (outcome
``refused``; the steps name them by a digest: :mod:`.bounds`), and a result over
``agent.tools.max_result_chars`` is cut, saying so. The call runs in a task of its own
within its timeout (:mod:`.deadline`): one that does not stop when cancelled, at its
timeout or when the turn is stopped, is left running and its outcome stored as
``unknown``, so no re-run calls it again while it may still be at work.

A call that needs a person's approval waits for it before either step is written
(:mod:`.approvals`): approved, it runs as above with exactly the approved arguments;
denied or expired, that is its stored outcome. A tool may ask the person itself
(``ctx.ask``): its ``started`` mark then says it asked, and the re-run with the answer
runs it again (its own steps memoized) instead of taking it for cut off.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from tether import metrics
from tether.errors import BudgetExceeded, ToolError, ToolTimeout
from tether.events import OutMessage
from tether.gateway.handler.asking import Suspend
from tether.gateway.handler.context import turn_of
from tether.gateway.handler.tool import Tool
from tether.gateway.tools import approvals, bounds, deadline

if TYPE_CHECKING:
    from tether.gateway.handler.context import Context

#: What the model reads for a non-idempotent call cut off by a crash.
UNKNOWN = (
    "UNKNOWN: this call was interrupted (the gateway stopped while it ran) and the tool is"
    " not safe to run twice, so it was not run again. Its effect may or may not have"
    " happened: check before trying again, or tell the person."
)
#: What is stored for a call left running when its turn was stopped or timed out.
LEFT_RUNNING = (
    "UNKNOWN: the turn was stopped while this call ran, and the tool did not stop when"
    " cancelled, so it was left running. Its effect may or may not happen: check before"
    " trying again, or tell the person."
)


def step_name(round_: int, index: int) -> str:
    return f"tool:{round_}:{index}"


async def execute(
    ctx: Context, tools: Mapping[str, Tool], call: Mapping[str, Any], round_: int, index: int
) -> str:
    """Run the model's ``call`` (the API's ``tool_calls`` entry) once for this event;
    returns the text the model reads as the call's result."""
    key = step_name(round_, index)
    function = call.get("function") or {}
    name = str(function.get("name") or "")
    raw = function.get("arguments")
    caps = bounds.limits(ctx)
    text = bounds.arguments_text(raw)
    length = bounds.size(text)
    # Arguments over the cap are never stored, nor parsed: the steps name them by digest.
    oversized = length > caps.max_argument_bytes
    identity = {"tool": name, "arguments": bounds.digest(text, length) if oversized else text}
    log = ctx.log.bind(tool=name, step=key)
    # Read on every attempt (``ctx.step`` reads from the second on): an event requeued by
    # ``tether dead retry`` starts at attempt 1 again with its steps kept. A mark for a
    # different call at this place (the model was asked again and chose otherwise) is
    # not this call's.
    turn = turn_of(ctx)
    steps, event = turn.store, ctx.event.key
    stored = _same(await steps.step(event, key), identity)
    if stored is not None:
        if stored.get("outcome") != "refused":
            # A call that waited for an approval reaches its wait again, ended now, so
            # the turn's trace and its replies' outbox keys (the card's) are as they were
            # on the run that asked; a call needing none passes straight through.
            await approvals.gate(ctx, tools.get(name), name, text, log, replay=True)
        log.info("tool.cached", outcome=stored.get("outcome"))
        metrics.TOOL_CALLS.labels(name, "cached").inc()
        _replay(ctx, stored.get("effects") or {})
        return str(stored.get("result", ""))
    if oversized:
        text = bounds.refused(name, length, caps.max_argument_bytes)
        log.warning("tool.refused", bytes=length, limit=caps.max_argument_bytes)
        metrics.TOOL_CALLS.labels(name, "refused").inc()
        result = {"attempt": ctx.attempt, **identity, "outcome": "refused", "result": text}
        await steps.save_step(event, key, json.dumps(result))
        return text
    gate = await approvals.gate(ctx, tools.get(name), name, text, log)
    if gate is not None:  # denied or expired: stored as the call's outcome, never asked again
        outcome = gate.split(":", 1)[0].split()[0]  # denied, expired: not who denied it
        metrics.TOOL_CALLS.labels(name, outcome).inc()
        result = {"attempt": ctx.attempt, **identity, "outcome": outcome, "result": gate}
        await steps.save_step(event, key, json.dumps(result))
        return gate
    mark = _same(await steps.step(event, f"{key}:started"), identity)
    resumed = mark is not None and not mark.get("asked")
    # Committed before the tool runs: a crash from here on leaves the ambiguous case.
    await steps.save_step(event, f"{key}:started", json.dumps({"attempt": ctx.attempt, **identity}))
    marks = _Marks(ctx)
    turn.tool_step = key  # a tool's own idempotency key (gateway/tools/reminders.py)
    started = time.monotonic()

    async def finish(outcome: str, text: str) -> str:
        duration = round((time.monotonic() - started) * 1000, 2)
        if outcome == "done":
            log.info("tool.done", duration_ms=duration, chars=len(text))
        else:
            log.warning(f"tool.{outcome}", duration_ms=duration, error=text[:300])
        metrics.TOOL_CALLS.labels(name, outcome).inc()
        text = bounds.cut(text, caps.max_result_chars)
        result = {"attempt": ctx.attempt, **identity, "outcome": outcome, "result": text}
        result |= {"duration_ms": duration, "effects": marks.effects()}
        await steps.save_step(event, key, json.dumps(result))
        return text

    async def abandoned() -> None:  # the turn was cancelled; the tool would not stop
        await finish("unknown", LEFT_RUNNING)

    try:
        ran = await _run(ctx, tools.get(name), name, raw, resumed, log, abandoned)
    except Suspend:  # the tool asked the person (ctx.ask): it runs again with the answer
        asked = {"attempt": ctx.attempt, **identity, "asked": True}
        await steps.save_step(event, f"{key}:started", json.dumps(asked))
        raise
    finally:
        turn.tool_step = None
    return await finish(*ran)


def _same(raw: str | None, identity: Mapping[str, str]) -> dict[str, Any] | None:
    """The stored mark ``raw`` if it is of the call ``identity`` names, else None."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict) or any(value.get(k) != v for k, v in identity.items()):
        return None
    return value


async def _run(
    ctx: Context,
    tool: Tool | None,
    name: str,
    raw: Any,
    resumed: bool,
    log: Any,
    abandoned: Callable[[], Awaitable[None]],
) -> tuple[str, str]:
    """``(outcome, text)`` of one call: ``done``, ``failed``, ``timeout`` or ``unknown``."""
    if tool is None:
        return "failed", f"error: there is no tool named {name!r}"
    try:
        arguments = _arguments(raw)
    except ToolError as exc:
        return "failed", f"error: {exc}"
    if resumed and not tool.idempotent:
        return "unknown", UNKNOWN
    log.info("tool.started", source=tool.source, resumed=resumed)
    try:
        call = tool.run(ctx, arguments)
        return "done", await deadline.run(call, tool.timeout, name, log, abandoned)
    except BudgetExceeded:
        raise
    except deadline.Abandoned as exc:
        return "unknown", f"error: {exc}"
    except ToolTimeout as exc:
        return "timeout", f"error: {exc}"
    except ToolError as exc:
        return "failed", f"error: {exc}"
    except Exception as exc:
        log.warning("tool.raised", error=f"{type(exc).__name__}: {exc}", exc_info=True)
        return "failed", f"error: the tool raised {type(exc).__name__}: {exc}"


def _arguments(raw: Any) -> dict[str, Any]:
    """The call's arguments as a dict: the API sends a JSON string (models get it wrong:
    empty, truncated, a list), some servers an object."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise ToolError(
                f"the arguments are not valid JSON ({exc}); send one JSON object"
            ) from None
    if not isinstance(raw, dict):
        raise ToolError(f"the arguments must be a JSON object, not {type(raw).__name__}")
    return raw


class _Marks:
    """What the context had queued for the checkpoint before a tool ran, to tell what
    the tool itself queued (kept with its result, and queued again on a cached re-run)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        changes = ctx.memory.changes
        self.outbox = len(ctx.outbox)
        self.facts = len(changes.facts)
        self.person_facts = len(changes.person_facts)
        self.forget = len(changes.forget)
        self.forget_owned = len(changes.forget_owned)
        self.trace = len(turn_of(ctx).asking.trace)

    def effects(self) -> dict[str, Any]:
        changes = self.ctx.memory.changes
        found: dict[str, Any] = {
            "outbox": [m.model_dump(mode="json") for m in self.ctx.outbox[self.outbox :]],
            "facts": [list(fact) for fact in changes.facts[self.facts :]],
            "person_facts": [list(fact) for fact in changes.person_facts[self.person_facts :]],
            "forget": list(changes.forget[self.forget :]),
            "forget_owned": [list(gone) for gone in changes.forget_owned[self.forget_owned :]],
            # the steps it took and what it asked: passed again on a cached re-run, so
            # the turn's trace is the same whether the tool ran or its result was read
            "trace": turn_of(self.ctx).asking.trace[self.trace :],
        }
        return {name: value for name, value in found.items() if value}


def _replay(ctx: Context, effects: Mapping[str, Any]) -> None:
    ctx.outbox.extend(OutMessage.model_validate(m) for m in effects.get("outbox", []))
    changes = ctx.memory.changes
    changes.facts.extend((str(text), int(count)) for text, count in effects.get("facts", []))
    changes.person_facts.extend(
        (str(text), int(count), str(owner), bool(in_dm))
        for text, count, owner, in_dm in effects.get("person_facts", [])
    )
    changes.forget.extend(int(fact_id) for fact_id in effects.get("forget", []))
    changes.forget_owned.extend(
        (int(fact_id), str(owner)) for fact_id, owner in effects.get("forget_owned", [])
    )
    asking = turn_of(ctx).asking
    for mark in effects.get("trace", []):
        asking.passed(str(mark))
        if str(mark).startswith("wait:"):
            asking.asked += 1  # its questions keep their places
