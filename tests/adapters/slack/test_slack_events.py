"""The Events API over HTTP: signed posts committed before the 200, forged and stale ones
refused with nothing stored, ``url_verification``, redeliveries converging, and slash
commands and button presses arriving as forms."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.adapters.slack.support import StoreInbox, opened, store_inbox
from tests.fakes.slack_api import APP_ID, FakeSlack
from tests.fakes.slack_events import (
    block_actions,
    message_event,
    signed_form,
    signed_request,
    slash_command,
)
from tether.adapters.slack.adapter import SlackAdapter

PATH = "/slack/events"


@asynccontextmanager
async def serving(
    slack: FakeSlack, tmp_path: Path
) -> AsyncIterator[tuple[TestClient[Any, Any], StoreInbox, SlackAdapter]]:
    async with store_inbox(tmp_path) as inbox, opened(slack, mode="events") as adapter:
        app = web.Application()
        adapter.routes(app)
        await adapter.start(inbox)
        async with TestClient(TestServer(app)) as http:
            yield http, inbox, adapter


async def test_a_signed_event_is_stored_before_the_200(slack: FakeSlack, tmp_path: Path) -> None:
    async with serving(slack, tmp_path) as (http, inbox, _adapter):
        body, headers = signed_request(message_event("hello", ts="1712345678.000100"))
        response = await http.post(PATH, data=body, headers=headers)
        assert response.status == 200
        assert await inbox.keys() == [f"sl:{APP_ID}:msg:D0ADADM0001:1712345678.000100"]


async def test_forged_and_stale_posts_are_401_and_store_nothing(
    slack: FakeSlack, tmp_path: Path
) -> None:
    async with serving(slack, tmp_path) as (http, inbox, _adapter):
        payload = message_event("hello")
        forged_body, forged = signed_request(payload, secret="not-the-secret")
        stale_body, stale = signed_request(payload, timestamp=time.time() - 301)
        future_body, future = signed_request(payload, timestamp=time.time() + 301)
        body, good = signed_request(payload)
        tampered = body.replace(b"hello", b"HELLO")
        unsigned = {"Content-Type": "application/json"}
        for data, headers in (
            (forged_body, forged),
            (stale_body, stale),
            (future_body, future),
            (tampered, good),
            (body, unsigned),
        ):
            response = await http.post(PATH, data=data, headers=headers)
            assert response.status == 401, headers
        assert await inbox.keys() == []


async def test_url_verification_answers_the_challenge(slack: FakeSlack, tmp_path: Path) -> None:
    async with serving(slack, tmp_path) as (http, inbox, _adapter):
        body, headers = signed_request({"type": "url_verification", "challenge": "c-123"})
        response = await http.post(PATH, data=body, headers=headers)
        assert response.status == 200
        assert await response.json() == {"challenge": "c-123"}
        forged_body, forged = signed_request({"type": "url_verification", "challenge": "x"}, "bad")
        assert (await http.post(PATH, data=forged_body, headers=forged)).status == 401
        assert await inbox.keys() == []


async def test_redeliveries_and_a_second_subscription_converge(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """X-Slack-Retry-Num redeliveries, and the same message as an app_mention with its own
    event id, are one inbox row."""
    async with serving(slack, tmp_path) as (http, inbox, _adapter):
        text = "<@U0TETHERBOT> hi"
        common: dict[str, Any] = {"ts": "1712345678.000500", "channel": "C0GENERAL01"}
        first = message_event(text, event_id="Ev1", channel_type="channel", **common)
        mention = message_event(text, event_id="Ev2", kind="app_mention", **common)
        for payload, retry in ((first, None), (first, 1), (first, 2), (mention, None)):
            body, headers = signed_request(payload, retry=retry)
            assert (await http.post(PATH, data=body, headers=headers)).status == 200
        assert await inbox.keys() == [f"sl:{APP_ID}:msg:C0GENERAL01:1712345678.000500"]


async def test_slash_commands_and_button_presses_arrive_as_forms(
    slack: FakeSlack, tmp_path: Path
) -> None:
    async with serving(slack, tmp_path) as (http, inbox, _adapter):
        body, headers = signed_form(slash_command("/ask", "what now", trigger_id="T1"))
        assert (await http.post(PATH, data=body, headers=headers)).status == 200
        press = json.dumps(block_actions("yes", trigger_id="T2"))
        body, headers = signed_form({"payload": press})
        assert (await http.post(PATH, data=body, headers=headers)).status == 200
        forged_body, forged = signed_form({"payload": press}, secret="bad")
        assert (await http.post(PATH, data=forged_body, headers=forged)).status == 401
        keys = await inbox.keys()
        assert keys == [f"sl:{APP_ID}:cmd:T1", f"sl:{APP_ID}:act:T2"]
        (row,) = [r for r in await inbox.store.recover() if r.key.endswith(":cmd:T1")]
        assert "response_url" not in (row.event.raw or {})


async def test_before_start_and_after_stop_posts_are_503(slack: FakeSlack, tmp_path: Path) -> None:
    async with serving(slack, tmp_path) as (http, inbox, adapter):
        await adapter.stop()
        body, headers = signed_request(message_event("late"))
        assert (await http.post(PATH, data=body, headers=headers)).status == 503
        assert await inbox.keys() == []


async def test_a_failed_commit_is_503_so_slack_delivers_again(
    slack: FakeSlack, tmp_path: Path
) -> None:
    async with serving(slack, tmp_path) as (http, inbox, _adapter):
        await inbox.store.close()  # the store is gone: nothing can be committed
        body, headers = signed_request(message_event("lost?"))
        assert (await http.post(PATH, data=body, headers=headers)).status == 503
