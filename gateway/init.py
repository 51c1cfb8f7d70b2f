"""``tether init``: a commented ``tether.yaml`` for the platforms chosen, checked, ready to run.

Written from flags (``--platform telegram --owner telegram:12345 --llm openai``), so a
script and a person get the same file. Every secret is a ``${VAR}`` reference, never the
value: the file can be committed, shared and pasted into an issue. The file is loaded
before it is written (the referenced variables stood in by placeholders when unset), so
what ``init`` writes is a config ``tether check`` accepts; an existing file is kept
unless ``--force``.

With ``--platform slack`` it also writes ``slack-manifest.yaml`` beside the config: the
app manifest to paste at api.slack.com/apps ("From an app manifest"), so the scopes,
events and Socket Mode the adapter needs are set in one step instead of a dozen pages.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tether.config import load_text
from tether.errors import ConfigError

PLATFORMS = ("console", "telegram", "discord", "feishu", "slack")
LLM_PROVIDERS = ("openai",)

_HEADER = """\
# Written by `tether init`. Every key: docs/configuration.md. Validate: tether check -c {path}
# Secrets are ${{VAR}} references, read from the environment at start: never put a token here.
agent:
  name: Tether
{handler}
memory:
  store: sqlite:///tether.db   # relative to the directory tether runs in

platforms:
  console:
    enabled: {console}   # the terminal (tether chat); off when a chat platform runs the bot
"""

_SECTIONS = {
    "telegram": """\
  telegram:                      # docs/telegram.md
    token: ${TELEGRAM_TOKEN}     # from @BotFather
""",
    "discord": """\
  discord:                       # docs/discord.md
    token: ${DISCORD_TOKEN}      # Developer Portal → Bot → Reset Token
""",
    "feishu": """\
  feishu:                        # docs/feishu.md
    app_id: ${FEISHU_APP_ID}     # Developer Console → Credentials
    app_secret: ${FEISHU_APP_SECRET}
""",
    "slack": """\
  slack:                         # docs/slack.md; the app: {manifest} beside this file
    bot_token: ${SLACK_BOT_TOKEN}   # OAuth & Permissions → Bot User OAuth Token (xoxb-…)
    app_token: ${SLACK_APP_TOKEN}   # Basic Information → App-Level Tokens (xapp-…)
    mode: socket                 # or events: signing_secret, and Slack posts to /slack/events
""",
}

#: Where the Slack app manifest is written: beside the config.
MANIFEST = "slack-manifest.yaml"

#: The Slack app ``tether init --platform slack`` describes: what the adapter reads and
#: sends (docs/slack.md#setup shows the same manifest).
SLACK_MANIFEST = """\
# Paste at https://api.slack.com/apps → Create New App → From an app manifest (docs/slack.md).
display_information:
  name: {name}
  description: An agent answered through Tether
features:
  app_home:
    messages_tab_enabled: true
    messages_tab_read_only_enabled: false
  bot_user:
    display_name: {name}
    always_online: true
oauth_config:
  scopes:
    bot:
      - app_mentions:read
      - channels:history
      - groups:history
      - im:history
      - mpim:history
      - chat:write
      - files:read
      - files:write
      - reactions:write
      - pins:write
settings:
  event_subscriptions:
    bot_events:
      - app_mention
      - message.channels
      - message.groups
      - message.im
      - message.mpim
  interactivity:
    is_enabled: true
  org_deploy_enabled: false
  socket_mode_enabled: true
  token_rotation_enabled: false
"""

#: Stand-ins for variables whose values are checked for their shape (Slack's prefixes).
_PLACEHOLDERS = {"SLACK_BOT_TOKEN": "xoxb-placeholder", "SLACK_APP_TOKEN": "xapp-placeholder"}

_LLM = {
    "openai": """
llm:                             # docs/agent.md
  providers:
    openai:
      base_url: https://api.openai.com/v1
      api_key: ${OPENAI_API_KEY}
  models:
    mini:
      provider: openai
      model: gpt-4o-mini
      context_tokens: 128000
""",
}

_ACCESS = """
access:                          # docs/handlers.md#access
  # Who may talk to the bot. Others get a pairing code in a DM (tether pair approve CODE).
  admins: [{owners}]
  allow: [{owners}]
"""

_NO_OWNER = """
access:                          # docs/handlers.md#access
  # Nobody is admitted yet: a DM gets a pairing code (approve it: tether pair approve CODE),
  # group messages are ignored. Add yourself: allow: ["telegram:12345"] (/whoami tells).
  admins: []
  allow: []
"""


def add_init_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``tether init`` on the CLI's subcommands."""
    about = "write a commented tether.yaml for the chosen platforms, and check it"
    init = sub.add_parser("init", help=about, description=about)
    init.add_argument(
        "--platform",
        action="append",
        choices=PLATFORMS,
        help="a platform to enable (repeat for several; default: console)",
    )
    init.add_argument(
        "--owner",
        action="append",
        metavar="PLATFORM:USER",
        help="admitted and admin from the start, e.g. telegram:12345 (repeatable)",
    )
    init.add_argument("--llm", choices=LLM_PROVIDERS, help="answer with a model, not echo")
    init.add_argument(
        "-o", "--output", default="tether.yaml", help="where to write (default: ./tether.yaml)"
    )
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.set_defaults(func=init_command)


