"""What the console says happened, and will happen, to an event retried from its pages:
the timeline of a dead letter retried and then answered shows each attempt, the death
and the retry in time order; a snapshot is escaped once; Retry says what the pipeline
will do when no model can answer, not "it runs again now".

A real gateway (SQLite, the loopback platform, the scripted OpenAI-compatible model) and
a plain aiohttp client reading the pages as HTML.
"""

from __future__ import annotations

import asyncio
import html
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.config import make_settings
from tests.support.gateway import base_url, running
from tests.support.web import TOKEN, client, log_in
from tether.config import Settings
from tether.errors import Fatal, Retryable
from tether.gateway.app import Gateway
from tether.gateway.handler.context import Context
from tether.gateway.handler.routing import Router
from tether.testing.model import FakeModel

UI = {"enabled": True, "token": TOKEN}


def ui_settings(tmp_path: Path, **sections: Any) -> Settings:
    return make_settings(tmp_path, http={"enabled": True, "port": 0, "ui": UI}, **sections)


def timeline_lines(page: str) -> list[tuple[str, str]]:
    """``(time, text)`` of each line of the page's timeline, tags stripped."""
    listed = page.split('<ol class="timeline">', 1)[1].split("</ol>", 1)[0]
    lines = []
    for item in re.findall(r"<li[^>]*>(.*?)</li>", listed, re.S):
        when = re.search(r'<span class="when">([^<]*)</span>', item)
        text = html.unescape(re.sub(r"<[^>]+>", "", item))
        lines.append((when[1] if when else "", " ".join(text.split())))
    return lines


async def until(check: Callable[[], Any], what: str) -> None:
    """Wait for a condition the test cannot await directly (the store's state)."""
    async with asyncio.timeout(20):
        while not await check():  # noqa: ASYNC110  (a row in another process's store)
            await asyncio.sleep(0.02)


async def test_a_retried_dead_letter_shows_each_attempt_its_death_and_its_retry(
    tmp_path: Path,
) -> None:
    runs = {"n": 0}
    router = Router("root")

    @router.text(r"^fragile")
    async def fragile(ctx: Context) -> None:
        runs["n"] += 1
        await ctx.step("fetch", lambda: "<b>forecast</b> & more")
        if runs["n"] == 1:
            raise Retryable("the weather service timed out")
        if runs["n"] == 2:
            raise Fatal("the weather service is down")
        await ctx.reply("fragile answered")

    async with running(ui_settings(tmp_path), router) as (gateway, loop), client() as session:
        base = base_url(gateway)
        event = await loop.say("fragile <weather>", chat="5")
        await loop.wait_for_sent(1)  # the dead notice
        csrf = await log_in(session, base)
        async with session.get(f"{base}/ui/dead") as response:
            dead_page = await response.text()
        # The snapshot is JSON escaped once, by the page: < is &lt;, never \u003c.
        snapshot = dead_page.split("<summary>Snapshots</summary>", 1)[1]
        assert "&lt;b&gt;forecast&lt;/b&gt; &amp; more" in snapshot
        assert "\\u003c" not in snapshot and "\\u0026" not in snapshot

        form = {"csrf": csrf, "key": event.key}
        async with session.post(f"{base}/ui/dead/retry", data=form) as response:
            assert "Requeued" in await response.text()
        await loop.wait_for_sent(2)  # the answer, after the retry
        async with session.get(f"{base}/ui/event", params={"key": event.key}) as response:
            lines = timeline_lines(await response.text())

    texts = [text for _, text in lines]
    expected = [
        "received",
        "attempt 1 failed; it runs again at",
        "attempt 2 begun",
        "dead after 2 attempt(s): Fatal: the weather service is down",
        "send",  # the dead notice, written with the death
        "retried by the operator",
        "done after 1 attempt(s) since the retry",
        "send",  # the answer
    ]
    at = 0
    for wanted in expected:  # in this order, steps and LLM calls between them
        found = next((i for i in range(at, len(texts)) if wanted in texts[i]), None)
        assert found is not None, (wanted, texts)
        at = found + 1
    assert "the weather service timed out" in texts[1]
    assert "fragile answered" in texts[-1]
    times = [when for when, _ in lines]
    assert times == sorted(times), lines
    assert not any(text.startswith("done after 3") for text in texts)


