"""Reflection: the agent distils its own long-term memory from its conversations.

A ``jobs:`` entry with ``reflect:`` (e.g. nightly) fires one cron event; its handler
is :func:`reflect`. For each conversation with turns newer than its cursor
(``reflected:{conversation}``, the id of the last turn a reflection read), ONE LLM call
reads those turns and the conversation's current facts and proposes facts to add,
update or retire, as structured output (``response_format`` with :class:`Proposal`'s JSON
schema) that is checked again here: an invalid proposal is skipped with its reason.

Why it is one event and not one per conversation: everything it learns, and every
cursor it advances, is committed in that event's single checkpoint — facts of other
conversations ride in ``MemoryChanges.elsewhere`` — so a crash mid-run applies nothing,
and the re-run replays the calls already made from their memoized steps (never paid
twice) and applies each proposal exactly once. The plan (which conversations, up to
which turn) is a step too, so a re-run reads the same turns even if more arrived.

What it never does: delete. Messages stay; a retired fact (or the old text of an updated
one) is marked ``retired`` in the store and leaves prompts and listings, but stays for
an operator to read. A person sees what was learned with ``/facts`` and removes it with
``/forget`` (which, being their explicit wish, does delete).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, ValidationError

from tether.config.jobs import ReflectConfig
from tether.errors import BudgetExceeded, Fatal
from tether.events import Target
from tether.gateway.handler.context import Context
from tether.gateway.llm.client import MIN_COMPLETION_TOKENS
from tether.memory import tokens
from tether.memory.records import Fact, MemoryChanges, Turn

#: The cursor of a conversation: the id of the newest turn a reflection has read.
CURSOR_PREFIX = "reflected:"
#: The step that fixes, once per run, which conversations are read up to which turn.
PLAN_STEP = "reflect:plan"


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
    left: list[str] = field(default_factory=list)
    stopped: str | None = None

    def report(self) -> str:
        text = (
            f"Reflection: {self.reflected} conversation(s) read; facts {self.added} added,"
            f" {self.updated} updated, {self.retired} retired."
        )
        if self.invalid:
            text += f" {len(self.invalid)} proposal(s) were invalid and skipped."
        if self.stopped:
            text += (
                f" Stopped at the {self.stopped}: {len(self.left)} conversation(s) left"
                " for the next run."
            )
        return text


async def reflect(ctx: Context, config: ReflectConfig, targets: list[Target]) -> None:
    """One reflection run within ``config.budget_tokens``; its findings and cursors are
    committed with this event's checkpoint. A summary goes to ``targets`` if any."""
    if not ctx.llm.configured:
        raise Fatal(f"job {ctx.event.meta.get('job')!r}: reflect needs an llm section")
    plan: dict[str, list[int]] = await ctx.step(PLAN_STEP, lambda: _plan(ctx))
    run = Run()
    for index, (conversation, (after, newest)) in enumerate(sorted(plan.items())):
        turns = (await ctx.memory.store.turns_after(conversation, after, newest))[
            : config.max_turns
        ]
        if not turns:  # nothing readable (e.g. the range was emptied): move past it
            ctx.memory.changes.cursors[CURSOR_PREFIX + conversation] = str(newest)
            continue
        facts = await ctx.memory.store.facts(conversation)
        messages = _messages(turns, facts)
        room = config.budget_tokens - ctx.llm.spent - tokens.count_messages(messages)
        if room < MIN_COMPLETION_TOKENS:
            run.stopped, run.left = "token budget", sorted(plan)[index:]
            break
        try:
            answer = await ctx.llm.chat(
                messages,
                model=config.model,
                max_tokens=room,
                name=f"reflect:{conversation}",
                response_format=RESPONSE_FORMAT if config.structured else None,
            )
        except BudgetExceeded as exc:  # memory.task/daily_token_budget came first
            run.stopped, run.left = f"{exc.budget} budget", sorted(plan)[index:]
            break
        _apply(ctx, run, config, conversation, turns, facts, answer.text)
    ctx.log.info(
        "reflection.run",
        job=ctx.event.meta.get("job"),
        conversations=len(plan),
        reflected=run.reflected,
        added=run.added,
        updated=run.updated,
        retired=run.retired,
        invalid=len(run.invalid),
        tokens=ctx.llm.spent,
        budget_tokens=config.budget_tokens,
        stopped=run.stopped,
        left=len(run.left),
    )
    for target in targets:
        await ctx.send(target, run.report())


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


def _apply(
    ctx: Context,
    run: Run,
    config: ReflectConfig,
    conversation: str,
    turns: list[Turn],
    facts: list[Fact],
    answer: str,
) -> None:
    """Queue one conversation's valid proposal and its cursor for the checkpoint.

    An invalid proposal changes nothing, not even the cursor: the next run reads those
    turns again. Ids the model made up are ignored; facts already saved word for word
    are not added again; at most ``per_conversation_facts`` are added or updated.
    """
    try:
        proposal = parse(answer)
    except ValidationError as exc:
        reason = f"{exc.error_count()} error(s): {exc.errors()[0]['msg']}"
        run.invalid.append(conversation)
        ctx.log.warning("memory.reflection_invalid", conversation=conversation, reason=reason)
        return
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
    changes = MemoryChanges(conversation)
    changes.facts = [(text, tokens.count_message(text)) for text in texts]
    # an update retires the old fact and adds the new text; retired facts stay, marked
    changes.retire = [*sorted(updated), *retired]
    ctx.memory.changes.elsewhere.append(changes)
    ctx.memory.changes.cursors[CURSOR_PREFIX + conversation] = str(turns[-1].id)
    run.reflected += 1
    run.added += len(adds)
    run.updated += len(updates)
    run.retired += len(retired)
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
