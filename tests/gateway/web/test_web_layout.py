"""What people wrote stays inside its box, in a real browser: Chromium (Debian's, through
Playwright) on every console page, measuring.

- Long unbroken strings (3,000 characters: a message, a chat id, a fact, an error, a
  key) wrap inside their cells and bubbles: no element reaches past the viewport, the
  page never scrolls sideways (it was up to 50,000 px wide).
- A right-to-left override (U+202E) in a sender's name or a chat id turns only that
  value around: the message quoted after the name, and the Live page's later fields,
  still read left to right (measured: the first letter is drawn left of the last).
- The web chat's bubble holds a 3,000-character word, and a message the gateway refuses
  is shown as not sent, with the reason, instead of vanishing.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.config import ROOT, make_settings
from tests.support.gateway import base_url, running
from tests.support.web import TOKEN
from tether.adapters.loopback import LoopbackAdapter
from tether.errors import Fatal
from tether.gateway.handler.context import Context
from tether.gateway.handler.routing import Router

CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM), reason=f"no {CHROMIUM} (.ci/run installs Debian's chromium)"
)
if os.path.exists(CHROMIUM):
    from playwright.async_api import Browser, Page, async_playwright, expect

ARTIFACTS = ROOT / "test-artifacts" / "ui"
RLO = "\u202e"
WORD = "W" * 3000  # one unbroken 3,000-character string
WIDTH = 1280

#: Every element of the page's main part that reaches past the viewport, and the page's
#: own scroll width when it is wider than the viewport (details opened first).
OVERFLOW = """() => {
  for (const d of document.querySelectorAll("details")) d.open = true;
  const width = document.documentElement.clientWidth;
  const out = [];
  if (document.documentElement.scrollWidth > width + 1)
    out.push(["page", document.documentElement.scrollWidth]);
  for (const el of document.querySelectorAll("main *, nav *")) {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > width + 1)
      out.push([el.tagName, el.className, Math.round(r.right)]);
  }
  return out.slice(0, 8);
}"""

#: ``[x of needle's first letter, x of its last]`` as drawn, for the first text node
#: under ``selector`` that holds ``needle``: left to right when the first is smaller.
ORDER = """([selector, needle]) => {
  const root = document.querySelector(selector);
  const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let node = walk.nextNode(); node; node = walk.nextNode()) {
    const at = node.data.indexOf(needle);
    if (at < 0) continue;
    const x = (i) => { const r = document.createRange(); r.setStart(node, i); r.setEnd(node, i + 1);
                       return r.getBoundingClientRect().left; };
    return [x(at), x(at + needle.length - 1)];
  }
  return null;
}"""


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


def boom_router() -> Router:
    router = Router("boom")

    @router.text(r"^boom")
    async def boom(ctx: Context) -> None:
        await ctx.step("fetch", lambda: f"fetched {WORD}")
        raise Fatal(f"the service said {WORD}")

    return router


async def inside(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"layout-{name}.png"), full_page=True)
    assert await page.evaluate(OVERFLOW) == [], name


async def left_to_right(page: Page, selector: str, needle: str) -> None:
    found: Any = await page.evaluate(ORDER, [selector, needle])
    assert found is not None, (selector, needle)
    first, last = found
    assert first < last, f"{needle!r} under {selector} is drawn right to left: {found}"


async def test_long_strings_and_overrides_stay_inside_every_page(
    tmp_path: Path, browser: Browser
) -> None:
    jobs = [{"id": "report", "cron": "0 0 1 1 *", "text": WORD, "deliver": ["loopback:7"]}]
    settings = make_settings(
        tmp_path,
        http={"enabled": True, "port": 0, "ui": {"enabled": True, "token": TOKEN}},
        platforms={"web": {"enabled": True}},
        jobs=jobs,
    )
    loopback = LoopbackAdapter()
    async with running(settings, None, loopback, plugins=[boom_router()]) as (gateway, loop):
        base = base_url(gateway)
        await loop.say(WORD, chat="7", user=f"{RLO}Mallory")
        await loop.say(f"/remember {WORD}", chat="7")
        await loop.say(f"boom {WORD}", chat="7")
        quoted = await loop.say("plain words here", chat=f"{RLO}room", user=f"{RLO}Mallory")
        await loop.say("a long chat", chat="C" * 3000)
        await loop.wait_for_sent(5)  # four answers and a dead notice

        context = await browser.new_context(viewport={"width": WIDTH, "height": 900})
        page = await context.new_page()
        await page.goto(f"{base}/ui/login")
        await inside(page, "login")
        await page.fill("#password", TOKEN)
        await page.click("#login")
        await expect(page).to_have_url(f"{base}/ui/")

        live = await context.new_page()
        await live.goto(f"{base}/ui/live")
        await expect(live.locator("#live-state")).to_have_text("connected")
        await loop.say("live words", chat=f"{RLO}room", user="ann")

        pages = {
            "overview": "/ui/",
            "events": "/ui/events",
            "event-long": f"/ui/events?conversation={'C' * 100}",
            "dead": "/ui/dead",
            "conversations": "/ui/conversations",
            "conversation": "/ui/conversation?c=loopback:7",
            "conversation-long": f"/ui/conversation?c=loopback:{'C' * 3000}",
            "jobs": "/ui/jobs",
            "approvals": "/ui/approvals",
            "missing": f"/ui/event?key={WORD}",
            "rtl-conversation": f"/ui/conversation?c={quote('loopback:' + RLO + 'room')}",
        }
        for name, path in pages.items():
            await page.goto(base + path)
            await inside(page, name)
        # Each event's own page: the long one, the dead one, the one quoted after the name.
        for number, row in enumerate(await gateway.store.find_events(limit=10)):
            await page.goto(f"{base}/ui/event?key={quote(row.key)}")
            await inside(page, f"event-{number}")

        # The name's override stays in the name: the quoted message reads left to right.
        await page.goto(f"{base}/ui/event?key={quote(quoted.key)}")
        await expect(page.locator("main > p q")).to_contain_text("plain words here")
        await left_to_right(page, "main > p q", "plain words here")
        await left_to_right(page, "main", "Conversation")

        # The Live page: the chat id's override stays in its field; the next ones read on.
        line = live.locator("li[data-event='event.received']").filter(has_text="live words")
        await expect(line).to_have_count(0)  # the text is not logged, the key is
        line = live.locator("li[data-event='event.received']").filter(has_text="room")
        await expect(line).to_have_count(1)
        await live.evaluate(
            "() => document.querySelector(\"li[data-event='event.received']\").id = 'seen'"
        )
        await left_to_right(live, "#seen", "message")  # kind=message, after the key
        await inside(live, "live")
        await context.close()


async def test_the_chat_bubble_holds_a_long_word_and_a_refusal_is_shown(
    tmp_path: Path, browser: Browser
) -> None:
    settings = make_settings(
        tmp_path,
        http={"enabled": True, "port": 0, "ui": {"enabled": True, "token": TOKEN}},
        platforms={"web": {"enabled": True}},
    )
    async with running(settings) as (gateway, _):
        base = base_url(gateway)
        page = await browser.new_page(viewport={"width": WIDTH, "height": 900})
        await page.goto(f"{base}/ui/chat")
        await page.fill("#password", TOKEN)
        await page.click("#login")
        await expect(page).to_have_url(f"{base}/ui/chat")
        await page.fill("#chat-text", WORD)
        await page.click("#chat-send")
        await expect(page.locator("#chat li.agent")).to_have_count(1)  # the echo
        await inside(page, "chat")
        # Each bubble holds its text: nothing of it reaches past the bubble's own box.
        spill = await page.evaluate(
            "() => [...document.querySelectorAll('#chat li')]"
            ".map((li) => li.scrollWidth - li.clientWidth)"
        )
        assert len(spill) == 2 and all(extra <= 1 for extra in spill), spill

        # A message no store can hold (half a surrogate pair): shown as not sent, kept.
        await page.evaluate(
            "() => { document.getElementById('chat-text').value = 'half \\ud800 pair'; }"
        )
        await page.click("#chat-send")
        refused = page.locator("#chat li.refused")
        await expect(refused).to_have_count(1)
        await expect(refused).to_contain_text("not sent")
        await expect(refused).to_contain_text("surrogate")
        await page.reload()  # it stays shown: the browser keeps it
        await expect(page.locator("#chat li.refused")).to_have_count(1)
        await expect(page.locator("#chat li.pending")).to_have_count(0)
        await page.close()
