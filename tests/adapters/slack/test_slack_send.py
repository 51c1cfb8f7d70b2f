"""Sends through the real slack-sdk against the fake: the key in metadata, threads,
mrkdwn, edits, the errors mapped, and the read-back that keeps an interrupted send from
being posted twice."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.adapters.slack.support import opened
from tests.fakes.slack_api import BOT_ID, CHANNEL_ID, Failure, FakeSlack
from tether.adapters.slack.mrkdwn import escape, to_mrkdwn
from tether.adapters.slack.send import classify
from tether.errors import SendAmbiguous, SendFatal, SendRetryable
from tether.events import OutMessage, Target


def out(key: str, text: str = "hi", *, thread: str | None = None, **fields: object) -> OutMessage:
    target = Target(platform="slack", chat_id=CHANNEL_ID, thread_id=thread)
    return OutMessage.model_validate({"key": key, "target": target, "text": text, **fields})


async def test_send_carries_the_key_in_metadata_and_goes_into_the_thread(slack: FakeSlack) -> None:
    async with opened(slack) as adapter:
        adapter.recovery_window = 0  # a fresh run: no read-back before a new key
        sent = await adapter.send(out("sl:A:msg:C:1#0", "**done** <now>", format="markdown"))
        root = slack.posted[0]["ts"]
        await adapter.send(out("sl:A:msg:C:1#1", "in the thread", thread=root))
    first, second = slack.posted
    assert sent.platform_id == first["ts"]
    assert first["metadata"] == {
        "event_type": "tether_outbox",
        "event_payload": {"key": "sl:A:msg:C:1#0"},
    }
    assert first["text"] == "*done* &lt;now&gt;"
    assert first["bot_id"] == BOT_ID
    assert second["thread_ts"] == root
    assert [m for m, _ in slack.log].count("conversations.history") == 0


async def test_edit_updates_the_message_and_is_safe_to_repeat(slack: FakeSlack) -> None:
    async with opened(slack) as adapter:
        adapter.recovery_window = 0
        sent = await adapter.send(out("k#0", "draft"))
        assert sent.platform_id is not None
        for _ in range(2):
            again = await adapter.edit(
                out("k#0", "final _answer_", format="markdown"), sent.platform_id
            )
            assert again.platform_id == sent.platform_id
        with pytest.raises(SendFatal, match="message_not_found"):
            await adapter.edit(out("k#0", "x"), "1.000000")
    (message,) = slack.posted
    assert message["text"] == "final _answer_"
    assert "edited" in message


async def test_refusals_map_to_their_send_errors(slack: FakeSlack) -> None:
    async with opened(slack) as adapter:
        adapter.recovery_window = 0
        slack.fail_posts(Failure(status=429, retry_after=7))
        with pytest.raises(SendRetryable) as limited:
            await adapter.send(out("a#0"))
        assert limited.value.retry_after == 7.0
        slack.gone.add("C0GONE")
        gone = OutMessage(key="b#0", target=Target(platform="slack", chat_id="C0GONE"), text="x")
        with pytest.raises(SendFatal, match="channel_not_found"):
            await adapter.send(gone)
        with pytest.raises(SendFatal, match="msg_too_long"):
            await adapter.send(out("c#0", "x" * 40_001))
        slack.fail_posts(Failure(status=503))
        with pytest.raises(SendAmbiguous):
            await adapter.send(out("d#0"))
        slack.fail_posts(Failure(status=200, error="not_in_channel"))
        with pytest.raises(SendFatal, match="not_in_channel"):
            await adapter.send(out("e#0"))
        slack.token = "xoxb-revoked"
        with pytest.raises(SendFatal, match="invalid_auth"):
            await adapter.send(out("f#0"))
    assert slack.posted == []


async def test_a_closed_port_is_retryable(slack: FakeSlack) -> None:
    async with opened(slack) as adapter:
        adapter.recovery_window = 0
        await slack.stop()
        with pytest.raises(SendRetryable):
            await adapter.send(out("a#0"))


def test_classify() -> None:
    assert isinstance(classify(200, {"error": "ratelimited"}, {}), SendRetryable)
    assert isinstance(classify(500, {}, {}), SendAmbiguous)
    assert isinstance(classify(200, {"error": "internal_error"}, {}), SendAmbiguous)
    assert isinstance(classify(200, {"error": "invalid_auth"}, {}), SendFatal)
    assert classify(429, None, {"retry-after": ["3"]}).retry_after == 3.0  # type: ignore[attr-defined]


# -- exactly once: the key read back -------------------------------------------------------


async def test_a_send_dropped_after_slack_created_it_is_not_posted_again(slack: FakeSlack) -> None:
    """Created, then the connection drops before the answer: the retry finds the key."""
    async with opened(slack) as adapter:
        adapter.recovery_window = 0
        slack.fail_posts(Failure(status=0, after_store=True))
        with pytest.raises(SendAmbiguous):
            await adapter.send(out("sl:A:msg:C:9#0", "once"))
        sent = await adapter.send(out("sl:A:msg:C:9#0", "once"))
    (message,) = slack.posted
    assert sent.platform_id == message["ts"]
    assert [m for m, _ in slack.log].count("chat.postMessage") == 1


async def test_a_send_dropped_before_slack_created_it_is_posted_by_the_retry(
    slack: FakeSlack,
) -> None:
    async with opened(slack) as adapter:
        adapter.recovery_window = 0
        slack.fail_posts(Failure(status=0))
        with pytest.raises(SendAmbiguous):
            await adapter.send(out("k#0", "once"))
        await adapter.send(out("k#0", "once"))
    assert [m["text"] for m in slack.posted] == ["once"]


async def test_after_a_restart_a_row_left_sending_is_reconciled(slack: FakeSlack) -> None:
    """The previous run posted it and died before recording it: the new run, within its
    recovery window, finds the key in the history (and in a thread, in the replies)."""
    async with opened(slack) as first:
        first.recovery_window = 0
        await first.send(out("sl:A:msg:C:5#0", "said once"))
        root = slack.posted[0]["ts"]
        await first.send(out("sl:A:msg:C:5#1", "threaded once", thread=root))
    async with opened(slack) as second:
        sent = await second.send(out("sl:A:msg:C:5#0", "said once"))
        threaded = await second.send(out("sl:A:msg:C:5#1", "threaded once", thread=root))
        fresh = await second.send(out("sl:A:msg:C:6#0", "new"))
    assert [m["text"] for m in slack.posted] == ["said once", "threaded once", "new"]
    assert sent.platform_id == root
    assert threaded.platform_id == slack.posted[1]["ts"]
    assert fresh.platform_id == slack.posted[2]["ts"]
    calls = [m for m, _ in slack.log]
    assert "conversations.replies" in calls and calls.count("chat.postMessage") == 3


async def test_another_apps_message_with_the_key_does_not_count(slack: FakeSlack) -> None:
    metadata = {"event_type": "tether_outbox", "event_payload": {"key": "k#0"}}
    slack.add_message(CHANNEL_ID, "someone else", bot_id="B0OTHER", metadata=metadata)
    async with opened(slack) as adapter:
        await adapter.send(out("k#0", "ours"))
    assert [m["text"] for m in slack.posted if m.get("bot_id") == BOT_ID] == ["ours"]


# -- mrkdwn ----------------------------------------------------------------------------------


def test_markdown_becomes_mrkdwn() -> None:
    text = (
        "# Plan\n**bold**, *it*, ~~no~~, [docs](https://x.io/a)\n- one\n`a<b` & ```\n**raw**\n```"
    )
    assert to_mrkdwn(text) == (
        "*Plan*\n*bold*, _it_, ~no~, <https://x.io/a|docs>\n• one\n`a&lt;b` &amp; ```\n**raw**\n```"
    )
    assert escape("<@U1> & <!here>") == "&lt;@U1&gt; &amp; &lt;!here&gt;"


@given(st.text())
def test_mrkdwn_never_raises_and_leaves_no_bare_angle_brackets(text: str) -> None:
    converted = to_mrkdwn(text)
    assert "\x00" not in converted and "\x01" not in converted
    assert "<" not in converted.replace("<http", "").replace("<mailto", "")
