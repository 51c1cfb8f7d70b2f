"""The console in a real browser: Playwright driving Debian's headless Chromium against a
real gateway (SQLite store, python-telegram-bot against the fake Bot API, the fake
OpenAI server), all on 127.0.0.1.

Each test logs in through the login form, works the pages as an operator would, and
saves a screenshot of every page it visits under ``test-artifacts/ui/`` (gitignored).
Waits are on conditions (the fake platform's sends, Playwright's auto-retrying
``expect``), never on sleeps.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import ROOT, make_settings
from tests.support.gateway import base_url, running
from tether.adapters.loopback import LoopbackAdapter
from tether.config import Settings
from tether.errors import Fatal
from tether.gateway.builtin.echo import echo_router
from tether.gateway.handler.context import Context
from tether.gateway.handler.routing import Router
from tether.testing.model import FakeModel

CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM), reason=f"no {CHROMIUM} (.ci/run installs Debian's chromium)"
)
if os.path.exists(CHROMIUM):
    from playwright.async_api import Browser, Page, async_playwright, expect

TOKEN = "ui-token-0123456789abcdef"
ARTIFACTS = ROOT / "test-artifacts" / "ui"
UI = {"enabled": True, "token": TOKEN}


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield launched
        finally:
            await launched.close()


async def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


async def log_in(page: Page, base: str) -> None:
    await page.goto(f"{base}/ui/")
    await expect(page).to_have_url(re.compile(r".*/ui/login\?next=.*"))
    await shot(page, "login")
    await page.fill("#password", TOKEN)
    await page.click("#login")
    await expect(page).to_have_url(f"{base}/ui/")


def telegram_settings(tmp_path: Path, fake: FakeTelegram, **sections: Any) -> Settings:
    telegram = {
        "token": fake.token,
        "base_url": fake.base_url,
        "poll_timeout": 1,
        "rate_limits": False,
    }
    return make_settings(
        tmp_path,
        http={"enabled": True, "port": 0, "ui": UI},
        platforms={"telegram": telegram},
        **sections,
    )


# -- log in; the overview moves; events, timelines, jobs, live ---------------------------


async def test_overview_counts_move_with_telegram_traffic_and_every_page_renders(
    tmp_path: Path, fake: FakeTelegram, browser: Browser
) -> None:
    jobs = [{"id": "report", "cron": "0 0 1 1 *", "text": "the yearly report",
             "deliver": ["telegram:42"]}]  # fmt: skip
    settings = telegram_settings(tmp_path, fake, jobs=jobs)
    router = Router("root")
    router.include(echo_router())
    async with running(settings, router) as (gateway, _):
        base = base_url(gateway)
        context = await browser.new_context()
        page = await context.new_page()
        await log_in(page, base)
        await expect(page.locator(".platform[data-platform=telegram]")).to_contain_text("connected")
        received = int(await page.inner_text("#count-received"))
        replies = int(await page.inner_text("#count-replies"))

        live = await context.new_page()  # the same browser session
        await live.goto(f"{base}/ui/live")
        await expect(live.locator("#live-state")).to_have_text("connected")

        fake.push(message=fake.message(42, "hello console"))
        fake.push(message=fake.message(43, "second chat"))
        await fake.wait_for(lambda: len(fake.sent) >= 2)
        # The overview refreshes itself: the counts moved by the two events and replies.
        await expect(page.locator("#count-received")).to_have_text(str(received + 2))
        await expect(page.locator("#count-replies")).to_have_text(str(replies + 2))
        await expect(page.locator("#count-backlog")).to_have_text("0")
        await page.reload()  # the charts are drawn on the server, at each load
        first_chart = page.locator("svg.chart").first
        await expect(first_chart.locator('rect:not([height="0.0"])')).to_have_count(1)
        last_seen = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d")  # last received and sent
        await expect(page.locator(".platform[data-platform=telegram]")).to_contain_text(last_seen)
        await shot(page, "overview")
        # The live page saw the transitions as they happened.
        await expect(live.locator("li[data-event='event.received']")).to_have_count(2)
        await expect(live.locator("li[data-event='outbox.sent']").first).to_be_visible()
        await shot(live, "live")

        # Events: search by conversation, open one, read its timeline.
        await page.click("nav >> text=Events")
        await page.fill("input[name=conversation]", "telegram:42")
        await page.click("form.search button")
        rows = page.locator("tr.event")
        await expect(rows).to_have_count(1)
        await shot(page, "events")
        await rows.locator("a").click()
        timeline = page.locator("ol.timeline")
        await expect(timeline).to_contain_text("received")
        await expect(timeline).to_contain_text("done after 1 attempt")
        await expect(timeline.locator("li.send")).to_contain_text("sent")
        await expect(timeline.locator("li.send")).to_contain_text("hello console")
        await shot(page, "event")

        await page.click("nav >> text=Conversations")
        await expect(page.locator("tbody tr")).to_have_count(2)
        await shot(page, "conversations")

        # Jobs: schedule, next fire, and Run now — the same manual fire as tether jobs run.
        await page.click("nav >> text=Jobs")
        job = page.locator("tr.job[data-job=report]")
        await expect(job).to_contain_text("0 0 1 1 *")
        await expect(job).to_contain_text("-01-01 00:00:00")  # the next fire
        await job.locator("button.run").click()
        await expect(page.locator(".notice")).to_contain_text("cron:report:manual:")
        await fake.wait_for(lambda: any(s["text"] == "the yearly report" for s in fake.sent))
        await page.reload()
        await expect(page.locator("tr.job[data-job=report]")).to_contain_text("(manual)")
        await expect(page.locator("tr.job[data-job=report]")).to_contain_text("done")
        await shot(page, "jobs")
        await context.close()


# -- a dead letter retried from its page reaches the platform ----------------------------


async def test_a_dead_letter_retried_from_its_page_is_answered_on_telegram(
    tmp_path: Path, fake: FakeTelegram, browser: Browser
) -> None:
    broken = {"yes": True}
    router = Router("root")

    @router.text(r"^fragile$")
    async def fragile(ctx: Context) -> None:
        if broken["yes"]:
            raise Fatal("the weather service is down")
        await ctx.reply("fragile answered")

    router.include(echo_router())
    settings = telegram_settings(tmp_path, fake)
    async with running(settings, router) as (gateway, _):
        base = base_url(gateway)
        fake.push(message=fake.message(42, "fragile"))
        await fake.wait_for(lambda: any("went wrong" in s["text"] for s in fake.sent))
        page = await browser.new_page()
        await log_in(page, base)
        await expect(page.locator("#count-dead")).to_have_text("1")
        await page.click("nav >> text=Dead letters")
        letter = page.locator("tr.dead-letter")
        await expect(letter).to_have_count(1)
        await expect(letter).to_contain_text("the weather service is down")
        await shot(page, "dead")

        broken["yes"] = False  # the outage is over
        await letter.locator("button.retry").click()
        await expect(page.locator(".notice")).to_contain_text("Requeued")
        await fake.wait_for(lambda: any(s["text"] == "fragile answered" for s in fake.sent))
        await page.reload()
        await expect(page.locator("tr.dead-letter")).to_have_count(0)
        assert [s["text"] for s in fake.sent].count("fragile answered") == 1
        await page.close()


# -- a fact forgotten on the page is gone from the next prompt ---------------------------


async def test_a_fact_forgotten_on_the_page_is_gone_from_the_next_prompt(
    tmp_path: Path, browser: Browser
) -> None:
    llm = FakeModel(reply=lambda body: "noted")
    await llm.start()
    section = llm.section(timeout=5)
    settings = make_settings(tmp_path, http={"enabled": True, "port": 0, "ui": UI}, llm=section)
    loop = LoopbackAdapter()
    try:
        async with running(settings, adapter=loop) as (gateway, _):
            base = base_url(gateway)
            for text in ("/remember my cat is called Mittens", "/remember I live in Oslo"):
                await loop.say(text, chat="7", key=f"loopback:{uuid.uuid4()}")
            await loop.wait_for_sent(2)
            page = await browser.new_page()
            await log_in(page, base)
            await page.goto(f"{base}/ui/conversation?c=loopback:7")
            facts = page.locator("tr.fact")
            await expect(facts).to_have_count(2)
            # Both are about the person who said them (first person), and the page says so.
            await expect(facts.locator("td.about").first).to_contain_text("about loopback:")
            await shot(page, "conversation")
            mittens = facts.filter(has=page.locator("input[value*=Mittens]"))
            await mittens.locator("button.forget").click()
            await expect(page.locator("tr.fact")).to_have_count(1)
            oslo = page.locator("tr.fact input.fact-text")
            await oslo.fill("I live in Bergen")
            await page.locator("tr.fact button.save").click()
            await expect(page.locator("tr.fact input.fact-text")).to_have_value("I live in Bergen")

            await loop.say("what do you know?", chat="7", key=f"loopback:{uuid.uuid4()}")
            await loop.wait_for_sent(3)
            prompt = llm.requests[-1].system
            assert "Mittens" not in prompt
            assert "Bergen" in prompt and "Oslo" not in prompt
            # The call's tokens are on the overview, from the store's usage rows.
            await page.goto(f"{base}/ui/")
            await expect(page.locator("#count-tokens")).not_to_have_text("0")
            await page.close()
    finally:
        await llm.close()
