"""Slack as the fourth platform (issue 34): ``platforms.slack`` builds the adapter (and an
agent's ``agents[i].platforms.slack`` its own), a missing slack-sdk is one line with the
``pip install``, ``tether init --platform slack`` writes a config ``tether check`` takes
and the manifest docs/slack.md shows, and a real gateway answers a signed Events API
message through the fake Slack with exactly one ``chat.postMessage``, as docs/slack.md's
setup says it does."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.fakes.slack_api import (
    APP_ID,
    APP_TOKEN,
    BOT_TOKEN,
    DM_CHANNEL_ID,
    SIGNING_SECRET,
    FakeSlack,
)
from tests.fakes.slack_events import message_event, signed_request
from tests.support.config import ROOT, inbox_rows, make_settings, merge
from tests.support.gateway import gateway_for
from tether.adapters.slack.adapter import SlackAdapter
from tether.config import load_text
from tether.errors import GatewayError
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters, require_extras
from tether.gateway.cli import main
from tether.gateway.init import MANIFEST

OWNER_LINE = re.compile(r"send /owner ([A-Z0-9]{8}) to the bot")
PAGE = ROOT / "docs" / "slack.md"


def events_section(fake: FakeSlack, **fields: Any) -> dict[str, Any]:
    section = {
        "bot_token": BOT_TOKEN,
        "mode": "events",
        "signing_secret": SIGNING_SECRET,
        "api_base": fake.base_url,
        "rate_limits": False,
        "timeout": 5,
    }
    return {**section, **fields}


async def post(gateway: Gateway, payload: dict[str, Any], **signing: Any) -> int:
    assert gateway.http is not None
    body, headers = signed_request(payload, **signing)
    url = f"http://127.0.0.1:{gateway.http.port}/slack/events"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as response,
    ):
        return response.status


def post_messages(fake: FakeSlack) -> list[dict[str, Any]]:
    return [args for method, args in fake.log if method == "chat.postMessage"]


# -- assembly ---------------------------------------------------------------------------


def test_platforms_slack_builds_the_adapter_and_each_agent_its_own() -> None:
    text = f"""
memory: {{store: "memory://"}}
http: {{enabled: false}}
platforms:
  console: {{enabled: false}}
  slack: {{bot_token: {BOT_TOKEN}, app_token: {APP_TOKEN}}}
agents:
  - name: alice
    handler: echo
    platforms:
      slack: {{bot_token: xoxb-2-alice, mode: events, signing_secret: s3cret}}
"""
    adapters = build_adapters(load_text(text))
    assert set(adapters) == {"slack", "slack@alice"}
    gateway_app, alice = adapters["slack"], adapters["slack@alice"]
    assert isinstance(gateway_app, SlackAdapter) and isinstance(alice, SlackAdapter)
    assert gateway_app.config.mode == "socket" and alice.config.mode == "events"
    assert alice.config.bot_token.get_secret_value() == "xoxb-2-alice"


def test_a_missing_slack_sdk_names_the_key_and_the_pip_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As without the extra installed: ``find_spec`` finds no slack_sdk."""
    monkeypatch.setitem(sys.modules, "slack_sdk", None)
    section = {"bot_token": BOT_TOKEN, "app_token": APP_TOKEN}
    with pytest.raises(GatewayError) as caught:
        require_extras(make_settings(tmp_path, platforms={"slack": section}))
    assert str(caught.value) == (
        "platforms.slack needs the slack extra (slack-sdk not installed):"
        " pip install 'tether-gateway[slack]'"
    )
    agent = {"name": "bob", "handler": "echo", "platforms": {"slack": section}}
    with pytest.raises(GatewayError, match=re.escape("agents[0].platforms.slack needs")):
        build_adapters(make_settings(tmp_path, agents=[agent]))
    config = tmp_path / "tether.yaml"
    config.write_text(yaml.safe_dump({"platforms": {"slack": section}}))
    assert main(["check", "-c", str(config)]) == 1
    assert capsys.readouterr().err == f"tether: {caught.value}\n"


# -- tether init --platform slack ---------------------------------------------------------