def init_command(args: argparse.Namespace) -> int:
    if args.platform is None and sys.stdin.isatty():
        _ask(args)  # a person at a terminal without flags: the same choices, as questions
    path = Path(args.output)
    platforms = list(dict.fromkeys(args.platform or ["console"]))
    owners = list(dict.fromkeys(args.owner or []))
    for owner in owners:
        platform, _, user = owner.partition(":")
        if platform not in platforms or not user:
            print(
                f"tether init: --owner {owner!r} should be PLATFORM:USER with PLATFORM one of"
                f" the chosen platforms ({', '.join(platforms)})",
                file=sys.stderr,
            )
            return 2
    manifest = path.with_name(MANIFEST) if "slack" in platforms else None
    for target in (path, manifest):
        if target is not None and target.exists() and not args.force:
            print(f"tether init: {target} exists; --force overwrites it", file=sys.stderr)
            return 1
    text = render(platforms, owners, args.llm, path)
    try:
        load_text(text, source=str(path), env=_with_placeholders(text))
    except ConfigError as exc:  # a template bug: say so rather than write a broken file
        print(f"tether init: the generated config does not load:\n{exc}", file=sys.stderr)
        return 1
    written = [(path, text)]
    if manifest is not None:
        written.append((manifest, slack_manifest(text)))
    for target, content in written:
        try:
            target.write_text(content, encoding="utf-8")
        except OSError as exc:
            print(f"tether init: cannot write {target}: {exc.strerror or exc}", file=sys.stderr)
            return 1
    print(f"wrote {path} ({', '.join(platforms)}{', llm ' + args.llm if args.llm else ''})")
    if manifest is not None:
        print(f"wrote {manifest}: create the Slack app from it (docs/slack.md#setup)")
    print(next_command(text, path))
    return 0


def slack_manifest(text: str) -> str:
    """The Slack app manifest for the config ``text``: the bot named like its agent."""
    name = load_text(text, env=_with_placeholders(text)).agent.name
    return SLACK_MANIFEST.format(name=name)


def _ask(args: argparse.Namespace) -> None:
    """Fill the flags' answers from questions; Enter takes the default, EOF every default."""
    args.platform = _choose(f"Platforms ({', '.join(PLATFORMS)}) [console]: ", PLATFORMS)
    owner = _question("Your id to admit from the start, PLATFORM:USER (Enter: none): ")
    args.owner = args.owner or ([owner] if owner else None)
    llm = _choose(f"Answer with a model ({', '.join(LLM_PROVIDERS)}; Enter: echo): ", LLM_PROVIDERS)
    args.llm = args.llm or (llm[0] if llm else None)


def _choose(prompt: str, choices: tuple[str, ...]) -> list[str] | None:
    """Names from ``choices`` (comma or space separated), asked again until they are."""
    while True:
        names = _question(prompt).replace(",", " ").split()
        unknown = [name for name in names if name not in choices]
        if not unknown:
            return names or None
        print(f"  not one of {', '.join(choices)}: {', '.join(unknown)}")


def _question(prompt: str) -> str:
    try:
        return input(prompt).strip()
    except EOFError:
        return ""


def render(platforms: list[str], owners: list[str], llm: str | None, path: Path) -> str:
    """The config text: console on only when no chat platform runs the bot."""
    chat = [p for p in platforms if p != "console"]
    handler = (
        "  handler: llm                   # answer with the model below\n"
        if llm
        else ("  handler: echo                  # answers with your text; `llm` for a model\n")
    )
    text = _HEADER.format(
        path=path,
        handler=handler,
        console="false" if chat and "console" not in platforms else "true",
    )
    text += "".join(_SECTIONS[p].replace("{manifest}", MANIFEST) for p in chat)
    if llm:
        text += _LLM[llm]
    quoted = ", ".join(f'"{owner}"' for owner in owners)
    text += _ACCESS.format(owners=quoted) if owners else _NO_OWNER
    return text


def _variables(text: str) -> list[str]:
    """The ``${VAR}`` names the text references, in order."""
    found: list[str] = []
    for line in text.splitlines():
        for part in line.split("#", 1)[0].split("${")[1:]:  # values, not the comments
            name = part.split("}", 1)[0]
            if name.isidentifier() and name not in found:
                found.append(name)
    return found


def _with_placeholders(text: str) -> dict[str, str]:
    """The environment, with a stand-in for each referenced variable not set yet."""
    env = dict(os.environ)
    for name in _variables(text):
        env.setdefault(name, _PLACEHOLDERS.get(name, "123456:placeholder"))
    return env


def next_command(text: str, path: Path) -> str:
    """What to type next: the variables still unset, then the run command."""
    run = "tether run" if path == Path("tether.yaml") else f"tether run -c {path}"
    missing = [name for name in _variables(text) if not os.environ.get(name)]
    if not missing:
        return f"next: {run}"
    return "next: " + " ".join(f"{name}=..." for name in missing) + f" {run}"
