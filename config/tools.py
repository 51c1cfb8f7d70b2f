"""``agent.tools``: which built-in tools the model may call, the bounds on reminders made
from chat (``agent.tools.reminders``) and on background tasks (``agent.tasks``), the size
of any tool call's arguments and result (``max_argument_bytes``, ``max_result_chars``),
and ``agent.max_tool_rounds``.

Each built-in is switched on by default and off with ``false``; an unknown name is an
error naming its key path (``agent.tools.remembr``), like every other typo. Tools from
Python (``@router.tool``) and MCP servers are not switched here: configuring them is
already the choice.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from tether.config.section import Section

#: Rounds of tool calls one turn may make before the model must answer without tools.
DEFAULT_MAX_TOOL_ROUNDS = 8
#: 64 KiB of arguments: some 16,000 tokens, more than a model writes in one answer. Past
#: it is a broken or hostile provider: 10 MB once cost 8 s of a blocked event loop
#: (counting its tokens for the next round) and 30 MB of steps.
DEFAULT_MAX_ARGUMENT_BYTES = 64 * 1024
#: 20,000 characters of a result: one tool must not fill the context.
DEFAULT_MAX_RESULT_CHARS = 20_000


class RemindersConfig(Section):
    """``agent.tools.reminders``: how many reminders chat may keep, and how often one may
    fire. One message once made a model schedule 300 every-second reminders; these make
    that a refusal the model reads as the ``schedule`` tool's result."""

    #: Active reminders one chat (a group's members together) may have at once.
    per_chat: int = Field(default=50, ge=1)
    #: Active reminders one person may have made, over every chat.
    per_person: int = Field(default=20, ge=1)
    #: Seconds: a recurring reminder whose crontab fires more often (its two closest
    #: fires nearer than this) is refused. 60: at most every minute.
    min_interval: float = Field(default=60.0, ge=1)


class ApprovalsConfig(Section):
    """``agent.tools.approvals``: which tool calls wait for a person's approval, who may
    give it, where the card goes, and how long it waits (docs/tools.md "Approvals")."""

    #: Tools that need approval, by name or shell pattern (``shell``, ``files__delete_*``),
    #: besides ``@router.tool(approval=True)`` and an MCP server's ``approval`` list.
    require: list[str] = []
    #: Who may approve: ``admins`` (access.admins, the owner, the console), ``asker``
    #: (the person the turn answers), or ``platform:user`` patterns. Empty: nobody, so
    #: every call that needs approval is denied (fail-closed).
    approvers: list[str] = ["admins"]
    #: Where the card goes: ``chat`` (the conversation) or a chat, ``telegram:-100123``.
    to: str = "chat"
    #: Seconds a card waits for a decision; then the model reads "expired".
    timeout: float = Field(default=3600.0, gt=0)

    @field_validator("to")
    @classmethod
    def _target(cls, value: str) -> str:
        platform, sep, chat = value.partition(":")
        if value != "chat" and (not sep or not platform or not chat):
            raise ValueError('must be "chat" or a chat like "telegram:-100123"')
        return value


class ToolsConfig(Section):
    #: ``remember``: save a fact the person asked to keep (like ``/remember``).
    remember: bool = True
    #: ``forget``: retire saved facts that match a text (like ``/forget``).
    forget: bool = True
    #: ``schedule``: a one-off reminder or a recurring job, made from chat.
    schedule: bool = True
    #: ``list_schedules``: the jobs this conversation made.
    list_schedules: bool = True
    #: ``cancel_schedule``: stop one of them.
    cancel_schedule: bool = True
    #: ``start_task``: hand long work to a background task (bounded by ``agent.tasks``).
    start_task: bool = True
    #: ``search_memory``: find past turns by what they said (docs/memory.md#recall).
    search_memory: bool = True
    #: The caps and the fastest cadence of the reminders the three above make.
    reminders: RemindersConfig = RemindersConfig()
    #: Bytes of arguments one tool call may carry (every tool, not only the built-ins).
    #: A larger call is refused before it is stored or parsed, and the model reads why.
    max_argument_bytes: int = Field(default=DEFAULT_MAX_ARGUMENT_BYTES, ge=1024)
    #: Characters of one tool's result the model reads; a longer one is cut, saying so.
    max_result_chars: int = Field(default=DEFAULT_MAX_RESULT_CHARS, ge=100)
    #: Calls that wait for a person's approval first.
    approvals: ApprovalsConfig = ApprovalsConfig()

    def enabled(self, name: str) -> bool:
        """Whether built-in ``name`` is on (a name this section does not know is off)."""
        return name in type(self).model_fields and getattr(self, name, None) is True


class TasksConfig(Section):
    """``agent.tasks``: background work an agent may start (gateway/tasks/), and its
    bounds. A chat user must not be able to start unbounded work: every task counts
    against ``per_conversation`` and ``per_gateway`` while it runs (the N+1th is refused
    with a message saying so), spends at most ``token_budget`` tokens over all its model
    calls, ends by its ``deadline`` (``expired``: never run late), and a task's
    sub-agents go no deeper than ``max_depth``."""

    #: ``false``: no ``start_task`` tool for the model, and ``ctx.spawn`` refuses.
    enabled: bool = True
    #: Tasks one conversation may have running at once.
    per_conversation: int = Field(default=3, ge=1)
    #: Tasks the whole gateway (all instances on one store) may have running at once.
    #: Each running task holds one of ``pipeline.concurrency``'s lanes while it works.
    per_gateway: int = Field(default=16, ge=1)
    #: Sub-agents: a conversation's task is depth 1, a task it starts depth 2, …
    max_depth: int = Field(default=2, ge=1, le=10)
    #: Seconds a task may take when its starter does not say (the wall-clock deadline).
    deadline: float = Field(default=3600.0, gt=0)
    #: The longest deadline anyone may ask for (seconds; a day).
    max_deadline: float = Field(default=86_400.0, gt=0)
    #: Prompt + completion tokens one task may spend over all its model calls, instead of
    #: ``memory.task_token_budget`` (which bounds one message's turn). ``null``: no cap.
    token_budget: int | None = Field(default=200_000, ge=1)
    #: The configured model (``llm.models`` name) tasks use; ``null``: the routed one.
    model: str | None = None
    #: Seconds between edits of a task's status message (its progress), at least.
    progress_interval: float = Field(default=5.0, ge=0.5)
