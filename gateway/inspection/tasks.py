"""``tether tasks list|cancel``: the gateway's background tasks, for the operator.

Like ``tether approvals``, it opens the store on its own, beside a running gateway or
without one. ``list`` reads the tasks ledger (``memory/tasks``); ``cancel`` makes the
same conditional end as a chat's ``/cancel ID`` (:meth:`~tether.gateway.tasks.Tasks.cancel`),
as :data:`~tether.gateway.tasks.start.OPERATOR`: a gateway running the task reads the
ledger every :data:`~tether.gateway.tasks.run.WATCH` seconds, stops the work (its
finished steps kept) and tells the chat the operator cancelled it. A task that has not
run yet is told the same when its event comes up, and is not run.

Goals and results are text a person and a model wrote: masked and escaped as
``tether approvals`` prints them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from typing import Any

from tether.config import Settings
from tether.gateway.inspection.store import EXIT_CONFIG, _on_store
from tether.gateway.inspection.waits import _cell, _clean, safe
from tether.gateway.tasks import Tasks
from tether.gateway.tasks.start import OPERATOR
from tether.memory.store import Store
from tether.memory.tasks import Task

#: How many of the newest tasks ``list --all`` reads.
LIMIT = 200


def tasks(settings: Settings, args: argparse.Namespace) -> int:
    if args.action == "cancel" and not args.id:
        print("tether tasks cancel: a task ID is required", file=sys.stderr)
        return EXIT_CONFIG
    return _on_store(settings, args, lambda store: _tasks_on(settings, store, args))


async def _tasks_on(settings: Settings, store: Store, args: argparse.Namespace) -> int:
    if args.action == "cancel":
        task, ended = await Tasks(store, lambda: settings).cancel(args.id, OPERATOR)
        if task is None:
            print(f"no task {safe(args.id)!r}", file=sys.stderr)
            return 1
        if not ended:
            print(f"task {task.id} already ended: {task.status}", file=sys.stderr)
            return 1
        print(
            f"cancelled {task.id}: a running gateway stops it within a second and tells"
            " its chat; what it finished is kept"
        )
        return 0
    listed = await store.tasks(limit=LIMIT) if args.all else await store.open_tasks()
    if args.json:
        for task in listed:
            print(_clean(json.dumps(row(task), ensure_ascii=False)))
        return 0
    if not listed:
        print("no tasks" if args.all else "no running tasks (--all lists the ended ones too)")
        return 0
    print(f"{'ID':<13} {'STATUS':<10} {'STARTED (UTC)':<20} {'LEFT':>8} {'CONVERSATION':<28} GOAL")
    now = time.time()
    for task in listed:
        left = f"{max(0, int(task.deadline - now)) // 60}m" if task.open else "-"
        print(
            f"{task.id:<13} {task.status:<10} {_when(task.created):<20} {left:>8}"
            f" {_cell(task.parent, 28):<28} {_cell(task.goal, 60)}"
        )
    return 0


def row(task: Task) -> dict[str, Any]:
    """One task as ``--json`` prints it (and the console lists it): times in ISO 8601."""
    return {
        "id": task.id,
        "status": task.status,
        "conversation": task.parent,
        "chat": task.target,
        "parent_task": task.parent_task,
        "depth": task.depth,
        "agent": task.agent,
        "goal": task.goal,
        "started_by": task.sender,
        "created": _iso(task.created),
        "deadline": _iso(task.deadline),
        "updated": _iso(task.updated),
        "budget": task.budget,
        "result": task.result,
    }


def _when(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).isoformat()
