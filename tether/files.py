"""Files in a reply: what an outbox row says about one, and what an adapter is handed.

A reply's file is stored before the reply is: ``ctx.reply(files=...)`` writes the bytes
to the store's content-addressed blobs (key: their sha256) while the handler runs, and
the outbox row carries only an :class:`OutFile` naming that blob. So a checkpoint can
never commit a row that points at nothing, and a resend after a crash uploads the very
same bytes. An adapter never reads the store: the outbox loads the blobs and hands it
:class:`Upload` values (the bytes and what they are).

``kind`` is what the platforms tell apart: a ``photo`` is shown inline, a ``voice``
note plays as one (Telegram wants OGG/Opus), ``audio`` is a track, ``video`` a clip,
and a ``document`` anything else.
"""

from __future__ import annotations

import mimetypes
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

FileKind = Literal["photo", "document", "voice", "audio", "video"]
KINDS: tuple[FileKind, ...] = ("photo", "document", "voice", "audio", "video")
#: The kernel's pseudo-filesystems: their files are not files to send (no size, no end,
#: or the process's own secrets: ``/proc/self/environ``), so no ``media.allow_paths``
#: folder may be one of them or inside one, nor may a path resolve into one.
PSEUDO_FILESYSTEMS = ("/proc", "/sys", "/dev")


def in_pseudo_filesystem(path: str) -> bool:
    """Whether the absolute, normalized ``path`` is one of :data:`PSEUDO_FILESYSTEMS`
    or inside one."""
    return any(path == root or path.startswith(root + "/") for root in PSEUDO_FILESYSTEMS)


class OutFile(BaseModel):
    """One file of an outbound message, as the outbox row stores it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    kind: FileKind = "document"
    #: The file name the person sees (Telegram and Feishu show it; Discord links it).
    name: str = Field(min_length=1, max_length=255)
    mime: str = "application/octet-stream"
    #: sha256 (hex) of the bytes in the store's blobs.
    blob: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)


@dataclass(frozen=True, slots=True)
class Upload:
    """One file as an adapter sends it: the row's :class:`OutFile` and its bytes."""

    kind: FileKind
    name: str
    mime: str
    data: bytes


@dataclass(frozen=True, slots=True)
class File:
    """A file to send: ``source`` is the bytes, a local file as a :class:`~pathlib.Path`
    (read only inside ``media.allow_paths``), or an ``http(s)`` URL as a string (fetched
    once, while the handler runs, from a public address unless ``media.allow_hosts``
    allows the host, and stored like bytes).

    A string is always a URL, never a path: a handler that passes on a string a person
    or a model chose cannot make Tether read ``/proc/self/environ`` or ``../secrets``.

    ``kind`` defaults from the name's type (image → ``photo``, else ``document``); say
    ``"voice"`` for a voice note. ``name`` defaults from the path or URL.
    """

    source: str | Path | bytes
    name: str | None = None
    kind: FileKind | None = None
    mime: str | None = None


def guess_mime(name: str, kind: FileKind) -> str:
    """The MIME type a file name suggests, else a sensible one for its kind."""
    guessed, _ = mimetypes.guess_type(name)
    if guessed:
        return guessed
    return {
        "photo": "image/jpeg",
        "voice": "audio/ogg",
        "audio": "audio/mpeg",
        "video": "video/mp4",
    }.get(kind, "application/octet-stream")


def guess_kind(name: str, mime: str | None = None) -> FileKind:
    """``photo`` for an image, ``video``/``audio`` by type, else ``document``.

    A voice note is never guessed: say ``kind="voice"`` (it changes how it is shown).
    """
    mime = mime or mimetypes.guess_type(name)[0] or ""
    if mime in ("image/jpeg", "image/png", "image/webp", "image/gif"):
        return "photo"
    if mime.startswith("video/"):
        return "video"
    if mime.startswith("audio/"):
        return "audio"
    return "document"
