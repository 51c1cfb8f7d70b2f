"""A person's export on every store (in memory, SQLite, PostgreSQL), across their linked
identities and in a chat they share with another person (``group_sessions: shared``):
every turn of their DMs on both identities, only the turns of their own messages in the
shared chat, and nothing of the other person, on each store alike.

Through the real pipeline (``tether.testing.Bot`` on the loopback platform, the LLM
agent against the fake model); the lines validated against docs/export.schema.json.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.recall.test_export import stored, turns_of, unzipped, valid
from tether.memory.people.archive import bundle
from tether.memory.people.export import Subject, read_export
from tether.testing import Bot
from tether.testing.model import Body, FakeModel

ADA, ADA_TOO, BEN = "loopback:u1", "loopback:u3", "loopback:u2"


def answer(body: Body) -> str:
    messages = body.get("messages", [])
    return f"Noted: {str(messages[-1].get('content', ''))[:30]}" if messages else "Noted."


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tether.db'}"
    return str(request.getfixturevalue("pg_dsn"))


async def test_a_linked_person_in_a_shared_chat_gets_their_own_rows_on_every_store(
    store_url: str, model: FakeModel
) -> None:
    model.reply = answer
    config: dict[str, Any] = {"memory": {"store": store_url}, "agent": {"group_sessions": "shared"}}
    async with Bot(config=config, model=model) as chat:
        await chat.say("hello from my first account")
        [offer] = await chat.say("/link")
        code = re.search(r"/link (\S+)", offer.text)
        assert code, offer.text
        [linked] = await chat.say(f"/link {code.group(1)}", user="u3")
        assert linked.text.startswith("Linked")
        await chat.say("and hello from my second account", user="u3")
        await chat.say("/remember I'm zqxadafact", user="u3")
        await chat.say("Ada says hi to the group", group=True)
        await chat.say("Ben says zqxbengroup", user="u2", group=True)
        await chat.say("my DM is private: zqxbendm", user="u2")
        await chat.say("/remember I'm zqxbenfact", user="u2")
        await chat.say("Ada again, in the group", user="u3", group=True)

        store = chat.gateway.store
        group = chat.conversation(group=True)
        assert group == chat.conversation("u2", group=True)  # one session, shared
        history = await store.history(group, 1000)
        ada_keys = {t.event_key for t in history if t.role == "user" and "Ada" in t.text}
        assert len(ada_keys) == 2
        in_group = [
            (t.id, t.conversation, t.role, t.text, t.created, t.event_key)
            for t in history
            if t.event_key in ada_keys
        ]
        mine = await stored(store, chat.conversation(), chat.conversation("u3"))
        expected = sorted(mine + in_group)

        identities = await store.identities(ADA)
        assert set(identities) == {ADA, ADA_TOO}
        made = await bundle(store, await read_export(store, Subject(identities=identities)))
        valid(made.lines)
        assert turns_of(made.lines) == expected
        facts = [line for line in made.lines if line["type"] == "fact"]
        assert [(f["text"], f["about"]) for f in facts] == [("I'm zqxadafact", ADA_TOO)]
        assert "zqxben" not in made.jsonl().decode()

        # the operator's export of the shared chat holds everyone's turns there
        whole = await bundle(store, await read_export(store, Subject(conversation=group)))
        valid(whole.lines)
        assert turns_of(whole.lines) == await stored(store, group)

        # /export from the second account: the same person, the same turns
        [reply] = await chat.say("/export", user="u3")
        lines, _files = unzipped(reply.files[0].data)
        valid(lines)
        assert lines[0]["subject"]["identities"] == [ADA_TOO, ADA]
        assert turns_of(lines) == expected


async def test_the_operators_export_of_a_group_holds_each_persons_session_in_it(
    store_url: str, model: FakeModel
) -> None:
    """With ``group_sessions: per_user`` (the default) a group's turns live in each
    person's own session of it: ``--conversation GROUP`` exports all of them, and no DM."""
    model.reply = answer
    async with Bot(config={"memory": {"store": store_url}}, model=model) as chat:
        await chat.say("Ada in the group: zqxadagroup", group=True)
        await chat.say("Ben in the group: zqxbengroup", user="u2", group=True)
        await chat.say("Ben's DM: zqxbendm", user="u2")
        store = chat.gateway.store
        sessions = chat.conversation(group=True), chat.conversation("u2", group=True)
        assert sessions[0] != sessions[1]
        group = sessions[0].rpartition(":u")[0]
        assert sessions[1].startswith(group + ":u")

        whole = await bundle(store, await read_export(store, Subject(conversation=group)))
        valid(whole.lines)
        assert turns_of(whole.lines) == await stored(store, *sessions)
        text = whole.jsonl().decode()
        assert "zqxadagroup" in text and "zqxbengroup" in text
        assert "zqxbendm" not in text
