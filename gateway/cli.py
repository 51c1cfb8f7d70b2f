"""tether: run, chat, check, reload, init, status, pair, jobs, dead, approvals.

Without -c, ./tether.yaml is used if present, else the built-in defaults (SQLite file
tether.db, console chat, echo agent). -c goes before or after the command.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import TextIO

import yaml

from tether.config import Settings, load, plugin_path
from tether.config.console import exposure_problem
from tether.config.mcp import missing_program
from tether.errors import ConfigError, GatewayError, JobError
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters, load_router
from tether.gateway.handler.plugins import check_job_handlers
from tether.gateway.init import add_init_command
from tether.gateway.inspection import backup as inspection_backup
from tether.gateway.inspection import erasure as inspection_erasure
from tether.gateway.inspection import export as inspection_export
from tether.gateway.inspection import people as inspection_people
from tether.gateway.inspection import search as inspection_search
from tether.gateway.inspection import store as inspection
from tether.gateway.inspection import tasks as inspection_tasks
from tether.gateway.inspection import waits as inspection_waits
from tether.gateway.ops import logs, runtime
from tether.gateway.ops.runtime import settle_heap
from tether.gateway.reload import RELOADED, request_reload
from tether.gateway.serve import serve
from tether.gateway.tools import approvals
from tether.redaction import redactor
from tether.scheduler.jobs import check_targets, load_jobs

EXIT_CONFIG = inspection.EXIT_CONFIG


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
    dead = command("dead", inspection.dead, "inspect and retry dead letters")
    dead.add_argument("action", choices=["list", "show", "retry"])
    dead.add_argument("key", nargs="?", help="event key (or outbox key, for retry)")
    status = command(
        "status", inspection.status, "what the gateway holds: events, outbox, activity"
    )
    status.add_argument("--json", action="store_true", help="machine-readable output")
    pair = command("pair", inspection.pair, "list and approve senders waiting for pairing")
    pair.add_argument("action", choices=["list", "approve", "revoke"])
    pair.add_argument("what", nargs="?", help="CODE to approve, or platform:user to revoke")
    jobs = command(
        "jobs", inspection.jobs, "list cron jobs (next and last fire), fire one now, or cancel one"
    )
    jobs.add_argument("action", choices=["list", "run", "cancel"])
    jobs.add_argument("id", nargs="?", help="the job to fire (run) or made in chat to cancel")
    approvals = command(
        "approvals",
        inspection_waits.approvals,
        "the audit of approval-gated tool calls: who asked, what, who decided",
    )
    approvals.add_argument("action", choices=["list", "show"])
    approvals.add_argument("id", nargs="?", help="the approval's WAIT_ID (show)")
    approvals.add_argument("--pending", action="store_true", help="only the open ones (list)")
    approvals.add_argument("--json", action="store_true", help="one JSON object a line (list)")
    tasks = command(
        "tasks", inspection_tasks.tasks, "list the background tasks, or cancel a running one"
    )
    tasks.add_argument("action", choices=["list", "cancel"])
    tasks.add_argument("id", nargs="?", help="the task's ID (cancel)")
    tasks.add_argument("--all", action="store_true", help="the ended ones too, newest first")
    tasks.add_argument("--json", action="store_true", help="one JSON object a line (list)")
    found = command(
        "search", inspection_search.search, "search every conversation's history by words"
    )
    found.add_argument("words", nargs="+", help="what the turns contain (any language)")
    found.add_argument("--conversation", help="only this one (platform:chat, as listed)")
    found.add_argument("--limit", type=int, default=inspection_search.LIMIT, help="at most N")
    found.add_argument("--json", action="store_true", help="one JSON object a line")
    person = command(
        "who", inspection_people.who, "show the identities linked as one person, and unlink"
    )
    person.add_argument("identity", help="PLATFORM:USER, as /whoami shows it")
    person.add_argument("--unlink", action="store_true", help="take it out of its person")
    person.add_argument("--json", action="store_true", help="one JSON object")
    erase = command(
        "forget", inspection_erasure.forget, "erase a person (and their linked identities)"
    )
    erase.add_argument("identity", help="PLATFORM:USER, as /whoami shows it")
    erase.add_argument("--yes", action="store_true", help="erase (without it: say what)")
    saved = command("backup", inspection_backup.backup, "copy the store, safely while it runs")
    saved.add_argument("path", help="the backup file (or a directory for a dated one)")
    saved.add_argument("--check", action="store_true", help="check PATH as a backup instead")
    back = command("restore", inspection_backup.restore, "put a backup in place of the store")
    back.add_argument("path", help="the backup file (checked first; the gateway stopped)")
    out = command("export", inspection_export.export, "export a person or a conversation (JSONL)")
    out.add_argument("identity", nargs="?", help="PLATFORM:USER, as /whoami shows it")
    out.add_argument("--conversation", help="export this conversation instead (as listed)")
    out.add_argument("--out", help="the folder to write (default: export-SUBJECT-TIME)")
    return parser


def _version() -> str:
    try:
        return metadata.version("tether-gateway")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "unknown"


# -- run / chat --------------------------------------------------------------------


def _run(settings: Settings, args: argparse.Namespace) -> int:
    adapters = build_adapters(settings)
    if sys.stderr.isatty():  # a person watching: say what runs (scripts read the logs)
        platforms = ", ".join(adapters) or "none"
        print(
            f"tether: {inspection.sources(settings, args.config)}, platforms: {platforms}",
            file=sys.stderr,
        )
    gateway = Gateway(settings, adapters, config_path=args.config)
    runtime.run(serve(gateway))  # on uvloop when it imports
    return 0


def _chat(settings: Settings, args: argparse.Namespace) -> int:
    if sys.stdout.isatty():  # a person chatting: say which config and store hold the talk
        print(f"tether: {inspection.sources(settings, args.config)}", file=sys.stderr)
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
    approvals.check_target(settings, adapters)  # where the approval cards go
    for name, server in settings.mcp.servers.items():
        problem = missing_program(server)
        if problem:
            raise GatewayError(f"mcp.servers.{name}.command: {problem}")
    exposed = exposure_problem(settings.http.host, settings.http.ui)
    if settings.http.enabled and exposed:  # the console in plain text beyond loopback
        raise GatewayError(exposed)
    # scrubbed too: a value read from a ${file:...} is a secret in any key
    print(redactor.scrub(yaml.safe_dump(settings.masked(), sort_keys=False)), end="")
    print(f"config ok ({inspection.sources(settings, args.config)})", file=sys.stderr)
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


if __name__ == "__main__":
    raise SystemExit(main())
