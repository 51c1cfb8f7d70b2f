"""Work that outlives a turn: the task record and the store role's two implementations,
mixed into the stores.

A task is its own inbox event (``task:{id}``, DESIGN §13) that runs in a lane of its own
beside the conversation that started it. The event is the truth of *what* to run; this
row is the ledger of *how it went*, kept for ``/tasks``, ``tether tasks`` and the
console, and for the bounds (how many are open per conversation and per gateway, read
from an index).

A task is ``running`` from the moment it is started (queued or at work) until it ends
once, as ``done``, ``failed``, ``expired`` or ``cancelled``:

- the task event's own checkpoint ends it (:class:`TaskEnd` in the checkpoint's
  :class:`~tether.memory.records.MemoryChanges`), in the same transaction as its result's
  outbox row and the history row that tells its conversation, so a crash never leaves a
  task delivered but listed as running, nor the other way round;
- ``/cancel ID`` and ``tether tasks cancel`` end it from outside
  (:meth:`TaskStore.cancel_task`), a conditional update: the runner sees it within a
  second and stops; a task that had ended already is not touched.

Every end is conditional on ``status = 'running'``, so whatever comes second (a cancel
racing the finish, a checkpoint repeated after a crash) changes nothing. Rows are
never deleted here.

The record is here; its SQL is :mod:`.sql`, its dicts :mod:`.inmemory`.
"""

from tether.memory.records import TaskEnd, TaskStatus
from tether.memory.tasks.inmemory import MemoryTasks
from tether.memory.tasks.record import ENDED, Task
from tether.memory.tasks.sql import SqlTasks

__all__ = ["ENDED", "MemoryTasks", "SqlTasks", "Task", "TaskEnd", "TaskStatus"]
