"""The operator's search: ``tether search`` (a subprocess on the store, as an operator
beside a running gateway runs it) and the console's search page. Both see every
conversation, DMs included, where a chat's ``/search`` sees only the asker's.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from pathlib import Path

from tests.gateway.web.test_web_auth import PASSWORD_HASH
from tests.support.config import make_settings, write_config
from tests.support.gateway import base_url, running
from tests.support.processes import TETHER, subprocess_env
from tests.support.web import TOKEN, client, log_in
from tether.testing.model import API_KEY, FakeModel

#: The model's key, configured (a secret of the config) and pasted into a chat by
#: someone: the operator's search shows the turn with the key masked.
SECRET = API_KEY
LLM = FakeModel(url="http://127.0.0.1:9").section()  # named, never called: echo answers
ECHO = {"handler": "echo"}


@dataclass(frozen=True)
class Done:
    returncode: int
    stdout: str
    stderr: str


async def tether(folder: Path, *args: str) -> Done:
    config = write_config(folder, llm=LLM, agent=ECHO)
    proc = await asyncio.create_subprocess_exec(
        TETHER,
        *args,
        "-c",
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=subprocess_env(),
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    done = Done(proc.returncode, out.decode(), err.decode())
    assert "Traceback" not in done.stderr
    return done


async def talk(tmp_path: Path) -> None:
    """Two DMs and a group, through the echo agent (each message and its echo stored)."""
    async with running(make_settings(tmp_path, llm=LLM, agent=ECHO)) as (gateway, loop):
        await loop.say("the harbour festival starts at noon", chat="d1", user="u1")
        await loop.say("港口节中午开始", chat="d2", user="u2", chat_type="dm")
        await loop.say("festival tickets are sold out", chat="g", user="u1", chat_type="group")
        await loop.say(f"my key is {SECRET} for the festival", chat="d1", user="u1")
        await loop.wait_for_sent(4)
        await gateway.drain()


async def test_tether_search_finds_turns_in_every_conversation(tmp_path: Path) -> None:
    await talk(tmp_path)
    found = await tether(tmp_path, "search", "festival")
    assert found.returncode == 0, found.stderr
    header, *lines = found.stdout.splitlines()
    assert header.split()[:3] == ["WHEN", "(UTC)", "CONVERSATION"]
    conversations = {line.split()[2] for line in lines}
    assert "loopback:d1" in conversations and len(conversations) == 2  # the DM and the group
    assert any("harbour festival starts at noon" in line for line in lines)
    assert any("tickets are sold out" in line for line in lines)
    assert SECRET not in found.stdout
    assert any("my key is" in line for line in lines)  # the turn is found, its key masked

    chinese = await tether(tmp_path, "search", "港口节", "--json")
    rows = [json.loads(line) for line in chinese.stdout.splitlines()]
    assert rows and all(row["conversation"] == "loopback:d2" for row in rows)
    assert "港口节中午开始" in rows[0]["text"] and rows[0]["created"].startswith("20")

    narrowed = await tether(tmp_path, "search", "festival", "--conversation", "loopback:d2")
    assert narrowed.stdout.strip() == "nothing found for 'festival' in loopback:d2"


async def test_tether_search_refuses_what_it_cannot_do_without_a_traceback(
    tmp_path: Path,
) -> None:
    await talk(tmp_path)
    limit = await tether(tmp_path, "search", "festival", "--limit", "0")
    assert limit.returncode != 0 and "--limit must be 1..200 (got 0)" in limit.stderr
    blank = await tether(tmp_path, "search", "  ")
    assert blank.returncode != 0 and "say what to look for" in blank.stderr
    punctuation = await tether(tmp_path, "search", '"', "AND", "*")  # FTS syntax, not a query
    assert punctuation.returncode == 0, punctuation.stderr


async def test_the_console_search_page_finds_every_conversation_behind_its_login(
    tmp_path: Path,
) -> None:
    await talk(tmp_path)
    ui = {"enabled": True, "token": TOKEN, "password_hash": PASSWORD_HASH}
    settings = make_settings(
        tmp_path, llm=LLM, agent=ECHO, http={"enabled": True, "port": 0, "ui": ui}
    )
    async with running(settings) as (gateway, _loop), client() as session:
        base = base_url(gateway)
        async with session.get(f"{base}/ui/search?q=festival") as response:
            assert response.url.path == "/ui/login"  # no session: nothing shown
        await log_in(session, base)
        async with session.get(f"{base}/ui/search", params={"q": "festival"}) as response:
            page = await response.text()
        async with session.get(
            f"{base}/ui/search", params={"q": "festival", "c": "loopback:d2"}
        ) as response:
            narrowed = await response.text()
        async with session.get(f"{base}/ui/search", params={"q": "<b>港口节</b>"}) as response:
            escaped = await response.text()
    hits = re.findall(r'<tr class="hit">(.*?)</tr>', page, re.S)
    assert any("harbour festival starts at noon" in hit for hit in hits)
    assert any("tickets are sold out" in hit for hit in hits)
    assert SECRET not in page and any("my key is" in hit for hit in hits)
    assert '<a href="/ui/search" aria-current="page">Search</a>' in page
    assert "Nothing found for <bdi>festival</bdi> in <bdi>loopback:d2</bdi>." in narrowed
    assert "<b>港口节</b>" not in escaped and "&lt;b&gt;" in escaped
    found = re.findall(r'<tr class="hit">(.*?)</tr>', escaped, re.S)
    assert any("港口节中午开始" in hit for hit in found)
