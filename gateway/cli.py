"""tether: run, chat, check, reload, init, status, pair, jobs, dead.

Without -c, ./tether.yaml is used if present, else the built-in defaults (SQLite file
tether.db, console chat, echo agent). -c goes before or after the command.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import TextIO

import yaml

from tether.config import Settings, load, plugin_path
from tether.config.mcp import missing_program
from tether.errors import ConfigError, GatewayError, JobError
from tether.gateway.agent.accounts import agent_lines, agents_report
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters, load_router
from tether.gateway.builtin.access import RESERVED
from tether.gateway.handler.plugins import check_job_handlers
from tether.gateway.init import add_init_command
from tether.gateway.llm.keys import key_lines, live_keys
from tether.gateway.ops import logs, runtime
from tether.gateway.ops.alerts import open_alerts
from tether.gateway.ops.runtime import settle_heap
from tether.gateway.ops.start_errors import store_error
from tether.gateway.reload import RELOADED, request_reload
from tether.gateway.serve import serve
from tether.memory.roles import PairingStore, ReportStore
from tether.memory.store import Store
from tether.memory.stores import open_store, sqlite_path
from tether.redaction import redactor
from tether.scheduler.cli import jobs_command
from tether.scheduler.jobs import check_targets, load_jobs

EXIT_CONFIG = 2


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "init":
        return int(args.func(args))  # writes a config: there is none to load yet
    args.config = _config_path(args.config)
    try:
        settings = load(args.config)
    except ConfigError as exc:
        print(f"tether: invalid config\n{exc}", file=sys.stderr)
        return EXIT_CONFIG
    plugin_path.use_config(args.config)
    level = settings.logging.level
    if _quiet_terminal(args, settings):
        level = "warning"  # keep the conversation readable; logs stay on for scripts
    try:
        logs.configure(level, settings.logging.format, settings.secrets(), _log_stream(settings))
        return int(args.func(settings, args))
    except GatewayError as exc:
        print(f"tether: {redactor.scrub(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _config_path(given: str | None) -> str | None:
    """The config file this run reads: ``-c``, else ./tether.yaml if present, else none."""
    if given is None and Path("tether.yaml").exists():
        return "tether.yaml"
    return given


def _quiet_terminal(args: argparse.Namespace, settings: Settings) -> bool:
    """A person at a terminal sees the conversation, not four log lines per message:
    ``chat`` (stdout a terminal) and ``run`` (logs to a terminal) show only warnings
    there unless ``-v``; a log file or a pipe gets every line at the configured level."""
    if getattr(args, "verbose", False):
        return False
    if args.command == "chat":
        return sys.stdout.isatty()
    return args.command == "run" and not settings.logging.file and sys.stderr.isatty()


def _log_stream(settings: Settings) -> TextIO:
    path = settings.logging.file
    if not path:
        return sys.stderr
    try:
        return open(path, "a", buffering=1, encoding="utf-8")
    except OSError as exc:
        raise GatewayError(f"logging.file: cannot write to {path}: {exc.strerror or exc}") from exc


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tether", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"tether {_version()}")
    config_help = "YAML config file (default: ./tether.yaml if present, else built-in defaults)"
    parser.add_argument("-c", "--config", help=config_help)
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, func: object, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        # SUPPRESS: an absent -c after the command keeps the one given before it.
        p.add_argument("-c", "--config", default=argparse.SUPPRESS, help=config_help)
        p.set_defaults(func=func)
        return p

    run = command("run", _run, "run every configured platform until SIGTERM/SIGINT")
    run.add_argument("-v", "--verbose", action="store_true", help="show all logs on a terminal")
    chat = command("chat", _chat, "chat in the terminal through the full pipeline")
    chat.add_argument("-v", "--verbose", action="store_true", help="show logs on a terminal")
    command("check", _check, "validate the config and print it with secrets masked")
    command("reload", _reload, "make the running gateway re-read the config (SIGHUP)")
    add_init_command(sub)
    dead = command("dead", _dead, "inspect and retry dead letters")
    dead.add_argument("action", choices=["list", "show", "retry"])
    dead.add_argument("key", nargs="?", help="event key (or outbox key, for retry)")
    status = command("status", _status, "what the gateway holds: events, outbox, activity")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    pair = command("pair", _pair, "list and approve senders waiting for pairing")
    pair.add_argument("action", choices=["list", "approve", "revoke"])
    pair.add_argument("what", nargs="?", help="CODE to approve, or platform:user to revoke")
    jobs = command(
        "jobs", _jobs, "list cron jobs (next and last fire), fire one now, or cancel one"
    )
    jobs.add_argument("action", choices=["list", "run", "cancel"])
    jobs.add_argument("id", nargs="?", help="the job to fire (run) or made in chat to cancel")
    return parser


def _version() -> str:
    try:
        return metadata.version("tether")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "unknown"


def _sources(settings: Settings, config: str | None) -> str:
    """Which config and store a command used, the store's password masked."""
    store = settings.masked()["memory"]["store"]
    return f"config: {config or 'none (built-in defaults)'}, store: {store}"


# -- run / chat --------------------------------------------------------------------


def _run(settings: Settings, args: argparse.Namespace) -> int:
    adapters = build_adapters(settings)
    if sys.stderr.isatty():  # a person watching: say what runs (scripts read the logs)
        platforms = ", ".join(adapters) or "none"
        print(f"tether: {_sources(settings, args.config)}, platforms: {platforms}", file=sys.stderr)
    gateway = Gateway(settings, adapters, config_path=args.config)
    runtime.run(serve(gateway))  # on uvloop when it imports
    return 0


