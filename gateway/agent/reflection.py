"""Reflection: the agent distils its own long-term memory from its conversations.

A ``jobs:`` entry with ``reflect:`` (e.g. nightly) fires one cron event; its handler
is :func:`reflect`. For each conversation with turns newer than its cursor
(``reflected:{conversation}``, the id of the last turn a reflection read), ONE LLM call
reads those turns and the conversation's current facts and proposes facts to add,
update or retire, as structured output (``response_format`` with :class:`Proposal`'s JSON
schema) that is checked again here: an invalid proposal is skipped with its reason.

Checkpointed per conversation. The plan (which conversations, up to which turn) is a
step, so every attempt reads the same turns even if more arrived. Each conversation's
LLM call is a memoized step, and what it proposes is applied at once, in one
transaction with a step of its own (``reflect:done:{conversation}``, through the
store's ``commit_step``): its facts, its cursor and the call's usage. So a run killed
or timed out midway keeps every conversation it finished, even if it then outlasts
its attempts and dies: the next attempt, or the next night's run (whose plan no longer
holds them, their cursors moved), neither applies nor pays for them again. The
event's own checkpoint is left with the report.

What it never does: delete. Messages stay; a retired fact (or the old text of an updated
one) is marked ``retired`` in the store and leaves prompts and listings, but stays for
an operator to read. A person sees what was learned with ``/facts`` and removes it with
``/forget`` (which, being their explicit wish, does delete).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from tether.config.jobs import ReflectConfig
from tether.errors import BudgetExceeded, Fatal
from tether.events import Target
from tether.gateway.handler.context import Context, turn_of
from tether.gateway.llm.client import MIN_COMPLETION_TOKENS
from tether.memory import tokens
from tether.memory.records import Fact, MemoryChanges, Turn

#: The cursor of a conversation: the id of the newest turn a reflection has read.
CURSOR_PREFIX = "reflected:"
#: The step that fixes, once per run, which conversations are read up to which turn.
PLAN_STEP = "reflect:plan"
#: The step of one conversation (``reflect:done:{conversation}``), committed with what
#: its reading applies; its result is the :class:`Run` counts it adds, and its tokens.
DONE_STEP = "reflect:done:"


class Update(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: int
    text: str


class Proposal(BaseModel):
    """What the model may propose for one conversation (its answer must be this JSON)."""

    model_config = ConfigDict(extra="forbid")
    #: New facts, each one short sentence.
    add: list[str] = []
    #: Facts (by id) whose text should change.
    update: list[Update] = []
    #: Facts (by id) that are no longer true.
    retire: list[int] = []


SYSTEM = (
    "You maintain the long-term memory of a chat assistant. Read the new conversation"
    " turns and the facts saved so far. Propose facts worth keeping for future"
    " conversations (stable preferences, names, plans, decisions), changes to saved facts"
    " that are now wrong, and saved facts that are no longer true. Propose nothing when"
    " nothing is worth keeping. Answer with ONE JSON object only, no prose, matching this"
    " JSON schema:\n" + json.dumps(Proposal.model_json_schema())
)

#: Structured output: the API is asked for JSON valid against :class:`Proposal`.
RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "reflection", "schema": Proposal.model_json_schema()},
}


@dataclass
class Run:
    """What one reflection run did, for its log lines and its report."""

    reflected: int = 0
    added: int = 0
    updated: int = 0
    retired: int = 0
    invalid: list[str] = field(default_factory=list)
    #: Conversations whose call the API refused (``Fatal``): the others still ran.
    failed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    stopped: str | None = None
    #: Tokens of the conversations an earlier attempt of this run finished: their calls
    #: are not made again, so ``ctx.llm.spent`` does not hold them, and the budget must.
    carried: int = 0

    def count(self, conversation: str, outcome: dict[str, Any]) -> None:
        """Add one conversation's outcome (a :data:`DONE_STEP` result)."""
        self.reflected += outcome["reflected"]
        self.added += outcome["added"]
        self.updated += outcome["updated"]
        self.retired += outcome["retired"]
        if outcome["invalid"]:
            self.invalid.append(conversation)

    def report(self) -> str:
        text = (
            f"Reflection: {self.reflected} conversation(s) read; facts {self.added} added,"
            f" {self.updated} updated, {self.retired} retired."
        )
        if self.invalid:
            text += f" {len(self.invalid)} proposal(s) were invalid and skipped."
        if self.failed:
            text += (
                f" {len(self.failed)} conversation(s) could not be read (the model's API"
                " refused the request; see memory.reflection_failed in the log)."
            )
        if self.stopped:
            text += (
                f" Stopped at the {self.stopped}: {len(self.left)} conversation(s) left"
                " for the next run."
            )
        return text


