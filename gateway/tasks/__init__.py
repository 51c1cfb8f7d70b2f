"""Work that outlives a turn: background tasks and sub-agents (docs/tasks.md).

- :mod:`.spec`: what a task is made of, carried in its event; its id and key.
- :mod:`.start`: starting one (``ctx.spawn``, the ``start_task`` tool) within the bounds,
  and cancelling one.
- :mod:`.run`: the task event's handler: the agent at work until its deadline, its result
  delivered to the conversation that started it, once.
- :mod:`.progress`: one status message, edited as the task goes.
- :mod:`.tools`: the model's ``start_task`` and ``task_status``.
- :mod:`.commands`: ``/tasks`` and ``/cancel ID``.
"""

from tether.gateway.tasks.start import Tasks
from tether.gateway.tasks.tools import TaskTools

__all__ = ["TaskTools", "Tasks"]
