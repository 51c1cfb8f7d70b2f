"""``tether``: run, chat, check, dead.

Without ``-c``, ``./tether.yaml`` is used if present, else the built-in defaults
(SQLite file ``tether.db``, console chat, echo agent).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import sys
from collections.abc import Sequence

import yaml

from config import ConfigError, Settings, load
from gateway import logs
from gateway.app import Gateway, GatewayError, build_adapters, load_router
from memory.store import Store, open_store

EXIT_CONFIG = 2


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = load(args.config)
    except ConfigError as exc:
        print(f"tether: invalid config\n{exc}", file=sys.stderr)
        return EXIT_CONFIG
    level = settings.logging.level
    if args.command == "chat" and sys.stdout.isatty() and not args.verbose:
        level = "warning"  # keep the conversation readable; logs stay on for scripts
    logs.configure(level, settings.logging.format, settings.secrets(), _log_stream(settings))
    try:
        return int(args.func(settings, args))
    except GatewayError as exc:
        print(f"tether: {logs.redactor.scrub(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _log_stream(settings: Settings):  # type: ignore[no-untyped-def]
    if settings.logging.file:
        return open(settings.logging.file, "a", buffering=1, encoding="utf-8")
    return sys.stderr


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tether", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, func: object, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help)
        p.add_argument("-c", "--config", help="YAML config file (default: ./tether.yaml)")
        p.set_defaults(func=func)
        return p

    command("run", _run, "run every configured platform until SIGTERM/SIGINT")
    chat = command("chat", _chat, "chat in the terminal through the full pipeline")
    chat.add_argument("-v", "--verbose", action="store_true", help="show logs on a terminal")
    command("check", _check, "validate the config and print it with secrets masked")
    dead = command("dead", _dead, "inspect and retry dead letters")
    dead.add_argument("action", choices=["list", "show", "retry"])
    dead.add_argument("key", nargs="?", help="event key (or outbox key, for retry)")
    return parser


# -- run / chat --------------------------------------------------------------------


def _run(settings: Settings, _args: argparse.Namespace) -> int:
    gateway = Gateway(settings, build_adapters(settings))
    asyncio.run(gateway.run_until_signal())
    return 0


def _chat(settings: Settings, _args: argparse.Namespace) -> int:
    asyncio.run(_chat_session(settings))
    return 0


async def _chat_session(settings: Settings) -> None:
    from adapters.console import ConsoleAdapter

    adapters = build_adapters(settings, console=True)
    console = adapters["console"]
    assert isinstance(console, ConsoleAdapter)
    gateway = Gateway(settings, {"console": console}, http=False)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await gateway.start()
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
            await gateway.drain()
    finally:
        await gateway.stop()


# -- check -------------------------------------------------------------------------


def _check(settings: Settings, _args: argparse.Namespace) -> int:
    load_router(settings)  # plugins must import
    build_adapters(settings)
    print(yaml.safe_dump(settings.masked(), sort_keys=False), end="")
    print("config ok", file=sys.stderr)
    return 0


# -- dead --------------------------------------------------------------------------


def _dead(settings: Settings, args: argparse.Namespace) -> int:
    if args.action in ("show", "retry") and not args.key:
        print(f"tether dead {args.action}: a KEY is required", file=sys.stderr)
        return EXIT_CONFIG
    return asyncio.run(_dead_action(settings, args))


async def _dead_action(settings: Settings, args: argparse.Namespace) -> int:
    store = open_store(settings.memory.store, synchronous=settings.memory.sqlite_synchronous)
    await store.open()
    try:
        return await _dead_on(store, args)
    finally:
        await store.close()


async def _dead_on(store: Store, args: argparse.Namespace) -> int:
    if args.action == "list":
        letters = await store.dead_letters()
        if not letters:
            print("no dead letters")
            return 0
        print(f"{'KEY':<44} {'CONVERSATION':<28} {'WHEN (UTC)':<20} ERROR")
        for letter in letters:
            when = dt.datetime.fromtimestamp(letter.created, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
            print(f"{letter.key:<44} {letter.conversation:<28} {when:<20} {letter.error[:80]}")
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
            "created": found.created,
            "event": json.loads(found.event.to_json()),
            "snapshot": found.snapshot,
            "traceback": found.traceback,
        }
        print(json.dumps(out, indent=2, ensure_ascii=False))
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