def _chat(settings: Settings, args: argparse.Namespace) -> int:
    if sys.stdout.isatty():  # a person chatting: say which config and store hold the talk
        print(f"tether: {_sources(settings, args.config)}", file=sys.stderr)
    runtime.run(_chat_session(settings))
    return 0


async def _chat_session(settings: Settings) -> None:
    from tether.adapters.console import ConsoleAdapter

    adapters = build_adapters(settings, console=True)
    console = adapters["console"]
    assert isinstance(console, ConsoleAdapter)
    # No cron here: a terminal chat is not the service that owns the schedule.
    gateway = Gateway(settings, {"console": console}, http=False, scheduler=False)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await gateway.start()
    settle_heap()
    try:
        if sys.stdout.isatty():
            for turn in await gateway.store.history(console.conversation.key, 6):
                print(f"  ({turn.role}) {turn.text}")
        eof = asyncio.create_task(console.eof.wait())
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait([eof, stopped], return_when=asyncio.FIRST_COMPLETED)
        eof.cancel()
        stopped.cancel()
        if console.eof.is_set():
            await gateway.drain(ingress_done=True)
    finally:
        await gateway.stop()


# -- check -------------------------------------------------------------------------


def _check(settings: Settings, args: argparse.Namespace) -> int:
    load_router(settings)  # plugins must import
    adapters = build_adapters(settings)
    try:
        check_job_handlers(settings)  # handlers import
        check_targets(load_jobs(settings), adapters)  # targets are enabled
    except JobError as exc:
        raise GatewayError(str(exc)) from None
    for name, server in settings.mcp.servers.items():
        problem = missing_program(server)
        if problem:
            raise GatewayError(f"mcp.servers.{name}.command: {problem}")
    # scrubbed too: a value read from a ${file:...} is a secret in any key
    print(redactor.scrub(yaml.safe_dump(settings.masked(), sort_keys=False)), end="")
    print(f"config ok ({_sources(settings, args.config)})", file=sys.stderr)
    return 0


def _reload(settings: Settings, args: argparse.Namespace) -> int:
    """Validated here first (main loaded it), so a broken file is told at once; then the
    running gateway re-reads it and its outcome is printed."""
    load_router(settings)  # plugins must import
    try:
        check_job_handlers(settings)
    except JobError as exc:
        raise GatewayError(str(exc)) from None
    outcome = request_reload(args.config)
    if outcome.get("outcome") != RELOADED:
        error = redactor.scrub(str(outcome.get("error")))
        print(f"tether: reload failed, nothing changed\n{error}", file=sys.stderr)
        return 1
    changed = ", ".join(outcome.get("changed") or []) or "nothing"
    print(f"reloaded (pid {outcome['pid']}): changed {changed}")
    for key in outcome.get("restart") or []:
        print(f"{key} changed but needs a restart; it keeps its running value")
    return 0


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
    url = settings.memory.store
    if not create and url.startswith("sqlite://"):
        path = sqlite_path(url)
        if path != ":memory:" and not Path(path).exists():
            shown = path if Path(path).is_absolute() else f"./{path}"
            raise GatewayError(f"no store at {shown} (config: {args.config or 'none'})")

    async def run() -> int:
        store = open_store(settings.memory.store, synchronous=settings.memory.sqlite_synchronous)
        try:
            await store.open()
        except Exception as exc:
            with contextlib.suppress(Exception):
                await store.close()  # a half-open store: its writer must not outlive us
            raise store_error(store, exc) from exc
        print(f"tether: {_sources(settings, args.config)}", file=sys.stderr)
        try:
            return await action(store)
        finally:
            await store.close()

    return asyncio.run(run())


# -- status ------------------------------------------------------------------------


def _status(settings: Settings, args: argparse.Namespace) -> int:
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
    events = {s: inbox.get(s, 0) for s in ("received", "running", "retry_wait", "dead", "done")}
    sends = {
        "backlog": sum(outbox.get(s, 0) for s in ("pending", "sending", "retry_wait")),
        **{s: outbox.get(s, 0) for s in ("sent", "unknown", "dead")},
    }
    keys = await asyncio.to_thread(live_keys, settings)
    agents = agents_report(settings, await store.spend_by_conversation(today))
    if as_json:
        report = {
            "events": events,
            "outbox": sends,
            "platforms": {
                platform: {what: _iso(when) for what, when in seen.items()}
                for platform, seen in activity.items()
            },
            "cron": cron,
            "agents": agents,
            "spend_today": spend,
            "llm_keys": keys,
            "alerts": [
                {"check": a.check, "since": _iso(a.since), "detail": a.detail} for a in alerts
            ],
        }
        print(json.dumps(report, indent=2))
        return 0
    print("events   " + "  ".join(f"{name} {n}" for name, n in events.items()))
    print("outbox   " + "  ".join(f"{name} {n}" for name, n in sends.items()))
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
    for alert in alerts:
        print(f"ALERT      {alert.check:<24} since {_when(alert.since)}  {alert.detail}")
    total = sum(m["tokens"] for m in spend.values())
    cost = sum(m["cost"] for m in spend.values())
    print(
        f"today      {total:,} tokens, ${cost:.4f}"
        + "".join(f"; {m} {v['tokens']:,}" for m, v in spend.items())
    )
    return 0


# -- pair --------------------------------------------------------------------------


def _pair(settings: Settings, args: argparse.Namespace) -> int:
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


def _jobs(settings: Settings, args: argparse.Namespace) -> int:
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


def _dead(settings: Settings, args: argparse.Namespace) -> int:
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
    print(f"nothing dead (or unknown) with key {args.key!r}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