async def reflect(ctx: Context, config: ReflectConfig, targets: list[Target]) -> None:
    """One reflection run within ``config.budget_tokens``, committed conversation by
    conversation as each is read. A summary goes to ``targets`` if any."""
    if not ctx.llm.configured:
        raise Fatal(f"job {ctx.event.meta.get('job')!r}: reflect needs an llm section")
    plan: dict[str, list[int]] = await ctx.step(PLAN_STEP, lambda: _plan(ctx))
    steps = turn_of(ctx).store
    run = Run()
    order = sorted(plan)
    for index, conversation in enumerate(order):
        # Read on every attempt, the first included (``tether dead retry`` starts an
        # event at attempt 1 again, its steps kept): a finished conversation is done.
        done = await steps.step(ctx.event.key, DONE_STEP + conversation)
        if done is not None:
            ctx.log.info("step.cached", step=DONE_STEP + conversation)
            outcome = json.loads(done)
            run.count(conversation, outcome)
            run.carried += outcome["tokens"]
            continue
        after, newest = plan[conversation]
        stopped = await _read(ctx, run, config, conversation, after, newest)
        if stopped is not None:
            run.stopped, run.left = stopped, order[index:]
            break
    ctx.log.info(
        "reflection.run",
        job=ctx.event.meta.get("job"),
        conversations=len(plan),
        reflected=run.reflected,
        added=run.added,
        updated=run.updated,
        retired=run.retired,
        invalid=len(run.invalid),
        failed=len(run.failed),
        tokens=ctx.llm.spent + run.carried,
        budget_tokens=config.budget_tokens,
        stopped=run.stopped,
        left=len(run.left),
    )
    for target in targets:
        await ctx.send(target, run.report())


async def _read(
    ctx: Context, run: Run, config: ReflectConfig, conversation: str, after: int, newest: int
) -> str | None:
    """Read one conversation and commit what it yields; the budget that stopped the run
    before it, if one did."""
    turns = (await ctx.memory.store.turns_after(conversation, after, newest))[: config.max_turns]
    if not turns:  # nothing readable (e.g. the range was emptied): move past it
        changes = MemoryChanges(
            ctx.conversation, cursors={CURSOR_PREFIX + conversation: str(newest)}
        )
        await _commit(ctx, run, conversation, changes, _outcome(0), tokens=0)
        return None
    facts = await ctx.memory.store.facts(conversation)
    messages = _messages(turns, facts)
    room = config.budget_tokens - ctx.llm.spent - run.carried - tokens.count_messages(messages)
    if room < MIN_COMPLETION_TOKENS:
        return "token budget"
    usage = ctx.memory.changes.usage
    before = len(usage)
    try:
        answer = await ctx.llm.chat(
            messages,
            model=config.model,
            max_tokens=room,
            name=f"reflect:{conversation}",
            response_format=RESPONSE_FORMAT if config.structured else None,
        )
    except BudgetExceeded as exc:  # memory.task/daily_token_budget came first
        return f"{exc.budget} budget"
    except Fatal as exc:  # refused (e.g. too long for the model): not the others' fault
        run.failed.append(conversation)
        ctx.log.warning("memory.reflection_failed", conversation=conversation, error=str(exc))
        return None
    changes, outcome = _proposal(ctx, config, conversation, turns, facts, answer.text)
    # The call's spend is committed with the conversation, not with the checkpoint: a
    # run that dies later has still paid for it.
    changes.usage = usage[before:]
    del usage[before:]
    await _commit(ctx, run, conversation, changes, outcome, tokens=answer.tokens)
    return None


