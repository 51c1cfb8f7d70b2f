"""``platforms.slack`` in the config: each mistake is one line naming its key path
(``platforms.slack.app_token``, ``agents[1].platforms.slack.bot_token``), a secret is never
in that line, and the inbox keeps Slack's keys past its redelivery window (issue 34)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes.slack_api import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET
from tests.support.config import parse, problem
from tether.config.retention.ages import REDELIVERY_WINDOWS

SOCKET = {"bot_token": BOT_TOKEN, "app_token": APP_TOKEN}
EVENTS = {"bot_token": BOT_TOKEN, "mode": "events", "signing_secret": SIGNING_SECRET}


def slack(**fields: Any) -> dict[str, Any]:
    return {"slack": {k: v for k, v in fields.items() if v is not None}}


def test_socket_mode_is_the_default_and_the_secrets_are_masked() -> None:
    config = parse(platforms=slack(**SOCKET)).platforms.slack
    assert config.mode == "socket" and config.events_path == "/slack/events"
    assert config.app_token.get_secret_value() == APP_TOKEN
    assert BOT_TOKEN not in repr(config) and APP_TOKEN not in repr(config)
    events = parse(platforms=slack(**EVENTS)).platforms.slack
    assert events.mode == "events" and events.app_token is None
    assert SIGNING_SECRET not in repr(events)


@pytest.mark.parametrize(
    ("fields", "path", "says"),
    [
        ({"bot_token": BOT_TOKEN}, "platforms.slack.app_token", "required with mode: socket"),
        (
            {"bot_token": BOT_TOKEN, "mode": "events"},
            "platforms.slack.signing_secret",
            "required with mode: events",
        ),
        ({"app_token": APP_TOKEN}, "platforms.slack.bot_token", "required"),
        ({**SOCKET, "bot_token": APP_TOKEN}, "platforms.slack.bot_token", "xoxb-"),
        ({**SOCKET, "app_token": BOT_TOKEN}, "platforms.slack.app_token", "xapp-"),
        ({**EVENTS, "signing_secret": "has spaces in it"}, "platforms.slack.signing_secret", ""),
        ({**SOCKET, "mode": "webhook"}, "platforms.slack.mode", "socket"),
        ({**EVENTS, "events_path": "slack/events"}, "platforms.slack.events_path", "'/'"),
        ({**SOCKET, "api_base": "http://slack.example/api/"}, "platforms.slack.api_base", "https"),
        ({**SOCKET, "api_base": "slack.com/api"}, "platforms.slack.api_base", "URL"),
        ({**SOCKET, "reconcile_depth": 0}, "platforms.slack.reconcile_depth", ""),
        ({**SOCKET, "max_age": True}, "platforms.slack.max_age", "boolean"),
        ({**SOCKET, "answer_channels": "some"}, "platforms.slack.answer_channels", "mentioned"),
        ({**SOCKET, "signing_key": "x"}, "platforms.slack.signing_key", "unknown key"),
    ],
)
def test_each_mistake_names_its_key_path_and_no_secret(
    fields: dict[str, Any], path: str, says: str
) -> None:
    message = problem(platforms=slack(**fields))
    assert f"{path}:" in message and says in message, message
    for secret in (BOT_TOKEN, APP_TOKEN, SIGNING_SECRET):
        assert secret not in message


def test_api_base_gains_the_slash_slack_sdk_joins_method_names_to() -> None:
    config = parse(platforms=slack(**SOCKET, api_base="http://127.0.0.1:9/api")).platforms.slack
    assert config.api_base == "http://127.0.0.1:9/api/"


def test_several_agents_each_with_their_own_slack_app() -> None:
    other = {"bot_token": "xoxb-9999-other", "app_token": "xapp-1-A0OTHER-other"}
    agents = [
        {"name": "alice", "handler": "echo", "platforms": slack(**SOCKET)},
        {"name": "bob", "handler": "echo", "platforms": slack(**other)},
    ]
    settings = parse(agents=agents)
    assert [set(a.platforms.enabled()) for a in settings.agents] == [{"slack"}, {"slack"}]
    agents[1]["platforms"] = slack(**SOCKET)  # the same app for both: each would answer
    message = problem(agents=agents)
    assert "agents[1].platforms.slack.bot_token: agents[0].platforms.slack has this" in message
    assert BOT_TOKEN not in message
    agents[1]["platforms"] = slack(bot_token="xoxb-9999-other")
    assert "agents[1].platforms.slack.app_token: required with mode: socket" in problem(
        agents=agents
    )


def test_the_inbox_keeps_slack_keys_past_its_redelivery_window() -> None:
    assert REDELIVERY_WINDOWS["slack"] == 3600.0  # retries within the hour (PLATFORMS.md)
    short = {"retention": {"inbox": "30m"}}
    message = problem(platforms=slack(**SOCKET), memory={"store": "memory://", **short})
    assert "memory.retention.inbox: 1800s is shorter than slack's redelivery window" in message
    agent = {"name": "a", "handler": "echo", "platforms": slack(**SOCKET)}
    assert "memory.retention.inbox" in problem(
        agents=[agent], memory={"store": "memory://", **short}
    )
    parse(platforms=slack(**SOCKET), memory={"store": "memory://", "retention": {"inbox": "1h"}})


def test_tether_check_names_the_key_and_prints_no_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.config import write_config
    from tether.gateway.cli import main

    good = write_config(tmp_path, platforms=slack(**SOCKET))
    assert main(["check", "-c", str(good)]) == 0
    shown = capsys.readouterr()
    assert "config ok" in shown.out + shown.err and "slack:" in shown.out
    assert BOT_TOKEN not in shown.out + shown.err and APP_TOKEN not in shown.out + shown.err
    bad = write_config(tmp_path, platforms=slack(bot_token=APP_TOKEN, app_token=APP_TOKEN))
    assert main(["check", "-c", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "platforms.slack.bot_token: Value error, must be the Bot User OAuth Token" in err
    assert APP_TOKEN not in err