def test_init_writes_a_config_check_takes_and_the_manifest_the_docs_show(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    monkeypatch.delenv("SLACK_APP_TOKEN", raising=False)
    path = tmp_path / "bot.yaml"
    assert main(["init", "--platform", "slack", "-o", str(path)]) == 0
    out = capsys.readouterr().out
    assert "${SLACK_BOT_TOKEN}" in path.read_text() and "${SLACK_APP_TOKEN}" in path.read_text()
    assert f"wrote {tmp_path / MANIFEST}" in out
    assert "SLACK_BOT_TOKEN=... SLACK_APP_TOKEN=..." in out
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("SLACK_APP_TOKEN", APP_TOKEN)
    assert main(["check", "-c", str(path)]) == 0
    checked = capsys.readouterr()
    assert BOT_TOKEN not in checked.out + checked.err
    assert APP_TOKEN not in checked.out + checked.err
    settings = load_text(path.read_text())
    assert settings.platforms.slack is not None and settings.platforms.slack.mode == "socket"
    assert not settings.platforms.console.enabled
    # Swapped tokens: check names the key, and prints neither token.
    monkeypatch.setenv("SLACK_BOT_TOKEN", APP_TOKEN)
    assert main(["check", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert "platforms.slack.bot_token:" in err and APP_TOKEN not in err
    # The manifest: what the adapter needs, and word for word what docs/slack.md shows.
    manifest = yaml.safe_load((tmp_path / MANIFEST).read_text())
    settings_ = manifest["settings"]
    assert settings_["socket_mode_enabled"] is True and settings_["interactivity"]["is_enabled"]
    assert set(settings_["event_subscriptions"]["bot_events"]) == {
        "message.channels",
        "message.groups",
        "message.im",
        "message.mpim",
        "app_mention",
    }
    assert {"app_mentions:read", "im:history", "chat:write"} <= set(
        manifest["oauth_config"]["scopes"]["bot"]
    )
    shown = [b for b in yaml_blocks(PAGE.read_text()) if "socket_mode_enabled: true" in b]
    assert shown == [(tmp_path / MANIFEST).read_text()]
    # Both are kept unless --force.
    assert main(["init", "--platform", "slack", "-o", str(tmp_path / "new.yaml")]) == 1
    assert "--force" in capsys.readouterr().err
    assert not (tmp_path / "new.yaml").exists()


def yaml_blocks(text: str) -> list[str]:
    return re.findall(r"^```yaml\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)


# -- a signed Events API message, answered once -------------------------------------------


async def test_a_signed_message_and_its_retry_are_answered_with_one_post(
    tmp_path: Path, slack: FakeSlack
) -> None:
    settings = make_settings(
        tmp_path, http={"enabled": True, "port": 0}, platforms={"slack": events_section(slack)}
    )
    message = message_event("hello", ts="1712345678.000100", event_id="Ev01")
    async with gateway_for(settings) as gateway:
        assert await post(gateway, message) == 200
        assert await post(gateway, message, retry=1) == 200  # Slack's retry: the same row
        assert await post(gateway, message, secret="forged") == 401
        await slack.wait_for(lambda: len(slack.posted) >= 1)
        await gateway.drain()
        await gateway.outbox.flush(5)
    [sent] = post_messages(slack)
    assert sent["channel"] == DM_CHANNEL_ID and sent["text"] == "hello"
    [key] = [k for k, _ in inbox_rows(tmp_path)]
    assert key == f"sl:{APP_ID}:msg:{DM_CHANNEL_ID}:1712345678.000100"
    assert sent["metadata"]["event_type"] == "tether_outbox"  # the reconciliation's key


async def test_the_setup_works_as_written(
    tmp_path: Path,
    slack: FakeSlack,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/slack.md's setup config, over the Events API to the fake: the owner code the
    first start prints, then ``hello``; both answers are the page's, word for word."""
    section = PAGE.read_text().split("\n## Setup\n", 1)[1].split("\n## ", 1)[0]
    written = yaml.safe_load(next(b for b in yaml_blocks(section) if "platforms:" in b))
    assert set(written["platforms"]) == {"console", "slack"}
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("SLACK_APP_TOKEN", APP_TOKEN)
    config = merge(written, {"platforms": {"slack": events_section(slack)}})
    config["memory"] = {"store": f"sqlite:///{tmp_path / 'tether.db'}"}
    config["http"] = {"enabled": True, "port": 0}
    settings = load_text(yaml.safe_dump(config))
    async with gateway_for(settings) as gateway:
        match = OWNER_LINE.search(capsys.readouterr().err)
        assert match, "no owner code printed"
        owner = message_event(f"/owner {match.group(1)}", ts="1712345678.000100", event_id="E1")
        assert await post(gateway, owner) == 200
        await slack.wait_for(lambda: len(slack.posted) >= 1)
        assert await post(gateway, message_event("hello", ts="1712345679.000100")) == 200
        await slack.wait_for(lambda: len(slack.posted) >= 2)
        await gateway.drain()
    claimed, answered = (m["text"] for m in slack.posted)
    assert answered == "hello"
    flat = " ".join(section.split())
    for said in (claimed, "answers `hello`"):
        assert " ".join(said.split()) in flat, said
