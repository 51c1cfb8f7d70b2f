"""The lines of an export carry whatever people wrote: any text, any file name a handler
or a model chose, any attachment a platform described. Whatever they are, the JSONL (in a
folder and in the zip) validates against docs/export.schema.json and reads back to the
very same values, and every file lands inside ``files/``."""

from __future__ import annotations

import asyncio
import io
import zipfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.gateway.recall.test_export import valid
from tether.events import Attachment
from tether.files import OutFile
from tether.memory.blobs import blob_key
from tether.memory.people.archive import bundle, read_lines
from tether.memory.people.export import Export, ReplyFile, Sent, Subject
from tether.memory.records import Fact, Turn

PERSON = "telegram:12345"


class Blobs:
    """The blob role over a dict: what ``bundle`` reads the files' bytes from."""

    def __init__(self, data: dict[str, bytes]) -> None:
        self.data = data

    async def put_blob(self, data: bytes) -> str:
        self.data[blob_key(data)] = data
        return blob_key(data)

    async def blob(self, key: str) -> bytes | None:
        return self.data.get(key)


files = st.lists(
    st.tuples(st.binary(min_size=1, max_size=64), st.text(min_size=1, max_size=300)), max_size=4
)


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(st.text(), min_size=1, max_size=6),
    sent=files,
    names=st.lists(st.none() | st.text(), max_size=3),
)
def test_any_text_and_file_name_round_trip_and_validate(
    texts: list[str], sent: list[tuple[bytes, str]], names: list[str | None]
) -> None:
    turns = [
        Turn(
            PERSON,
            "user" if i % 2 == 0 else "assistant",
            text,
            f"tg:7:{i}",
            created=1.5 + i,
            id=i + 1,
        )
        for i, text in enumerate(texts)
    ]
    facts = [Fact(1, PERSON, texts[0], 3, created=2.0, owner=PERSON, in_dm=True)]
    replies = [
        ReplyFile(PERSON, "tg:7:0", OutFile(name=name[:255], blob=blob_key(data), size=len(data)))
        for data, name in sent
    ]
    attachments = [
        Sent(PERSON, "tg:7:0", PERSON, 3.0, Attachment(kind="document", name=name, size=None))
        for name in names
    ]
    export = Export(
        Subject(identities=(PERSON,)),
        turns=turns,
        facts=facts,
        files=replies,
        attachments=attachments,
    )
    store = Blobs({blob_key(data): data for data, _name in sent})
    made = asyncio.run(bundle(store, export, created=10.0))
    valid(made.lines)

    with zipfile.ZipFile(io.BytesIO(made.zip())) as archive:
        inside = {name: archive.read(name) for name in archive.namelist()}
    lines = list(read_lines(inside.pop("export.jsonl")))
    assert lines == made.lines
    assert [line["text"] for line in lines if line["type"] == "turn"] == texts
    assert [line["name"] for line in lines if line["type"] == "attachment"] == names
    for line in lines:
        if line["type"] == "file":
            path = line["path"]
            assert Path(path).parts[0] == "files" and len(Path(path).parts) == 2
            assert ".." not in Path(path).parts and blob_key(inside[path]) == line["sha256"]
    assert set(inside) == {line["path"] for line in lines if line["type"] == "file"}
