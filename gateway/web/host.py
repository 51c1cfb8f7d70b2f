"""What the console needs of the gateway it runs in (the :class:`~tether.gateway.app.Gateway`
is one): a protocol, so the console does not import the gateway that mounts it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from tether.adapters.base import Adapter
from tether.config.schema import Settings
from tether.gateway.core.dispatcher import Dispatcher
from tether.gateway.core.inbox import Inbox
from tether.gateway.core.outbox import Outbox
from tether.gateway.llm.client import LLM
from tether.gateway.tasks import Tasks
from tether.memory.store import Store
from tether.scheduler.jobs import Job
from tether.scheduler.runner import Scheduler


class ConsoleHost(Protocol):
    """Read at each request, not kept: a reload may swap the adapters and settings."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> Store: ...

    @property
    def adapters(self) -> Mapping[str, Adapter]: ...

    @property
    def dispatcher(self) -> Dispatcher: ...

    @property
    def outbox(self) -> Outbox: ...

    @property
    def inbox(self) -> Inbox: ...

    @property
    def jobs(self) -> list[Job]: ...

    @property
    def scheduler(self) -> Scheduler | None: ...

    @property
    def llm(self) -> LLM | None:
        """The model client (its breakers and key pools say when a model can answer)."""
        ...

    @property
    def tasks(self) -> Tasks:
        """The background tasks: the console cancels through them, as ``/cancel ID``."""
        ...
