"""The web chat (``platforms.web``) through the full pipeline, in a real browser and over
plain HTTP: it answers; a reload shows each message and answer once; a message resent
after a reload is deduplicated on its key; a message typed while the gateway is down
waits in the browser and is answered once the gateway is back on the same store.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.config import ROOT, db_rows, make_settings
from tests.support.web import TOKEN, client, log_in
from tether.config import Settings
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters

if TYPE_CHECKING:
    from playwright.async_api import Page

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts" / "ui"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def chat_settings(tmp_path: Path, port: int = 0, **sections: Any) -> Settings:
    return make_settings(
        tmp_path,
        http={"enabled": True, "port": port, "ui": {"enabled": True, "token": TOKEN}},
        platforms={"web": {"enabled": True}},
        **sections,
    )


@asynccontextmanager
async def chat_page(base: str) -> AsyncIterator[Page]:
    """Chromium on the web chat, logged in with the console's token."""
    from playwright.async_api import async_playwright, expect

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await browser.new_page()
            await page.goto(f"{base}/ui/chat")
            await page.fill("#password", TOKEN)
            await page.click("#login")
            await expect(page).to_have_url(f"{base}/ui/chat")
            yield page
        finally:
            await browser.close()


async def start(settings: Settings) -> Gateway:
    gateway = Gateway(settings, build_adapters(settings))
    await gateway.start()
    return gateway


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    running = await start(chat_settings(tmp_path))
    try:
        yield running
    finally:
        await running.stop()


# -- over plain HTTP ------------------------------------------------------------------


async def test_a_message_is_accepted_once_per_id_and_its_answer_read_back(
    gateway: Gateway, tmp_path: Path
) -> None:
    assert gateway.http is not None
    base = f"http://127.0.0.1:{gateway.http.port}"
    async with client() as session:
        csrf = await log_in(session, base)
        headers = {"X-CSRF-Token": csrf}
        message = {"chat": "c1", "id": "m1", "text": "echo me"}
        results = []
        for _ in range(3):  # the page resending after a reload
            async with session.post(
                f"{base}/ui/api/chat/send", json=message, headers=headers
            ) as response:
                assert response.status == 200
                results.append((await response.json())["new"])
        assert results == [True, False, False]
        await gateway.drain()
        async with session.get(f"{base}/ui/api/chat/log?chat=c1") as response:
            lines = (await response.json())["lines"]
        assert [(line["role"], line["text"]) for line in lines] == [
            ("user", "echo me"),
            ("agent", "echo me"),
        ]
        for bad in ({"chat": "c/1", "id": "m", "text": "x"}, {"chat": "c", "id": "m", "text": " "},
                    {"chat": "c", "id": "m"}, ["not", "an", "object"]):  # fmt: skip
            async with session.post(
                f"{base}/ui/api/chat/send", json=bad, headers=headers
            ) as response:
                assert response.status == 400, bad
    assert db_rows(tmp_path, "SELECT key, status FROM inbox") == [("web:c1:m1", "done")]


# -- in the browser -------------------------------------------------------------------


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no {CHROMIUM} (.ci/run installs it)")
async def test_the_chat_answers_and_survives_a_reload_and_a_gateway_restart(
    tmp_path: Path,
) -> None:
    from playwright.async_api import expect

    settings = chat_settings(tmp_path, free_port())
    base = f"http://127.0.0.1:{settings.http.port}"
    gateway = await start(settings)
    try:
        async with chat_page(base) as page:
            await page.fill("#chat-text", "hello web")
            await page.click("#chat-send")
            answers = page.locator("#chat li.agent")
            await expect(answers).to_have_text(["hello web"])

            # A reload shows the conversation from the store: each line once.
            await page.reload()
            await expect(page.locator("#chat li.user")).to_have_text(["hello web"])
            await expect(answers).to_have_text(["hello web"])

            # A message the gateway already has, resent after a reload (its answer was
            # lost on the way back): the same key, so no second answer.
            key = await page.locator("#chat li.user").get_attribute("data-key")
            assert key is not None
            chat_id, message_id = key.split(":")[1:]
            pending = json.dumps([{"id": message_id, "text": "hello web"}])
            await page.evaluate(
                "([k, v]) => localStorage.setItem(k, v)",
                [f"tether-chat-pending-{chat_id}", pending],
            )
            await page.reload()
            await page.wait_for_function(
                f"() => localStorage.getItem('tether-chat-pending-{chat_id}') === '[]'"
            )
            await expect(answers).to_have_text(["hello web"])

            # The gateway goes away; a message typed meanwhile waits in the browser.
            await gateway.stop()
            await page.fill("#chat-text", "are you there?")
            await page.click("#chat-send")
            await expect(page.locator("#chat li.pending")).to_have_text(["are you there?"])
            gateway = await start(settings)  # the same store and port, a new process state
            await expect(answers).to_have_text(["hello web", "are you there?"])
            await page.reload()  # still logged in: the session is signed, not in memory
            await expect(page.locator("#chat li.user")).to_have_text(
                ["hello web", "are you there?"]
            )
            await expect(answers).to_have_text(["hello web", "are you there?"])
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "chat.png"), full_page=True)
    finally:
        await gateway.stop()
    sent = db_rows(tmp_path, "SELECT key, status FROM outbox ORDER BY seq")
    assert len(sent) == 2 and all(status == "sent" for _key, status in sent)
    assert all(re.fullmatch(r"web:[0-9a-f]{32}:[0-9a-f]{32}#0", key) for key, _ in sent)


async def test_chat_api_without_the_web_platform_is_404(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path, http={"enabled": True, "port": 0, "ui": {"enabled": True, "token": TOKEN}}
    )
    running = await start(settings)
    try:
        assert running.http is not None
        base = f"http://127.0.0.1:{running.http.port}"
        async with client() as session:
            csrf = await log_in(session, base)
            async with session.post(
                f"{base}/ui/api/chat/send",
                json={"chat": "a", "id": "b", "text": "c"},
                headers={"X-CSRF-Token": csrf},
            ) as response:
                assert response.status == 404
            async with session.get(f"{base}/ui/chat") as response:
                assert response.status == 404
    finally:
        await running.stop()


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no {CHROMIUM} (.ci/run installs it)")
async def test_a_streamed_answer_shows_while_written_then_once_in_full(tmp_path: Path) -> None:
    from playwright.async_api import expect

    from tether.testing.model import FakeModel
    from tether.testing.stream import Pacing

    answer = " ".join(f"word{i}" for i in range(40))
    pacing = Pacing(pieces=16, gap=0.15, hold_after=10)
    model = FakeModel(reply=lambda body: answer, pacing=pacing)
    await model.start()
    llm = model.section()
    settings = chat_settings(tmp_path, llm=llm)
    gateway = await start(settings)
    try:
        assert gateway.http is not None
        base = f"http://127.0.0.1:{gateway.http.port}"
        async with chat_page(base) as page:
            await page.fill("#chat-text", "tell me a long story")
            await page.click("#chat-send")
            await pacing.held.wait()  # the model is mid-answer, and stays there
            preview = page.locator("#chat li.agent.streaming")
            await expect(preview).to_have_count(1)
            await expect(preview).to_contain_text("word0")
            shown = await preview.inner_text()
            assert len(shown) < len(answer)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "chat-streaming.png"), full_page=True)
            pacing.release()
            await expect(page.locator("#chat li.agent")).to_have_text([answer])
            await expect(page.locator("#chat li.streaming")).to_have_count(0)
    finally:
        await gateway.stop()
        await model.close()
    assert db_rows(tmp_path, "SELECT status FROM outbox") == [("sent",)]
