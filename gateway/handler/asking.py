"""``ctx.ask``: a question whose answer may come an hour, or a restart, later.

A run that asks does not wait in memory. :func:`wait_for` queues the question like any
reply and raises :class:`Suspend`; the pipeline then commits the replies so far and a
wait record in one transaction (``memory/waits.py``) and lets the lane go. When the
answer comes (a message in the conversation, a press on one of the question's
buttons, ``/cancel``, or the deadline), the turn runs again from the top: every
finished step returns its stored value, committed replies are not sent again (same
outbox keys), and this time ``ctx.ask`` at that place returns the stored answer.

That is only right if the handler does the same things in the same order up to the
answer, which is the rule for handlers that ask: **deterministic between steps** (what
varies — the clock, randomness, a web request — goes inside ``ctx.step``). The run keeps
its trace — the steps and waits it reached, in order — and each wait stores the trace
that led to it; a resumed run that reaches something else at some place, asks a
different question, or ends before reaching the wait that was answered raises
:class:`~tether.errors.Diverged` naming the place, and the event is dead-lettered with
its snapshot. Never a silent wrong answer.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tether.buttons import Button, ButtonsSpec, keyboard
from tether.errors import Diverged, WaitCancelled, WaitExpired
from tether.events import Attachment, Target
from tether.memory.records import OutboxRow
from tether.memory.waits import Wait, WaitKind, wait_id

#: The turn's :class:`~tether.gateway.handler.context.Context`, named loosely here because
#: the context names this module (its ``ask`` is :func:`ask`).
Context = Any


class WaitReader(Protocol):
    """What a run reads of its earlier runs: their waits, and the replies committed."""

    async def waits_of(self, event_key: str) -> list[Wait]: ...

    async def outbox_rows(self, event_key: str) -> list[OutboxRow]: ...


#: What a question's buttons carry: ``tw:{token}:{choice}`` (≤ 64 bytes for Telegram).
PRESS_PREFIX = "tw:"
#: Who may answer by default: the person whose message the turn answers.
ASKER = "asker"
ANYONE = "anyone"


@dataclass(frozen=True, slots=True)
class Answer:
    """What ``await ctx.ask(...)`` returns: the person's next message, or their press.

    ``text`` is what they wrote, or the pressed button's text; ``data`` is the pressed
    button's ``data`` (its text when it had none), None for a written answer;
    ``sender`` is ``platform:user``; ``key`` is the answering event's key;
    ``attachments`` are the files the answer came with (``ctx.download`` takes them).
    """

    text: str
    data: str | None = None
    sender: str = ""
    name: str = ""
    key: str = ""
    attachments: tuple[Attachment, ...] = ()

    @property
    def pressed(self) -> bool:
        return self.data is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "data": self.data,
            "sender": self.sender,
            "name": self.name,
            "key": self.key,
            "attachments": [a.model_dump(mode="json") for a in self.attachments],
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Answer:
        data = value.get("data")
        return cls(
            text=str(value.get("text", "")),
            data=None if data is None else str(data),
            sender=str(value.get("sender", "")),
            name=str(value.get("name", "")),
            key=str(value.get("key", "")),
            attachments=tuple(Attachment.model_validate(a) for a in value.get("attachments") or []),
        )


class Suspend(BaseException):
    """Ends a run whose turn now waits for ``wait``: not an error. A BaseException, as
    :class:`asyncio.CancelledError` is, so that a handler's ``except Exception`` around
    ``ctx.ask`` does not swallow it; the pipeline catches it and commits the wait."""

    def __init__(self, wait: Wait) -> None:
        super().__init__(wait.id)
        self.wait = wait


@dataclass(slots=True)
class Asking:
    """One run's side of its waits: the trace so far, and what earlier runs stored."""

    #: The steps and waits this run reached, in order (``step:NAME``, ``wait:N``).
    trace: list[str] = field(default_factory=list)
    #: The turn's stored waits by position, once read (None: not read yet).
    stored: dict[int, Wait] | None = None
    #: Outbox keys earlier runs committed (with a wait): not handed to the outbox again.
    committed: frozenset[str] = frozenset()
    asked: int = 0
    #: What deadlines are reckoned by: the wall clock, or the gateway's (a test's) clock.
    clock: Callable[[], float] = time.time

    @property
    def expected(self) -> list[str]:
        """The trace the newest stored wait was reached by (its own mark included)."""
        if not self.stored:
            return []
        newest = self.stored[max(self.stored)]
        return [str(mark) for mark in newest.detail.get("trace", [])]

    def passed(self, mark: str) -> None:
        """Record ``mark``; raise :class:`Diverged` if an earlier run reached something
        else at this place (checked once the stored waits are read)."""
        self.trace.append(mark)
        if self.stored is not None:
            self._check(len(self.trace) - 1)

    def _check(self, place: int) -> None:
        expected = self.expected
        if place < len(expected) and expected[place] != self.trace[place]:
            raise Diverged(
                f"the resumed turn diverged at its {_ordinal(place + 1)} step or wait:"
                f" the run that asked reached {expected[place]!r} there, this run reached"
                f" {self.trace[place]!r} (handlers that ask must do the same things in"
                " the same order between steps: docs/handlers.md)"
            )

    async def load(self, store: WaitReader, key: str) -> None:
        """Read event ``key``'s stored waits and committed replies (once), and check
        the trace so far against them."""
        if self.stored is not None:
            return
        self.stored = {w.position: w for w in await store.waits_of(key)}
        if self.stored:
            rows = await store.outbox_rows(key)
            self.committed = frozenset(row.key for row in rows)
        for place in range(len(self.trace)):
            self._check(place)

    def finished(self) -> None:
        """The run ended without suspending: it must have got past every stored wait."""
        expected = self.expected
        if len(self.trace) < len(expected):
            raise Diverged(
                f"the resumed turn ended after {len(self.trace)} steps and waits, before"
                f" reaching {expected[len(self.trace)]!r}, which the run that asked reached"
                " (docs/handlers.md: handlers that ask must be deterministic between steps)"
            )


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def token_of(wait: str) -> str:
    """The button token of wait ``wait`` (its id): 16 hex digits, unique in practice
    and short enough for Telegram's 64-byte ``callback_data`` with the choice."""
    return hashlib.sha256(wait.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def press_data(token: str, choice: str | int) -> str:
    return f"{PRESS_PREFIX}{token}:{choice}"


def parse_press(data: str) -> tuple[str, str] | None:
    """``(token, choice)`` of a question's button press, or None for any other data."""
    if not data.startswith(PRESS_PREFIX):
        return None
    token, sep, choice = data[len(PRESS_PREFIX) :].partition(":")
    if not sep or len(token) != 16 or not choice:
        return None
    return token, choice


def choices_of(buttons: ButtonsSpec | Sequence[str] | None) -> list[list[Button]]:
    """A question's buttons: rows of :class:`Button` or of plain strings (each its own
    answer); a flat list is one row. URL buttons stay as they are."""
    if buttons is None:
        return []
    items: list[Any] = list(buttons)
    if items and not isinstance(items[0], (list, tuple)):
        items = [items]
    rows: list[list[Button]] = []
    for row in items:
        rows.append([b if isinstance(b, Button) else Button(str(b), data=str(b)) for b in row])
    return rows


async def wait_for(
    ctx: Context,
    asking: Asking,
    store: WaitReader,
    kind: WaitKind,
    question: str,
    *,
    target: Target | None = None,
    buttons: list[list[Button]] | None = None,
    sender: str | None,
    timeout: float,
    detail: dict[str, Any] | None = None,
    quote: bool = True,
    format: str = "plain",
    same_question: bool = True,
) -> Wait:
    """The ended wait at this run's next place, or — the first time it is reached —
    post ``question`` (to ``target``, the conversation by default) and suspend.
    ``asking`` is the run's own (its trace), ``store`` where earlier runs' waits are.

    ``buttons``' data become the wait's choices; ``detail`` is kept with the wait (an
    approval's tool and arguments). A stored wait at this place that asked another
    question is a divergence, unless not ``same_question`` (an approval card, whose
    text carries the arguments: the caller compares their hash instead).
    """
    position = asking.asked
    asking.asked += 1
    asking.passed(f"wait:{position}")
    await asking.load(store, ctx.event.key)
    stored = (asking.stored or {}).get(position)
    asked = digest(question)
    if same_question and stored is not None and stored.detail.get("digest") != asked:
        raise Diverged(
            f"the resumed turn asked another question at wait:{position} than the run"
            f" that asked ({stored.question[:60]!r}); handlers that ask must be"
            " deterministic between steps (docs/handlers.md)"
        )
    ident = wait_id(ctx.event.key, position)
    token = token_of(ident)
    rows: list[list[Button]] = []
    choices: list[list[str]] = []
    for row in buttons or []:
        out = []
        for button in row:
            if button.url is not None:
                out.append(button)
                continue
            choice = len(choices)
            choices.append([button.text, button.data if button.data is not None else button.text])
            out.append(Button(button.text, data=press_data(token, choice)))
        rows.append(out)
    # Posted on every run, the first and each resumed one, so that the replies after it
    # keep their outbox keys (``{event}#{n}``); the committed ones are not sent again.
    where = target or ctx.event.conversation.target()
    if target is None:
        await ctx.reply(question, quote=quote, format=format, buttons=rows)
    else:
        await ctx.send(where, question, format=format, buttons=rows)
    if stored is not None and stored.status != "open":
        return stored
    if stored is None:
        stored = Wait(
            id=ident,
            event_key=ctx.event.key,
            position=position,
            conversation=ctx.conversation,
            kind=kind,
            chat=where.key,
            token=token,
            sender=sender,
            deadline=asking.clock() + timeout,
            created=time.time(),
            status="open",
            question=question[:2000],
            detail={
                "trace": list(asking.trace),
                "digest": asked,
                "choices": choices,
                **(detail or {}),
            },
        )
    raise Suspend(stored)


def asker_of(ctx: Context, who: str | None) -> str | None:
    """``platform:user`` of who may answer: the asker (default), anyone (None), or the
    given ``platform:user`` (a bare id is taken on the event's platform)."""
    if who is None or who == ANYONE:
        return None
    if who == ASKER:
        sender = ctx.event.sender
        return f"{ctx.event.platform}:{sender.id}" if sender is not None else None
    return who if ":" in who else f"{ctx.event.platform}:{who}"


def answer_of(wait: Wait) -> Answer:
    """What ``ctx.ask`` returns for an ended wait, or raises for one without an answer."""
    if wait.status == "answered" and wait.answer is not None:
        return Answer.from_json(wait.answer)
    if wait.status == "expired":
        raise WaitExpired(f"no answer came in time to: {wait.question[:200]}", wait=wait.id)
    raise WaitCancelled(f"the question was cancelled: {wait.question[:200]}", wait=wait.id)


async def ask(
    ctx: Context,
    asking: Asking,
    store: WaitReader,
    default_timeout: float,
    text: str,
    *,
    buttons: ButtonsSpec | Sequence[str] | None = None,
    timeout: float | None = None,
    from_: str | None = ASKER,
    quote: bool = True,
    format: str = "plain",
) -> Answer:
    """``ctx.ask``'s body (see :meth:`Context.ask`)."""
    rows = choices_of(buttons)
    keyboard(rows)  # a bad keyboard fails here, naming the button, before anything is stored
    seconds = default_timeout if timeout is None else float(timeout)
    if not seconds > 0:
        raise ValueError(f"ctx.ask timeout must be more than 0 seconds, not {timeout!r}")
    ended = await wait_for(
        ctx,
        asking,
        store,
        "ask",
        text,
        buttons=rows,
        sender=asker_of(ctx, from_),
        timeout=seconds,
        quote=quote,
        format=format,
    )
    return answer_of(ended)