async def _commit(
    ctx: Context,
    run: Run,
    conversation: str,
    changes: MemoryChanges,
    outcome: dict[str, Any],
    *,
    tokens: int,
) -> None:
    """Apply one conversation's ``changes`` with its done step, in one transaction."""
    outcome = {**outcome, "tokens": tokens}
    name = DONE_STEP + conversation
    await turn_of(ctx).store.commit_step(ctx.event.key, name, json.dumps(outcome), changes)
    ctx.log.info("step.saved", step=name)
    run.count(conversation, outcome)


def _outcome(reflected: int, added: int = 0, updated: int = 0, retired: int = 0) -> dict[str, Any]:
    return {
        "reflected": reflected,
        "added": added,
        "updated": updated,
        "retired": retired,
        "invalid": False,
    }


async def _plan(ctx: Context) -> dict[str, list[int]]:
    """Conversation → [cursor, newest turn id] for every one with unread turns."""
    due = await ctx.memory.store.ahead_of(CURSOR_PREFIX)
    return {conversation: [after, newest] for conversation, (after, newest) in due.items()}


def _messages(turns: list[Turn], facts: list[Fact]) -> list[dict[str, str]]:
    saved = "\n".join(f"[{fact.id}] {fact.text}" for fact in facts) or "(none)"
    lines = "\n".join(f"{turn.role}: {turn.text}" for turn in turns)
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Saved facts:\n{saved}\n\nNew turns:\n{lines}"},
    ]


def parse(text: str) -> Proposal:
    """The model's answer as a :class:`Proposal` (a ```json fence around it is allowed)."""
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    return Proposal.model_validate_json(body)


def _proposal(
    ctx: Context,
    config: ReflectConfig,
    conversation: str,
    turns: list[Turn],
    facts: list[Fact],
    answer: str,
) -> tuple[MemoryChanges, dict[str, Any]]:
    """One conversation's valid proposal and its cursor as changes to commit, with the
    counts they add to the run.

    An invalid proposal changes nothing, not even the cursor: the next run reads those
    turns again. Ids the model made up are ignored; facts already saved word for word
    are not added again; at most ``per_conversation_facts`` are added or updated.
    """
    changes = MemoryChanges(ctx.conversation)
    try:
        proposal = parse(answer)
    except ValidationError as exc:
        reason = f"{exc.error_count()} error(s): {exc.errors()[0]['msg']}"
        ctx.log.warning("memory.reflection_invalid", conversation=conversation, reason=reason)
        return changes, {**_outcome(0), "invalid": True}
    known = {fact.id: fact.text for fact in facts}
    saved = {text.strip().lower() for text in known.values()}
    updates = [u for u in proposal.update if u.id in known and u.text.strip()]
    adds = list(dict.fromkeys(t.strip() for t in proposal.add if t.strip()))
    adds = [text for text in adds if text.lower() not in saved]
    wanted = len(updates) + len(adds)
    updates = updates[: config.per_conversation_facts]
    adds = adds[: config.per_conversation_facts - len(updates)]
    updated = {u.id for u in updates}
    retired = [i for i in dict.fromkeys(proposal.retire) if i in known and i not in updated]
    texts = [u.text.strip() for u in updates] + adds
    learned = MemoryChanges(conversation)
    learned.facts = [(text, tokens.count_message(text)) for text in texts]
    # an update retires the old fact and adds the new text; retired facts stay, marked
    learned.retire = [*sorted(updated), *retired]
    changes.elsewhere.append(learned)
    changes.cursors[CURSOR_PREFIX + conversation] = str(turns[-1].id)
    ctx.log.info(
        "memory.reflected",
        conversation=conversation,
        turns=len(turns),
        upto=turns[-1].id,
        added=len(adds),
        updated=len(updates),
        retired=len(retired),
        capped=wanted - len(updates) - len(adds),
    )
    return changes, _outcome(1, len(adds), len(updates), len(retired))
