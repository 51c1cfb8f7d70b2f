"""Reminders and recurring jobs made from chat (the ``schedule`` tool): the record and
the store role's two implementations, mixed into the stores.

A reminder belongs to the chat it posts into (``target``) and to the person who made it
(``sender``, ``platform:user``): from chat, its maker or one of the bot's admins
cancels it (``gateway/tools/reminders.py``); an operator can cancel any with ``tether
jobs cancel``. How many are active per chat and per person is read by
:meth:`count_reminders` from an index, so the caps cost the same however many exist.
Its id is deterministic — made by the scheduler from the event key and the tool call's
position — so a turn that runs again after a crash adds the same row, which the insert
ignores: one reminder, however many runs. Rows are never deleted: ``done`` (a one-off
that fired) and ``cancelled`` ones stay for the record.

A reminder either posts its ``text`` or, with ``prompt``, gives it to the agent as one
turn in its ``conversation`` (its memory, its lane). Rows from before prompts were kept
read as text reminders (the column defaults to 0).

When it fires is the scheduler's business (:mod:`tether.scheduler.reminders`): this
module only keeps the rows.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from tether.memory.sql.statements import ACCEPT

ReminderStatus = Literal["active", "done", "cancelled"]


@dataclass(frozen=True, slots=True)
class Reminder:
    #: The job id: part of every fire's key (``cron:{id}:{time}``).
    id: str
    #: The session that made it (memory/lane key): only it lists and cancels from chat.
    conversation: str
    #: Where the reminder is posted: ``platform:chat[:thread]``.
    target: str
    text: str
    #: A recurring job's crontab line, or None for a one-off.
    cron: str | None
    #: A one-off's time (UTC ISO-8601), or None for a recurring job.
    at: str | None
    timezone: str
    status: ReminderStatus
    #: The event whose turn made it.
    event_key: str
    created: float
    updated: float
    #: Who made it, ``platform:user`` ("" for a fire of a job, or a row from before
    #: senders were kept): it counts against that person's cap, and they may cancel it.
    sender: str = ""
    #: ``text`` is a prompt for the agent, run as one turn in ``conversation`` when it
    #: fires, instead of a text posted as it is.
    prompt: bool = False


COLUMNS = (
    "id, conversation, target, text, cron, at, timezone, status, event_key, created, updated,"
    " sender, prompt"
)
ADD = (
    f"INSERT INTO reminders ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (id) DO NOTHING"
)
ONE = f"SELECT {COLUMNS} FROM reminders WHERE id = ?"
ALL = f"SELECT {COLUMNS} FROM reminders ORDER BY created, id"
ACTIVE = f"SELECT {COLUMNS} FROM reminders WHERE status = 'active' ORDER BY created, id"
#: A chat's active ones, and the caps' counts: each read from its own index.
ACTIVE_IN = (
    f"SELECT {COLUMNS} FROM reminders WHERE target = ? AND status = 'active' ORDER BY created, id"
)
COUNT_IN = "SELECT 1 FROM reminders WHERE target = ? AND status = 'active'"
COUNT_BY = "SELECT 1 FROM reminders WHERE sender = ? AND status = 'active'"
FINISH = "UPDATE reminders SET status = ?, updated = ? WHERE id = ? AND status = 'active'"


def _reminder(row: Sequence[Any]) -> Reminder:
    return Reminder(
        id=str(row[0]),
        conversation=str(row[1]),
        target=str(row[2]),
        text=str(row[3]),
        cron=None if row[4] is None else str(row[4]),
        at=None if row[5] is None else str(row[5]),
        timezone=str(row[6]),
        status=row[7],
        event_key=str(row[8]),
        created=float(row[9]),
        updated=float(row[10]),
        sender=str(row[11] or ""),
        prompt=bool(row[12]),
    )


def _values(reminder: Reminder) -> tuple[Any, ...]:
    r = reminder
    return (r.id, r.conversation, r.target, r.text, r.cron, r.at, r.timezone, r.status,
            r.event_key, r.created, r.updated, r.sender, int(r.prompt))  # fmt: skip


def _select(
    rows: list[Reminder], conversation: str | None, active: bool, target: str | None = None
) -> list[Reminder]:
    return [
        r
        for r in rows
        if (conversation is None or r.conversation == conversation)
        and (target is None or r.target == target)
        and (not active or r.status == "active")
    ]


class SqlReminders:
    """The reminders role over SQL, for :class:`~tether.memory.sql.store.SqlStore`."""

    if TYPE_CHECKING:  # provided by SqlStore and its engine

        async def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Any]: ...

        _write: Callable[..., Awaitable[None]]

    async def add_reminder(self, reminder: Reminder) -> Reminder:
        await self._write(ACCEPT, (ADD, _values(reminder)))
        found = await self.reminder(reminder.id)
        assert found is not None
        return found

    async def reminder(self, reminder_id: str) -> Reminder | None:
        rows = await self._rows(ONE, (reminder_id,))
        return _reminder(rows[0]) if rows else None

    async def reminders(
        self, conversation: str | None = None, *, active: bool = True, target: str | None = None
    ) -> list[Reminder]:
        if target is not None and active:
            rows = [_reminder(row) for row in await self._rows(ACTIVE_IN, (target,))]
        else:
            rows = [_reminder(row) for row in await self._rows(ACTIVE if active else ALL)]
        return _select(rows, conversation, active, target)

    async def count_reminders(
        self, *, target: str | None = None, sender: str | None = None, limit: int | None = None
    ) -> int:
        if (target is None) == (sender is None):
            raise ValueError("count_reminders: give exactly one of target or sender")
        rows = COUNT_IN if target is not None else COUNT_BY
        params: tuple[Any, ...] = (target if target is not None else sender,)
        if limit is not None:  # no further than the cap: its cost, not the table's
            rows, params = f"{rows} LIMIT ?", (*params, limit)
        [(count,)] = await self._rows(f"SELECT count(*) FROM ({rows}) AS found", params)
        return int(count)

    async def finish_reminder(self, reminder_id: str, status: ReminderStatus) -> bool:
        before = await self.reminder(reminder_id)
        if before is None or before.status != "active":
            return False
        await self._write(ACCEPT, (FINISH, (status, time.time(), reminder_id)))
        after = await self.reminder(reminder_id)
        return after is not None and after.status == status


class MemoryReminders:
    """The reminders role in a dict, for :class:`~tether.memory.inmemory.store.MemoryStore`."""

    _reminder_rows: dict[str, Reminder] | None = None
    #: Active reminders by ("target", chat) and ("sender", person): the caps' counts.
    _reminder_counts: Counter[tuple[str, str]] | None = None

    @property
    def _kept(self) -> dict[str, Reminder]:
        if self._reminder_rows is None:
            self._reminder_rows = {}
        return self._reminder_rows

    @property
    def _counts(self) -> Counter[tuple[str, str]]:
        if self._reminder_counts is None:
            self._reminder_counts = Counter()
        return self._reminder_counts

    def _counted(self, reminder: Reminder, delta: int) -> None:
        self._counts[("target", reminder.target)] += delta
        self._counts[("sender", reminder.sender)] += delta

    async def add_reminder(self, reminder: Reminder) -> Reminder:
        if reminder.id not in self._kept and reminder.status == "active":
            self._counted(reminder, 1)
        return self._kept.setdefault(reminder.id, reminder)

    async def reminder(self, reminder_id: str) -> Reminder | None:
        return self._kept.get(reminder_id)

    async def reminders(
        self, conversation: str | None = None, *, active: bool = True, target: str | None = None
    ) -> list[Reminder]:
        ordered = sorted(self._kept.values(), key=lambda r: (r.created, r.id))
        return _select(ordered, conversation, active, target)

    async def count_reminders(
        self, *, target: str | None = None, sender: str | None = None, limit: int | None = None
    ) -> int:
        if (target is None) == (sender is None):
            raise ValueError("count_reminders: give exactly one of target or sender")
        count = self._counts[("target", target) if target is not None else ("sender", str(sender))]
        return count if limit is None else min(count, limit)

    async def finish_reminder(self, reminder_id: str, status: ReminderStatus) -> bool:
        found = self._kept.get(reminder_id)
        if found is None or found.status != "active":
            return False
        self._kept[reminder_id] = replace(found, status=status, updated=time.time())
        self._counted(found, -1)
        return True
