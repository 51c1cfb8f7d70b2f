"""How an export is written: ``export.jsonl`` (one JSON object a line) and the files
beside it under ``files/``, as a folder (``tether export``) or a zip (``/export``).

The lines follow docs/export.schema.json (docs/export.md): a ``meta`` line first (the
schema version, whose export, when it was made, how many of each), then one line per
``turn``, ``fact``, ``reminder``, ``file`` and ``attachment``. Times are Unix seconds, as
the store keeps them, so an export compares exactly with the store it came from. A
field is never added, renamed or dropped within one :data:`SCHEMA` version: the schema
forbids unknown fields, and a reader can rely on exactly those it documents.

A file's bytes go to ``files/{sha256[:16]}-{name}``, the name reduced to letters, digits,
``.``, ``-`` and ``_`` (a reply file's name is what a handler or a model chose; inside
a zip it must not be a path that climbs out, ``../../.bashrc``). The same bytes under
the same name are written once, however many replies carried them; ``path`` is null
when the store no longer has the bytes.
"""

from __future__ import annotations

import io
import json
import re
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.memory.people.export import Export, ReplyFile, Sent
from tether.memory.records import Fact, Turn
from tether.memory.reminders import Reminder
from tether.memory.roles import BlobStore

#: The version of the lines' shape (``meta.schema``), docs/export.schema.json's.
SCHEMA = 1
LINES = "export.jsonl"
FILES = "files"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_NAME_MAX = 100


@dataclass(slots=True)
class Bundle:
    """An export as written: its lines and the files beside them (path → bytes)."""

    lines: list[dict[str, Any]]
    files: dict[str, bytes] = field(default_factory=dict)

    def jsonl(self) -> bytes:
        return "".join(
            json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n"
            for line in self.lines
        ).encode()

    def write(self, folder: Path) -> Path:
        """``export.jsonl`` and ``files/`` in ``folder`` (made if missing); the JSONL's path."""
        folder.mkdir(parents=True, exist_ok=True)
        for path, data in self.files.items():
            target = folder / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        lines = folder / LINES
        lines.write_bytes(self.jsonl())
        return lines

    def zip(self) -> bytes:
        """The same as one zip: ``export.jsonl`` and ``files/``, compressed."""
        created = float(self.lines[0]["created"]) if self.lines else time.time()
        stamp = time.gmtime(max(created, 315532800.0))[:6]  # a zip's dates start in 1980
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            for path, data in [(LINES, self.jsonl()), *sorted(self.files.items())]:
                info = zipfile.ZipInfo(path, date_time=stamp)
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, data)
        return out.getvalue()


def safe_name(name: str) -> str:
    """``name`` as one harmless path segment (see the module)."""
    cleaned = _UNSAFE.sub("_", name).lstrip(".")[-_NAME_MAX:]
    return cleaned if cleaned.strip("_") else "file"


async def bundle(store: BlobStore, export: Export, created: float | None = None) -> Bundle:
    """``export`` as lines, with the bytes of its files read from ``store``."""
    created = time.time() if created is None else created
    files: dict[str, bytes] = {}
    owner: dict[str, str] = {}  # path → sha256: two blobs never share a path
    file_lines = []
    for reply in export.files:
        path = f"{FILES}/{reply.file.blob[:16]}-{safe_name(reply.file.name)}"
        if owner.get(path, reply.file.blob) != reply.file.blob:
            path = f"{FILES}/{reply.file.blob}-{safe_name(reply.file.name)}"
        if path not in files:
            data = await store.blob(reply.file.blob)
            if data is None:
                file_lines.append(_file(reply, None))
                continue
            files[path] = data
            owner[path] = reply.file.blob
        file_lines.append(_file(reply, path))
    lines: list[dict[str, Any]] = [
        {
            "type": "meta",
            "schema": SCHEMA,
            "subject": export.subject.as_json(),
            "created": created,
            "counts": export.counts(),
        },
        *(_turn(turn) for turn in export.turns),
        *(_fact(fact) for fact in export.facts),
        *(_reminder(reminder) for reminder in export.reminders),
        *file_lines,
        *(_attachment(sent) for sent in export.attachments),
    ]
    return Bundle(lines, files)


def _turn(turn: Turn) -> dict[str, Any]:
    return {
        "type": "turn",
        "id": turn.id,
        "conversation": turn.conversation,
        "role": turn.role,
        "text": turn.text,
        "created": turn.created,
        "event": turn.event_key,
    }


def _fact(fact: Fact) -> dict[str, Any]:
    return {
        "type": "fact",
        "id": fact.id,
        "text": fact.text,
        "about": fact.owner,
        "conversation": fact.conversation,
        "created": fact.created,
        "in_dm": fact.in_dm,
    }


def _reminder(reminder: Reminder) -> dict[str, Any]:
    r = reminder
    return {
        "type": "reminder",
        "id": r.id,
        "conversation": r.conversation,
        "target": r.target,
        "text": r.text,
        "prompt": r.prompt,
        "cron": r.cron,
        "at": r.at,
        "timezone": r.timezone,
        "status": r.status,
        "by": r.sender or None,
        "created": r.created,
        "updated": r.updated,
    }


def _file(reply: ReplyFile, path: str | None) -> dict[str, Any]:
    f = reply.file
    return {
        "type": "file",
        "name": f.name,
        "sha256": f.blob,
        "bytes": f.size,
        "mime": f.mime,
        "kind": f.kind,
        "conversation": reply.conversation,
        "event": reply.event,
        "path": path,
    }


def _attachment(sent: Sent) -> dict[str, Any]:
    a = sent.attachment
    return {
        "type": "attachment",
        "conversation": sent.conversation,
        "event": sent.event,
        "from": sent.sender,
        "created": sent.created,
        "kind": a.kind,
        "name": a.name,
        "mime": a.mime,
        "bytes": a.size,
    }


def read_lines(data: bytes) -> Iterator[dict[str, Any]]:
    """The objects of an ``export.jsonl`` (for a reader, and the tests). Lines end at
    ``\\n`` only: a text may hold U+2028 and the like, which ``str.splitlines`` would
    cut at."""
    for line in data.decode().split("\n"):
        if line.strip():
            yield json.loads(line)
