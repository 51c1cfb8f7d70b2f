"""The CLI's commands that look into the store: status, pair, jobs, dead.

Each opens the configured store on its own, beside a running gateway or without one
(PostgreSQL, and SQLite's WAL, let several processes read), does one thing and closes
it. What they change (approving a pairing, requeuing a dead letter, cancelling a
reminder) is picked up by the running gateway's sweep within ``pipeline.sweep_interval``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import sys
from collections.abc import Awaitable, Callable

from tether.config import Settings
from tether.errors import GatewayError
from tether.gateway.agent.accounts import agent_lines, agents_report
from tether.gateway.builtin.access import RESERVED
from tether.gateway.llm.keys import key_lines, live_keys
from tether.gateway.ops.alerts import open_alerts
from tether.gateway.ops.start_errors import store_error
from tether.memory.operator import PairingStore, ReportStore
from tether.memory.retention.sizes import size_lines, size_report
from tether.memory.sqlite import SqliteStore
from tether.memory.sqlite import backup as sqlite_backup
from tether.memory.sqlite.schema import MIGRATIONS as SQLITE_MIGRATIONS
from tether.memory.store import Store
from tether.memory.stores import missing, open_store
from tether.memory.tasks import ENDED
from tether.redaction import redactor
from tether.scheduler.cli import jobs_command
from tether.scheduler.jobs import load_jobs

#: The exit code of a command used wrongly (a missing argument, an invalid config).
EXIT_CONFIG = 2
#: The tasks ledger's statuses, in the order ``tether status`` counts them.
TASK_STATUSES = ("running", *ENDED)


def sources(settings: Settings, config: str | None) -> str:
    """Which config and store a command used, the store's password masked."""
    store = settings.masked()["memory"]["store"]
    return f"config: {config or 'none (built-in defaults)'}, store: {store}"


# -- stores for the inspection commands ----------------------------------------------


def _on_store(
    settings: Settings,
    args: argparse.Namespace,
    action: Callable[[Store], Awaitable[int]],
    *,
    create: bool = False,
) -> int:
    """Run ``action`` against the configured store (beside a running gateway is fine).

    Only ``create`` may make a new SQLite file: a look into a store that does not exist
    (the wrong directory, a mistyped path) is an error naming where it looked, not an
    empty ``tether.db`` left behind and a report of zeros."""
    absent = None if create else missing(settings.memory.store)
    if absent is not None:
        raise GatewayError(f"no store at {absent} (config: {args.config or 'none'})")

    async def run() -> int:
        store = open_store(settings.memory.store, synchronous=settings.memory.sqlite_synchronous)
        try:
            await store.open()
        except Exception as exc:
            with contextlib.suppress(Exception):
                await store.close()  # a half-open store: its writer must not outlive us
            raise store_error(store, exc) from exc
        print(f"tether: {sources(settings, args.config)}", file=sys.stderr)
        try:
            return await action(store)
        finally:
            await store.close()

    return asyncio.run(run())


# -- status ------------------------------------------------------------------------


def status(settings: Settings, args: argparse.Namespace) -> int:
    return _on_store(settings, args, lambda store: _status_on(settings, store, args.json))


