"""The audit of approvals and waits, read back from a SQLite store that holds them.

One store is made per module by a real gateway (:class:`tether.testing.Bot` on a
SQLite file, the fake OpenAI server asking for an approval-gated tool): approvals that
were approved, denied, expired, cancelled and one still open, whose arguments carry a
configured secret, markup and a right-to-left override; and a ``ctx.ask`` question that
was answered. Then:

- ``tether approvals`` in a subprocess on that store (a copy per test): the table, the
  JSON lines, ``--pending``, ``show`` with the arguments, the exit codes, secrets masked
  and control characters escaped;
- a gateway with the console on a copy of it, read by a plain aiohttp client: the
  approvals page (open ones with their arguments, decided ones with who and how), and
  the event page's timeline with the turn's waits and its moves told as waits, not as
  an operator's retries.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.config import make_settings, write_config
from tests.support.gateway import base_url, running
from tests.support.processes import TETHER, subprocess_env
from tests.support.web import TOKEN, client, log_in
from tether import Context, Router
from tether.memory.waits import Wait
from tether.testing import Bot, FakeModel, asks_for, tool_call
from tether.testing.model import API_KEY

ADMIN = {"access": {"admins": ["loopback:boss"], "allow": ["*"]}}
#: What the open approval's arguments carry: a secret, markup, a bidi override.
HOSTILE = f"<script>x</script>\u202e{API_KEY}"


def gated() -> Router:
    router = Router()

    @router.tool(approval=True)
    async def wipe(ctx: Context, path: str) -> str:
        """Delete the folder at path."""
        return f"wiped {path}"

    @router.command("city")
    async def city(ctx: Context) -> None:
        answer = await ctx.ask("Which city?")
        await ctx.reply(f"Off to {answer.text}.")

    return router


def reply(body: dict[str, Any]) -> Any:
    """The model wants ``wipe`` of the path the person named; with a tool's result in
    the messages (approved, denied, expired, cancelled), it is done."""
    messages = body["messages"]
    if any(m.get("role") == "tool" for m in messages):
        return "Done."
    said = next(m["content"] for m in reversed(messages) if m.get("role") == "user")
    path = str(said).split()[-1]
    arguments = json.dumps({"path": HOSTILE if path == "/d" else path}, ensure_ascii=False)
    return asks_for(tool_call("wipe", arguments))  # the raw U+202E, not its escape


@dataclass(frozen=True)
class Made:
    """The store the module reads, and what it holds."""

    folder: Path
    llm: dict[str, Any]
    #: wait by the path it was for (``/a`` ... ``/e``) and ``city`` for the question.
    waits: dict[str, Wait]


async def fill(folder: Path) -> Made:
    config = {**ADMIN, "memory": {"store": f"sqlite:///{folder / 'tether.db'}"}}
    async with FakeModel(reply=reply) as model, Bot(gated(), model=model, config=config) as bot:
        [card] = await bot.say("wipe /a", user="u1")
        await bot.press(card.button("Approve"), under=card, user="boss")
        [card] = await bot.say("wipe /b", user="u2")
        await bot.press(card.button("Deny"), under=card, user="boss")
        await bot.say("wipe /c", user="u3")
        assert await bot.gateway.waits.expire(now=10**12) == 1
        await bot.say("/help", user="u3")  # the expired turn has run on
        await bot.say("wipe /e", user="u5")
        # /cancel ends questions, not approvals: this one is ended the way it would be
        [open_e] = await bot.gateway.store.open_waits("loopback:u5")
        assert await bot.gateway.waits.end(open_e, "cancelled", None, "operator")
        await bot.say("/help", user="u5")  # the cancelled turn has run on
        [card] = await bot.say("wipe /d", user="u4")
        assert card.text.startswith("Approval needed")
        await bot.say("/city", user="u6")
        await bot.say("Paris", user="u6")
        section = model.section()
        found = await bot.gateway.store.waits()
    waits: dict[str, Wait] = {}
    for wait in found:
        name = "city" if wait.kind == "ask" else json.loads(wait.detail["arguments"])["path"]
        waits["/d" if name == HOSTILE else name] = wait
    assert sorted(waits) == ["/a", "/b", "/c", "/d", "/e", "city"], waits
    return Made(folder, section, waits)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    """Made once: a sync fixture, so the gateway runs on a loop of its own."""
    return asyncio.run(fill(tmp_path_factory.mktemp("audit")))


@pytest.fixture
def store(made: Made, tmp_path: Path) -> Path:
    """A copy of the made store in the test's folder (``tether.db``, as the configs
    of tests/support name it)."""
    for path in made.folder.glob("tether.db*"):
        shutil.copy(path, tmp_path / path.name)
    return tmp_path


def approvals(folder: Path, made: Made, *runs: list[str]) -> list[Done]:
    """``tether approvals ARGS`` for each of ``runs``, at once (each is a process)."""
    config = write_config(folder, llm=made.llm)  # the secret is a configured one
    procs = [
        subprocess.Popen(
            [TETHER, "approvals", *args, "-c", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
        )
        for args in runs
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        done.append(Done(proc.returncode, out, err))
    return done


@dataclass(frozen=True)
class Done:
    returncode: int
    stdout: str
    stderr: str


# -- tether approvals ---------------------------------------------------------------


def test_list_shows_each_approval_with_its_outcome_and_who_decided(made: Made, store: Path) -> None:
    [done] = approvals(store, made, ["list"])
    assert done.returncode == 0, done.stderr
    header, *lines = done.stdout.splitlines()
    assert header.split()[:4] == ["WHEN", "(UTC)", "TOOL", "HASH"]
    assert "DECIDED BY" in header
    by_wait = {line.split()[-1]: line for line in lines}
    waits = made.waits
    assert set(by_wait) == {waits[p].id for p in ("/a", "/b", "/c", "/d", "/e")}  # no ask
    outcomes = {p: by_wait[waits[p].id].split()[4] for p in ("/a", "/b", "/c", "/d", "/e")}
    assert outcomes == {
        "/a": "approved",
        "/b": "denied",
        "/c": "expired",
        "/d": "pending",
        "/e": "cancelled",
    }
    assert "loopback:boss" in by_wait[waits["/a"].id] and "loopback:u1" in by_wait[waits["/a"].id]
    assert "loopback:boss" not in by_wait[waits["/c"].id]
    assert waits["/b"].detail["hash"] in by_wait[waits["/b"].id]
    # newest first
    assert lines[0].split()[-1] == waits["/d"].id
    assert "store: sqlite:///" in done.stderr


def test_pending_and_json_lines(made: Made, store: Path) -> None:
    done, every = approvals(store, made, ["list", "--pending", "--json"], ["list", "--json"])
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    row = json.loads(line)
    assert row["wait"] == made.waits["/d"].id and row["outcome"] == "pending"
    assert row["tool"] == "wipe" and row["asked_by"] == "loopback:u4"
    assert row["decided_by"] is None and row["requested"].endswith("+00:00")
    assert API_KEY not in done.stdout and "***" in row["arguments"]
    assert "\u202e" not in done.stdout and "\u202e" in row["arguments"]  # escaped, valid JSON

    rows = [json.loads(line) for line in every.stdout.splitlines()]
    assert {r["outcome"] for r in rows} == {"approved", "denied", "expired", "pending", "cancelled"}
    [approved] = [r for r in rows if r["outcome"] == "approved"]
    assert approved["decided_by"] == "loopback:boss" and approved["decided_name"] == "boss"
    assert approved["decided"] >= approved["requested"]


def test_show_prints_the_arguments_scrubbed_and_an_unknown_id_exits_1(
    made: Made, store: Path
) -> None:
    pending = made.waits["/d"]
    done, approved, missing, question, unsaid = approvals(
        store,
        made,
        ["show", pending.id],
        ["show", made.waits["/a"].id],
        ["show", "nope#wait:0"],
        ["show", made.waits["city"].id],  # an ask, not an approval
        ["show"],
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["outcome"] == "pending" and shown["hash"] == pending.detail["hash"]
    masked = json.dumps({"path": HOSTILE.replace(API_KEY, "***")}, ensure_ascii=False)
    assert shown["arguments"] == masked
    assert shown["question"].startswith("Approval needed") and shown["approvers"] == ["admins"]
    assert API_KEY not in done.stdout + done.stderr
    assert "\u202e" not in done.stdout  # a terminal is not turned around by it

    decided = json.loads(approved.stdout)
    assert decided["outcome"] == "approved" and decided["answer"]["decision"] == "approved"
    assert missing.returncode == 1 and "no approval 'nope#wait:0'" in missing.stderr
    assert question.returncode == 1 and "no approval" in question.stderr
    assert unsaid.returncode == 2 and "WAIT_ID" in unsaid.stderr


def test_no_approvals_and_no_store(made: Made, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    [absent] = approvals(empty, made, ["list"])
    assert absent.returncode == 1 and "no store at" in absent.stderr  # and nothing made
    assert not (empty / "tether.db").exists()

    async def nothing() -> None:  # a store with no approval in it
        settings = make_settings(empty)
        async with running(settings):
            pass

    asyncio.run(nothing())
    done, pending = approvals(empty, made, ["list"], ["list", "--pending"])
    assert (done.returncode, done.stdout) == (0, "no approvals\n")
    assert pending.stdout == "no pending approvals\n"


# -- the console --------------------------------------------------------------------


UI = {"enabled": True, "token": TOKEN}
Get = Callable[..., Awaitable[tuple[int, str, Any]]]


@asynccontextmanager
async def console(folder: Path) -> AsyncIterator[Get]:
    """A gateway with the console on the store in ``folder``, and a logged-in GET."""
    settings = make_settings(folder, http={"enabled": True, "port": 0, "ui": UI})
    async with running(settings) as (gateway, _), client() as session:
        base = base_url(gateway)
        await log_in(session, base)

        async def get(path: str, **params: str) -> tuple[int, str, Any]:
            async with session.get(f"{base}{path}", params=params) as response:
                return response.status, await response.text(), response.headers

        yield get


def rows(page_html: str, css: str) -> list[str]:
    """The text of each ``<tr>`` whose class has ``css``: its cells apart, tags stripped."""
    found = re.findall(rf'<tr class="[^"]*{css}[^"]*"[^>]*>(.*?)</tr>', page_html, re.S)
    cells = [re.sub(r"<[^>]+>", "", re.sub(r"</?t[dh][^>]*>", " ", row)) for row in found]
    return [" ".join(html.unescape(row).split()) for row in cells]


async def test_the_approvals_page_lists_open_and_decided_ones(made: Made, store: Path) -> None:
    async with console(store) as get:
        status, body, headers = await get("/ui/approvals")
    assert status == 200
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert "object-src 'none'" in headers["Content-Security-Policy"]
    assert '<a href="/ui/approvals" aria-current="page">Approvals</a>' in body
    [pending] = rows(body, "pending")
    d = made.waits["/d"]
    assert "wipe" in pending and d.detail["hash"] in pending and "loopback:u4" in pending
    assert d.chat in pending
    # markup escaped, the secret masked, the right-to-left override inside a <bdi>
    assert "<script>" not in body and "&lt;script&gt;x&lt;/script&gt;" in body
    assert API_KEY not in body and "***" in pending
    assert re.search(r"<bdi>[^<]*&lt;script&gt;[^<]*\u202e", body)
    decided = rows(body, "outcome-")
    outcomes = sorted(row.split()[2] for row in decided)
    assert outcomes == ["approved", "cancelled", "denied", "expired"], decided
    [approved] = [row for row in decided if " approved " in row]
    assert "boss (loopback:boss)" in approved and made.waits["/a"].detail["hash"] in approved
    assert f"/ui/event?key={quote(made.waits['/a'].event_key)}" in body


def timeline(page_html: str) -> list[str]:
    listed = page_html.split('<ol class="timeline">', 1)[1].split("</ol>", 1)[0]
    return [
        " ".join(html.unescape(re.sub(r"<[^>]+>", "", item)).split())
        for item in re.findall(r"<li[^>]*>(.*?)</li>", listed, re.S)
    ]


def in_order(texts: list[str], wanted: list[str]) -> None:
    at = 0
    for text in wanted:
        found = next((i for i in range(at, len(texts)) if text in texts[i]), None)
        assert found is not None, (text, texts)
        at = found + 1


async def test_the_event_page_shows_a_turns_waits_and_who_ended_them(
    made: Made, store: Path
) -> None:
    approved, city = made.waits["/a"], made.waits["city"]
    async with console(store) as get:
        status, body, _ = await get("/ui/event", key=approved.event_key)
        assert status == 200
        texts = timeline(body)
        in_order(
            texts,
            [
                "received",
                f"approval requested for wipe (hash {approved.detail['hash']}), approvers admins",
                "suspended after attempt 1: waiting for a person",
                "wipe approved by boss (loopback:boss)",
                "the wait ended; it runs again",
                "attempt 2 begun",
            ],
        )
        assert not any("retried by the operator" in t or "since the retry" in t for t in texts)

        _, body, _ = await get("/ui/event", key=city.event_key)
        in_order(timeline(body), ["asked Which city?", "answered by u6 (loopback:u6): Paris"])
        _, body, _ = await get("/ui/event", key=made.waits["/c"].event_key)
        assert any("expired: nobody answered before its deadline" in t for t in timeline(body))
        _, body, _ = await get("/ui/event", key=made.waits["/e"].event_key)
        assert any("cancelled" in t for t in timeline(body))
        # the events page finds the turn still waiting for its approval
        _, body, _ = await get("/ui/events", status="waiting")
        assert made.waits["/d"].event_key in html.unescape(body)
        assert approved.event_key not in html.unescape(body)


def test_check_refuses_approval_cards_to_a_platform_that_is_not_enabled(tmp_path: Path) -> None:
    config = write_config(tmp_path, agent={"tools": {"approvals": {"to": "telegram:-100123"}}})
    done = subprocess.run(
        [TETHER, "check", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env(),
    )
    assert done.returncode == 1
    assert "agent.tools.approvals.to: 'telegram:-100123': platform 'telegram' is not enabled" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr
