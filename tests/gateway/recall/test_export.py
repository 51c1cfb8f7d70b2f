"""Export (``tether export``, ``/export``): an export round-trips. Its JSONL validates
against the documented schema (docs/export.schema.json, with ``jsonschema``: the file the
docs publish is the contract itself, not a model written beside it that could drift from
it) and holds every turn of the conversation, exactly as the store's history has it.

Turns are written through the real pipeline: the loopback platform (``tether.testing.Bot``)
on a SQLite file, the LLM agent on the real ``openai`` client against the fake model,
whose script makes it save a reminder; a plugin replies with a file whose name tries to
climb out of the export's folder. Two people: Ada (``u1``: DMs and her session in a group)
and Ben (``u2``: his DM and his session there), so that a person's export is checked to
hold none of another person's rows.
"""

from __future__ import annotations

import asyncio
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from tests.support.config import ROOT, write_config
from tether import Context, File, Router
from tether.adapters.base import Adapter
from tether.adapters.console import ConsoleAdapter
from tether.adapters.loopback import LoopbackAdapter
from tether.gateway.builtin import export as builtin_export
from tether.gateway.builtin.export import sends_documents
from tether.gateway.cli import main
from tether.gateway.inspection.export import identity_of
from tether.memory.blobs import blob_key
from tether.memory.people.archive import read_lines, safe_name
from tether.memory.people.export import all_turns
from tether.memory.store import Store
from tether.testing import Bot
from tether.testing.model import Body, FakeModel, asks_for, tool_call

SCHEMA = json.loads((ROOT / "docs" / "export.schema.json").read_text())
VALIDATOR = Draft202012Validator(SCHEMA)
ADA, BEN = "loopback:u1", "loopback:u2"
CHART = b"\x89PNG not really a chart"
#: Texts a line must carry unharmed: newlines, a line separator, quotes, other scripts.
ODD = 'two\nlines, a \u2028 separator, "quotes", \\ and 会议地点 🙂'


def script(body: Body) -> object:
    messages = body.get("messages", [])
    if messages and messages[-1].get("role") == "tool":
        return "Done."
    said = str(messages[-1].get("content", "")) if messages else ""
    if "remind me" in said:
        return asks_for(tool_call("schedule", {"text": "stretch", "at": "2027-06-01T09:00"}))
    return f"Noted: {said[:40]}"


def plugin() -> Router:
    router = Router("charts")

    @router.command("chart")
    async def chart(ctx: Context) -> None:
        """a chart, as a file"""
        await ctx.reply("your chart", files=[File(CHART, name="../../.bashrc chart.png")])

    return router


def bot(tmp_path: Path, model: FakeModel) -> Bot:
    model.reply = script
    store = {"store": f"sqlite:///{tmp_path / 'tether.db'}"}
    return Bot(plugin(), config={"memory": store}, model=model)


async def talk(chat: Bot) -> None:
    """Ada in her DM and in the group, Ben in his DM and in the group."""
    await chat.say("hello, I am Ada")
    await chat.say(ODD)
    await chat.say("/remember I'm vegetarian")
    await chat.say("please remind me to stretch")
    await chat.say("/chart")
    await chat.send_file(b"ada's notes", name="notes.txt", mime="text/plain", caption="my notes")
    await chat.say("hi all, Ada here", group=True)
    await chat.say("/remember I take the train", group=True)
    await chat.say("hello, I am Ben, zqxbendm", user="u2")
    await chat.say("/remember I'm zqxbenfact", user="u2")
    await chat.say("Ben in the group, zqxbengroup", user="u2", group=True)


def valid(lines: list[dict[str, Any]]) -> None:
    """Each line is one the schema documents; the meta line first, and its counts true."""
    for line in lines:
        errors = sorted(VALIDATOR.iter_errors(line), key=str)
        assert not errors, (line, [e.message for e in errors])
    assert lines[0]["type"] == "meta"
    assert all(line["type"] != "meta" for line in lines[1:])
    counted = {
        kind: sum(1 for line in lines if line["type"] == kind) for kind in lines[0]["counts"]
    }
    assert counted == lines[0]["counts"]


def turns_of(lines: list[dict[str, Any]], conversation: str | None = None) -> list[tuple[Any, ...]]:
    return [
        (
            line["id"],
            line["conversation"],
            line["role"],
            line["text"],
            line["created"],
            line["event"],
        )
        for line in lines
        if line["type"] == "turn" and conversation in (None, line["conversation"])
    ]


async def stored(store: Store, *conversations: str) -> list[tuple[Any, ...]]:
    """The store's own history of ``conversations``, every turn, as the lines carry it."""
    turns = []
    for conversation in conversations:
        history = await store.history(conversation, 100_000)
        assert history == await all_turns(store, conversation)
        turns += history
    turns.sort(key=lambda t: t.id)
    return [(t.id, t.conversation, t.role, t.text, t.created, t.event_key) for t in turns]


async def cli(*args: str) -> int:
    return await asyncio.to_thread(main, ["export", *args])


def test_the_published_schema_is_a_valid_json_schema() -> None:
    Draft202012Validator.check_schema(SCHEMA)


async def test_an_export_by_conversation_and_by_person_round_trips(
    tmp_path: Path, model: FakeModel, capsys: pytest.CaptureFixture[str]
) -> None:
    async with bot(tmp_path, model) as chat:
        await talk(chat)
        store = chat.gateway.store
        ada_dm, ada_group = chat.conversation(), chat.conversation(group=True)
        ben_dm, ben_group = chat.conversation("u2"), chat.conversation("u2", group=True)
        config = write_config(tmp_path)

        out = tmp_path / "dm"
        assert await cli("--conversation", ada_dm, "--out", str(out), "-c", str(config)) == 0
        lines = list(read_lines((out / "export.jsonl").read_bytes()))
        valid(lines)
        assert lines[0]["subject"] == {"kind": "conversation", "conversation": ada_dm}
        assert turns_of(lines) == await stored(store, ada_dm)
        assert ODD in [line["text"] for line in lines if line["type"] == "turn"]
        [reminder] = [line for line in lines if line["type"] == "reminder"]
        assert reminder["text"] == "stretch" and reminder["by"] == ADA
        [chart] = [line for line in lines if line["type"] == "file"]
        assert chart["name"] == "../../.bashrc chart.png" and chart["bytes"] == len(CHART)
        assert chart["path"].startswith("files/") and ".." not in chart["path"].split("/")
        assert (out / chart["path"]).read_bytes() == CHART
        [notes] = [line for line in lines if line["type"] == "attachment"]
        assert (notes["name"], notes["from"], notes["kind"]) == ("notes.txt", ADA, "document")

        out = tmp_path / "ada"
        assert await cli(ADA, "--out", str(out), "-c", str(config)) == 0
        assert f"exported {ADA} to" in capsys.readouterr().out
        lines = list(read_lines((out / "export.jsonl").read_bytes()))
        valid(lines)
        assert lines[0]["subject"] == {"kind": "person", "identities": [ADA]}
        assert turns_of(lines) == await stored(store, ada_dm, ada_group)
        assert turns_of(lines, ada_group)  # her own session in the group
        facts = {line["text"]: line["about"] for line in lines if line["type"] == "fact"}
        assert facts == {"I'm vegetarian": ADA, "I take the train": ADA}
        everything = (out / "export.jsonl").read_text()
        assert "zqxben" not in everything  # Ben's DM, his facts, his group session
        assert {line["conversation"] for line in lines if "conversation" in line} <= {
            ada_dm,
            ada_group,
        }

        out = tmp_path / "ben"
        assert await cli(BEN, "--out", str(out), "-c", str(config)) == 0
        lines = list(read_lines((out / "export.jsonl").read_bytes()))
        valid(lines)
        assert turns_of(lines) == await stored(store, ben_dm, ben_group)
        assert "Ada" not in (out / "export.jsonl").read_text()


async def test_the_cli_refuses_a_bad_person_and_a_folder_in_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    assert await cli("telegram", "-c", str(config)) != 0
    assert "PLATFORM:USER" in capsys.readouterr().err
    assert await cli("-c", str(config)) != 0
    assert await cli(ADA, "--conversation", "x:y", "-c", str(config)) != 0
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    assert await cli(ADA, "--out", str(busy), "-c", str(config)) != 0
    assert "not an empty folder" in capsys.readouterr().err
    assert (busy / "keep.txt").read_text() == "mine"


def unzipped(data: bytes) -> tuple[list[dict[str, Any]], dict[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    return list(read_lines(files.pop("export.jsonl"))), files


async def test_export_in_a_dm_sends_a_zip_that_holds_a_valid_export(
    tmp_path: Path, model: FakeModel
) -> None:
    async with bot(tmp_path, model) as chat:
        await talk(chat)
        store = chat.gateway.store
        ada_dm, ada_group = chat.conversation(), chat.conversation(group=True)
        expected = await stored(store, ada_dm, ada_group)
        [reply] = await chat.say("/export")
        [document] = reply.files
        assert document.kind == "document" and document.name.endswith(".zip")
        assert "messages" in reply.text
        lines, files = unzipped(document.data)
        valid(lines)
        assert turns_of(lines) == expected
        assert "zqxben" not in json.dumps(lines)
        paths = {line["path"]: line["sha256"] for line in lines if line["type"] == "file"}
        assert set(files) == set(paths) and list(files.values()) == [CHART]

        # the next export leaves the first one out: exports do not nest
        [again] = await chat.say("/export")
        lines, files = unzipped(again.files[0].data)
        valid(lines)
        assert list(files.values()) == [CHART]
        assert turns_of(lines) == await stored(store, ada_dm, ada_group)

        # the zips are reply files of her DM: erasing her erases them
        assert await store.blob(blob_key(document.data)) == document.data
        await chat.say("/forgetme yes")
        assert await store.blob(blob_key(document.data)) is None
        [empty] = await chat.say("/export")
        lines, files = unzipped(empty.files[0].data)
        valid(lines)
        assert lines[0]["counts"] == dict.fromkeys(lines[0]["counts"], 0) and not files


async def test_export_in_a_group_answers_in_text(tmp_path: Path, model: FakeModel) -> None:
    async with bot(tmp_path, model) as chat:
        await chat.say("hello", group=True)
        [reply] = await chat.say("/export", group=True)
        assert reply.files == () and "direct message" in reply.text
        [listing] = await chat.say("/help")
        assert "/export - " in listing.text


async def test_a_rerun_after_a_failure_builds_once_and_sends_once(
    tmp_path: Path, model: FakeModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = []
    real = builtin_export.read_export

    async def counted(store: Any, subject: Any) -> Any:
        built.append(subject)
        return await real(store, subject)

    monkeypatch.setattr(builtin_export, "read_export", counted)
    async with bot(tmp_path, model) as chat:
        await chat.say("hello")
        store = chat.gateway.store
        blob, failed = store.blob, []

        async def blob_failing_once(key: str) -> bytes | None:
            if not failed:
                failed.append(key)
                raise RuntimeError("the store went away for a moment")
            return await blob(key)

        monkeypatch.setattr(store, "blob", blob_failing_once)
        replies = await chat.say("/export")
        assert failed and len(built) == 1  # the second run got the zip the first built
        assert [len(reply.files) for reply in replies] == [1]
        valid(unzipped(replies[0].files[0].data)[0])


class TextOnly(LoopbackAdapter):
    """A platform that cannot send files (the console's and the web chat's way)."""

    send_files = Adapter.send_files


async def test_a_platform_without_documents_or_under_the_size_is_told_in_text(
    tmp_path: Path, model: FakeModel
) -> None:
    chat = bot(tmp_path, model)
    chat.adapter = TextOnly(edits=True)
    async with chat:
        await chat.say("hello")
        [reply] = await chat.say("/export")
        assert reply.files == () and "cannot send a document" in reply.text
        assert f"tether export {ADA}" in reply.text
    (tmp_path / "small").mkdir()
    small = bot(tmp_path / "small", model)
    small.adapter.upload_limit = 200
    async with small:
        await small.say("hello " * 100)
        [reply] = await small.say("/export")
        assert reply.files == () and "more than I can send" in reply.text
        assert f"tether export {ADA}" in reply.text


def test_a_platform_without_documents_is_told_so() -> None:
    assert sends_documents(LoopbackAdapter())
    assert not sends_documents(ConsoleAdapter())
    assert not sends_documents(None)
    assert type(ConsoleAdapter()).send_files is Adapter.send_files


@given(st.text())
def test_any_text_is_a_valid_identity_or_refused_with_the_form(text: str) -> None:
    try:
        identity = identity_of(text)
    except ValueError as exc:
        assert "PLATFORM:USER" in str(exc)
        return
    platform, _, user = identity.partition(":")
    assert platform and user and platform == platform.lower()
    assert identity_of(identity) == identity  # a parsed identity parses to itself
    assert Draft202012Validator(SCHEMA["$defs"]["identity"]).is_valid(identity)


@given(st.text(min_size=1))
def test_any_file_name_becomes_one_harmless_segment(name: str) -> None:
    safe = safe_name(name)
    assert safe and "/" not in safe and "\\" not in safe and not safe.startswith(".")
    assert len(safe) <= 100 and safe not in ("", ".", "..")
