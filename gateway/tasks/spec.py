"""What a task is made of, carried whole in its event, so that the event alone can run it.

A task's event is ``task:{id}`` (DESIGN §13); its conversation is ``task:{id}`` too (its
own lane and its own memory: the task's transcript), or ``task@{agent}:{id}`` when it
runs as another configured agent, which is how the agents' router
(``gateway/agent/accounts.py``) hands it to that agent with that agent's persona, model
routes and budgets. The id is made from the starting event's key and the place in its
turn (``tool:R:I``, ``spawn:N``), so a re-run of that turn after a crash names the same
task, which the inbox admits once.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from pydantic import BaseModel, ConfigDict

from tether.events import Conversation, Event, Kind, Sender
from tether.keys import TASK_PLATFORM, task_key
from tether.memory.tasks import Task

#: ``Event.meta`` key of the task's :class:`TaskSpec`.
SPEC = "task"
#: Every task id starts with this.
PREFIX = "t-"


class TaskSpec(BaseModel):
    """Everything a run of the task needs, as its starter asked for it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    goal: str
    #: The session that started it (or ``task:{parent id}``): told the result.
    parent: str
    #: The chat the result is posted in; "" for a sub-agent (its parent task reads it).
    target: str
    parent_task: str | None = None
    depth: int = 1
    agent: str | None = None
    persona: str | None = None
    model: str | None = None
    budget: int | None = None
    #: Epoch seconds: not run after it (reported expired once instead).
    deadline: float
    tools: tuple[str, ...] | None = None
    #: ``module:function`` run instead of the agent (``ctx.spawn(handler=...)``).
    handler: str | None = None
    #: Who started it, ``platform:user``.
    sender: str = ""
    #: The event whose turn started it (its status message is among its outbox rows).
    started_by: str
    created: float
    #: What the starter's replies carry to answer in its chat (a thread, a reply mode).
    reply_meta: dict[str, Any] = {}

    @property
    def key(self) -> str:
        return task_key(self.id)


def task_id(event_key: str, position: str) -> str:
    """The task a turn starts at ``position``: the same on every run of that turn."""
    digest = hashlib.sha256(f"{event_key}\0{position}".encode()).hexdigest()
    return f"{PREFIX}{digest[:10]}"


def task_event(spec: TaskSpec, sender: Sender | None) -> Event:
    """The event that runs ``spec``: a lane of its own, the starter as its sender."""
    platform = TASK_PLATFORM if spec.agent is None else f"{TASK_PLATFORM}@{spec.agent}"
    return Event(
        key=spec.key,
        platform=TASK_PLATFORM,
        kind=Kind.TASK,
        conversation=Conversation(platform=platform, chat_id=spec.id),
        sender=sender,
        text=spec.goal,
        meta={SPEC: spec.model_dump(mode="json")},
    )


def spec_of(event: Event) -> TaskSpec:
    """The spec a task event carries (ValueError for an event that is no task's)."""
    data = event.meta.get(SPEC)
    if event.kind is not Kind.TASK or not isinstance(data, dict):
        raise ValueError(f"{event.key}: not a task event")
    return TaskSpec.model_validate(data)


def record(spec: TaskSpec) -> Task:
    """The ledger row of a task just started."""
    return Task(
        id=spec.id,
        event_key=spec.key,
        parent=spec.parent,
        target=spec.target,
        parent_task=spec.parent_task,
        depth=spec.depth,
        goal=spec.goal,
        agent=spec.agent,
        sender=spec.sender,
        status="running",
        deadline=spec.deadline,
        budget=spec.budget,
        result=None,
        started_by=spec.started_by,
        created=spec.created,
        updated=time.time(),
    )


def short(text: str, limit: int = 80) -> str:
    """A goal in one line, for a status message or a listing."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