async def _status_on(settings: Settings, store: Store, as_json: bool) -> int:
    counts = await store.counts()
    alerts = await open_alerts(store)
    activity = await store.activity()
    today = dt.datetime.now(dt.UTC).date().isoformat()
    spend = {
        model: {"tokens": tokens, "cost": round(cost, 6)}
        for model, (tokens, cost) in (await store.spend(today)).items()
    }
    now = dt.datetime.now(dt.UTC)
    jobs = load_jobs(settings)
    upcoming = sorted(
        (when, job.id) for job in jobs if (when := job.schedule.next_after(now)) is not None
    )
    cron = [{"job": job, "next_fire": when.isoformat()} for when, job in upcoming]
    inbox, outbox = counts["inbox"], counts["outbox"]
    statuses = ("received", "running", "retry_wait", "waiting", "dead", "done")
    events = {s: inbox.get(s, 0) for s in statuses}  # waiting: turns that asked (ctx.ask)
    sends = {
        "backlog": sum(outbox.get(s, 0) for s in ("pending", "sending", "retry_wait")),
        **{s: outbox.get(s, 0) for s in ("sent", "unknown", "dead")},
    }
    tasks = await store.task_counts()
    keys = await asyncio.to_thread(live_keys, settings)
    agents = agents_report(settings, await store.spend_by_conversation(today))
    schema = await schema_version(store)
    storage = await size_report(store)  # rows and bytes by class of data (retention)
    if as_json:
        report = {
            "schema": schema,
            "events": events,
            "outbox": sends,
            "tasks": {s: tasks.get(s, 0) for s in TASK_STATUSES},
            "platforms": {
                platform: {what: _iso(when) for what, when in seen.items()}
                for platform, seen in activity.items()
            },
            "cron": cron,
            "agents": agents,
            "spend_today": spend,
            "llm_keys": keys,
            "storage": storage,
            "alerts": [
                {"check": a.check, "since": _iso(a.since), "detail": a.detail} for a in alerts
            ],
        }
        print(json.dumps(report, indent=2))
        return 0
    if schema is not None:
        print(f"schema   version {schema['version']} (this Tether: {schema['newest']})")
    print("events   " + "  ".join(f"{name} {n}" for name, n in events.items()))
    print("outbox   " + "  ".join(f"{name} {n}" for name, n in sends.items()))
    if tasks:
        print("tasks    " + "  ".join(f"{s} {tasks.get(s, 0)}" for s in TASK_STATUSES))
    print(f"{'PLATFORM':<12} {'LAST RECEIVED (UTC)':<22} LAST SENT (UTC)")
    for platform, seen in sorted(activity.items()):
        received = _when(seen["received"]) if "received" in seen else "-"
        sent = _when(seen["sent"]) if "sent" in seen else "-"
        print(f"{platform:<12} {received:<22} {sent}")
    for line in agent_lines(agents):
        print(line)
    for entry in cron[:10]:
        print(f"next fire  {entry['job']:<24} {entry['next_fire']}")
    for line in key_lines(keys):
        print(line)
    for line in size_lines(storage) if storage else []:
        print(line)
    for alert in alerts:
        print(f"ALERT      {alert.check:<24} since {_when(alert.since)}  {alert.detail}")
    total = sum(m["tokens"] for m in spend.values())
    cost = sum(m["cost"] for m in spend.values())
    print(
        f"today      {total:,} tokens, ${cost:.4f}"
        + "".join(f"; {m} {v['tokens']:,}" for m, v in spend.items())
    )
    return 0


async def schema_version(store: Store) -> dict[str, int] | None:
    """The schema version the store's tables are at, and the newest this Tether knows
    (None for the in-memory store). PostgreSQL's modules are loaded only if it is in use."""
    if isinstance(store, SqliteStore):
        newest = len(SQLITE_MIGRATIONS)
        if store.path == ":memory:":  # a scratch file, made at the newest version
            return {"version": newest, "newest": newest}
        version = await asyncio.to_thread(sqlite_backup.schema_version, store.path)
        return {"version": version, "newest": newest}
    postgres = sys.modules.get("tether.memory.postgres")
    if postgres is not None and isinstance(store, postgres.PostgresStore):
        from tether.memory.postgres.schema import MIGRATIONS

        version = await store.pool.fetchval("SELECT max(version) FROM tether_schema")
        return {"version": int(version or 0), "newest": len(MIGRATIONS)}
    return None


# -- pair --------------------------------------------------------------------------