def broken_then_asking(broken: dict[str, bool]) -> Router:
    """``fragile`` dies while ``broken``; afterwards it asks the model. Anything else asks
    the model at once."""
    router = Router("root")

    @router.text(r"^fragile$")
    async def fragile(ctx: Context) -> None:
        if broken["yes"]:
            raise Fatal("the weather service is down")
        answer = await ctx.llm.chat([{"role": "user", "content": "forecast?"}])
        await ctx.reply(answer.text)

    @router.text(r".")
    async def ask(ctx: Context) -> None:
        answer = await ctx.llm.chat([{"role": "user", "content": ctx.event.text}])
        await ctx.reply(answer.text)

    return router


async def retry_notice(gateway: Gateway, key: str) -> str:
    async with client() as session:
        base = base_url(gateway)
        csrf = await log_in(session, base)
        form = {"csrf": csrf, "key": key}
        async with session.post(f"{base}/ui/dead/retry", data=form) as response:
            page = await response.text()
    found = re.search(r'<p class="notice" role="status">(.*?)</p>', page, re.S)
    assert found, page
    return html.unescape(re.sub(r"<[^>]+>", "", found[1]))


async def test_retry_says_the_turn_waits_while_every_breaker_is_open(tmp_path: Path) -> None:
    """The breaker opened on another chat's 500; the retried turn asks the model and
    waits in retry_wait for the probe, ~30 s. "It runs again now" was false."""
    model = FakeModel(reply=lambda body: "sunny")
    await model.start()
    llm = {**model.section(timeout=5), "circuit_breaker": {"failures": 1, "cooldown": 30}}
    broken = {"yes": True}
    settings = ui_settings(tmp_path, llm=llm)
    try:
        async with running(settings, broken_then_asking(broken)) as (gateway, loop):
            dead = await loop.say("fragile", chat="1")
            await loop.wait_for_sent(1)  # its dead notice
            model.fail(500, times=1)
            other = await loop.say("what now?", chat="2")
            await model.wait_for_requests(1)  # the 500 that opened the breaker
            await until(
                lambda: _status_is(gateway, other.key, "retry_wait"), "the other chat waits"
            )
            broken["yes"] = False
            notice = await retry_notice(gateway, dead.key)
            # Drawn before the lane took it ("no model ... can answer for N s more") or
            # after ("waits until ... (in N s) ...: every circuit breaker is open").
            assert not notice.endswith("it runs again now."), notice
            assert "circuit breaker" in notice and "wait" in notice, notice
            seconds = float(re.search(r"(\d+) s", notice)[1])  # type: ignore[index]
            # ... and that is what happens: it waits in retry_wait for as long as it said.
            await until(lambda: _status_is(gateway, dead.key, "retry_wait"), "it waits")
            row = await gateway.store.inbox_row(dead.key)
            assert row is not None and row.retry_at is not None
            assert abs((row.retry_at - time.time()) - seconds) < 5, (notice, row.retry_at)
            assert 15 < seconds <= 30
    finally:
        await model.close()


async def test_retry_says_it_runs_now_when_a_model_can_answer(tmp_path: Path) -> None:
    model = FakeModel(reply=lambda body: "sunny")
    await model.start()
    broken = {"yes": True}
    try:
        settings = ui_settings(tmp_path, llm=model.section(timeout=5))
        async with running(settings, broken_then_asking(broken)) as (gateway, loop):
            dead = await loop.say("fragile", chat="1")
            await loop.wait_for_sent(1)
            broken["yes"] = False
            notice = await retry_notice(gateway, dead.key)
            assert re.search(r"it runs again now\.$|it ran again and is done\.$", notice), notice
            delivered = await loop.wait_for_sent(2)
            assert delivered[-1].message.text == "sunny"
    finally:
        await model.close()


async def _status_is(gateway: Gateway, key: str, status: str) -> bool:
    row = await gateway.store.inbox_row(key)
    return row is not None and row.status == status
