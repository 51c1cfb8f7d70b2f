"""The public surface: what a bot author imports from ``tether`` and ``tether.testing``.

Pinned the way httpx pins its exported members (``tests/test_exported_members.py``): a
name added, renamed or dropped here is a change users see, so it has to be made on
purpose, in this list. Where a name is defined inside the package is free to move.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import tether
import tether.errors
import tether.testing

PUBLIC = [
    "ActionUnsupported",
    "Answer",
    "Attachment",
    "BudgetExceeded",
    "Button",
    "ButtonError",
    "ConfigError",
    "Context",
    "Conversation",
    "DownloadError",
    "Event",
    "Fatal",
    "File",
    "Gateway",
    "GatewayError",
    "Handler",
    "Kind",
    "Middleware",
    "NextHandler",
    "OutMessage",
    "Retryable",
    "Router",
    "Sender",
    "Target",
    "TaskRefused",
    "TooLarge",
    "ToolError",
    "ToolTimeout",
    "WaitCancelled",
    "WaitEnded",
    "WaitExpired",
    "converse",
]

TESTING = [
    "Acted",
    "Bot",
    "Clock",
    "Delivery",
    "FakeModel",
    "LoopbackAdapter",
    "Pacing",
    "Reply",
    "asks_for",
    "scripted",
    "tool_call",
]


def test_tether_all_is_pinned() -> None:
    assert sorted(tether.__all__) == PUBLIC


def test_every_public_name_resolves() -> None:
    missing = [name for name in PUBLIC if getattr(tether, name, None) is None]
    assert not missing
    assert set(PUBLIC) <= set(dir(tether))


def test_star_import_gives_exactly_the_public_names() -> None:
    namespace: dict[str, object] = {}
    exec("from tether import *", namespace)
    assert sorted(name for name in namespace if name != "__builtins__") == PUBLIC


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        tether.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("tether.NoSuchThing resolved")


def test_testing_all_is_pinned() -> None:
    assert sorted(tether.testing.__all__) == sorted(TESTING)
    assert all(getattr(tether.testing, name, None) is not None for name in TESTING)


def test_importing_tether_loads_no_gateway() -> None:
    """``import tether`` (and the event types) stays cheap: the gateway, its LLM client
    and the platform SDKs load only when a lazy name is first asked for."""
    code = (
        "import sys, tether\n"
        "from tether import Event, Button, File, Fatal\n"
        "print(sorted(m for m in sys.modules if m.startswith('tether.gateway')"
        " or m in ('openai', 'telegram', 'discord', 'lark_oapi', 'slack_sdk')))\n"
        "tether.Router\n"
        "print('tether.gateway' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0] == "[]"
    assert out[1] == "True"  # the lazy name did load it


def test_every_error_class_is_in_the_drawn_tree() -> None:
    """tether/errors.py draws the tree of every error; a class added without a line in
    the drawing (or drawn under the wrong parent) fails here."""
    doc = inspect.getdoc(tether.errors) or ""
    tree = [line for line in doc.splitlines() if "──" in line]
    drawn = {line.split("── ")[1].split()[0]: line for line in tree}
    for name, cls in vars(tether.errors).items():
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            continue
        if cls.__module__ != "tether.errors":
            continue
        assert name in drawn, f"{name} is not drawn in tether/errors.py"
        parent = cls.__mro__[1].__name__
        depth = drawn[name].index("──")
        above = [
            line.split("── ")[1].split()[0]
            for line in tree[: tree.index(drawn[name])]
            if line.index("──") < depth
        ]
        expected = "Exception" if depth == min(line.index("──") for line in tree) else above[-1]
        assert parent == expected, f"{name} drawn under {expected}, defined under {parent}"


def test_the_errors_a_user_catches_come_from_tether() -> None:
    assert issubclass(tether.TooLarge, tether.DownloadError)
    assert issubclass(tether.ToolTimeout, tether.ToolError)
    assert issubclass(tether.TaskRefused, tether.ToolError)
    assert issubclass(tether.ButtonError, ValueError)
    from tether.config import ConfigError

    assert ConfigError is tether.ConfigError