def pair(settings: Settings, args: argparse.Namespace) -> int:
    if args.action != "list" and not args.what:
        print(f"tether pair {args.action}: say what (a CODE, or platform:user)", file=sys.stderr)
        return EXIT_CONFIG
    return _on_store(settings, args, lambda store: _pair_on(store, args))


async def _pair_on(store: PairingStore, args: argparse.Namespace) -> int:
    # The owner code and who-to-tell rows are bookkeeping: never listed, never approved here.
    pairings = [p for p in await store.pairings() if not p.platform.startswith(RESERVED)]
    if args.action == "list":
        if not pairings:
            print("no pairing requests")
            return 0
        print(f"{'CODE':<10} {'STATUS':<9} {'SENDER':<32} {'NAME':<24} ASKED (UTC)")
        for p in pairings:
            print(
                f"{p.code:<10} {p.status:<9} {p.platform + ':' + p.user_id:<32}"
                f" {p.name[:24]:<24} {_when(p.created)}"
            )
        return 0
    if args.action == "approve":
        if not any(p.code == args.what.strip().upper() for p in pairings):
            print(f"no pairing request with code {args.what!r}", file=sys.stderr)
            return 1
        found = await store.approve_pairing(args.what)
        if found is None:
            print(f"no pairing request with code {args.what!r}", file=sys.stderr)
            return 1
        print(f"approved {found.platform}:{found.user_id} ({found.name})")
        return 0
    platform, _, user = args.what.partition(":")
    if not await store.revoke_pairing(platform, user):
        print(f"no pairing for {args.what!r}", file=sys.stderr)
        return 1
    print(f"revoked {args.what}")
    return 0


def _when(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _iso(timestamp: float) -> str:
    """JSON shows times as ISO 8601 in UTC: read by people and parsers alike."""
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).isoformat()


# -- jobs --------------------------------------------------------------------------


def jobs(settings: Settings, args: argparse.Namespace) -> int:
    if args.action in ("run", "cancel") and not args.id:
        print(f"tether jobs {args.action}: a job ID is required", file=sys.stderr)
        return EXIT_CONFIG
    fire = args.action == "run"  # a manual fire on a new install waits in a new store
    return _on_store(
        settings,
        args,
        lambda store: jobs_command(settings, store, args.action, args.id),
        create=fire,
    )


# -- dead --------------------------------------------------------------------------


def dead(settings: Settings, args: argparse.Namespace) -> int:
    if args.action in ("show", "retry") and not args.key:
        print(f"tether dead {args.action}: a KEY is required", file=sys.stderr)
        return EXIT_CONFIG
    return _on_store(settings, args, lambda store: _dead_on(store, args))


async def _dead_on(store: ReportStore, args: argparse.Namespace) -> int:
    if args.action == "list":
        letters = await store.dead_letters()
        if not letters:
            print("no dead letters")
            return 0
        print(f"{'KEY':<44} {'CONVERSATION':<28} {'WHEN (UTC)':<20} ERROR")
        for letter in letters:
            when = _when(letter.created)
            error = redactor.scrub(letter.error)[:80]  # a letter stored by an older version
            print(f"{letter.key:<44} {letter.conversation:<28} {when:<20} {error}")
        return 0
    if args.action == "show":
        found = await store.dead_letter(args.key)
        if found is None:
            print(f"no dead letter {args.key!r}", file=sys.stderr)
            return 1
        out = {
            "key": found.key,
            "conversation": found.conversation,
            "error": found.error,
            "created": _iso(found.created),
            "event": json.loads(found.event.to_json()),
            "snapshot": found.snapshot,
            "traceback": found.traceback,
        }
        print(redactor.scrub(json.dumps(out, indent=2, ensure_ascii=False)))
        return 0
    if await store.requeue(args.key):
        print(
            f"requeued {args.key}: a running gateway picks it up within seconds,"
            " else at its next start"
        )
        return 0
    print(f"nothing dead, waiting to retry or unknown with key {args.key!r}", file=sys.stderr)
    return 1
