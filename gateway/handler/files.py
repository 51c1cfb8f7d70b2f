"""The handler's side of files: what ``ctx.reply(files=...)`` accepts, and storing each
file's bytes in the store's blobs while the handler runs.

Stored before the checkpoint: when the checkpoint commits the outbox rows, the bytes
they name are already durable, so a row never points at nothing. A handler that runs
again stores the same bytes under the same key (their sha256): nothing twice. Kept
apart from ``gateway/core/media.py`` (rows → platform calls), which needs the adapters: the context
imports this module, and must not reach the adapters through it.

What a file may be is decided by its type, never guessed from a string: bytes are sent
as they are; a ``Path`` is a local file, read only inside ``media.allow_paths``
(``local_files.py``); a string is an ``http(s)`` URL, fetched through the guarded client
(``adapters/url_guard.py``: public addresses only, unless ``media.allow_hosts`` says
otherwise), or an error. A string that happens to look like ``/etc/passwd`` or
``../x`` is not read: a handler that passes on what a person or a model said can then
reach no more than a URL can.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, cast
from urllib.parse import unquote, urlsplit

import structlog

from tether import metrics
from tether.adapters.media import DEFAULT_MAX_DOWNLOAD
from tether.adapters.url_guard import URLRefused, fetch_public
from tether.config.schema import MediaConfig
from tether.errors import DownloadError, Fatal, Retryable, TooLarge
from tether.events import Attachment, Event
from tether.files import KINDS, File, OutFile, guess_kind, guess_mime
from tether.gateway.handler.local_files import PathRefused, read_confined
from tether.memory.blobs import MAX_BLOB_BYTES
from tether.memory.roles import BlobStore

log = structlog.get_logger("tether.media")

__all__ = ["DEFAULT_MAX_DOWNLOAD", "Downloader", "File", "FileSpec", "blob_store", "store_files"]


FileSpec = File | str | Path | bytes
_SHOWN = 200


def _is_url(source: object) -> bool:
    return isinstance(source, str) and source[:8].lower().startswith(("http://", "https://"))


def _default_name(source: str | Path | bytes) -> str:
    if isinstance(source, bytes):
        return "file"
    if isinstance(source, str):
        return unquote(urlsplit(source).path.rsplit("/", 1)[-1]) or "file"
    return source.name or "file"


async def _read(spec: File, cap: int, media: MediaConfig) -> bytes:
    source = spec.source
    if isinstance(source, bytes):
        return source
    if isinstance(source, Path):
        return await asyncio.to_thread(read_confined, source, media.allow_paths, cap)
    if not _is_url(source):
        shown = source if len(source) <= _SHOWN else source[:_SHOWN] + "…"
        raise Fatal(
            f"{shown!r} is not an http(s) URL; a local file is passed as a Path"
            " (inside media.allow_paths), never as a string"
        )
    try:
        return await fetch_public(source, cap, media)
    except (URLRefused, TooLarge) as exc:  # another try gets the same answer
        raise Fatal(f"file {_default_name(source)!r}: {exc}") from exc
    except DownloadError as exc:  # a URL that fails now may answer on a retry
        raise Retryable(f"file {_default_name(source)!r}: {exc}") from exc


def _note_refusal(exc: Fatal, platform: str) -> None:
    """A refusal (a path outside media.allow_paths, a private address) is logged and
    counted: an operator sees a handler, or a model through it, reach for what it may not."""
    cause = exc.__cause__ if isinstance(exc.__cause__, URLRefused) else exc
    if isinstance(cause, URLRefused | PathRefused):
        metrics.labelled(metrics.MEDIA, platform, "refused").inc()
        log.warning("media.refused", platform=platform, reason=str(cause))


def blob_store(store: object) -> BlobStore:
    """The store's blob role; every store of Tether's has one (a test's fake may not)."""
    if not callable(getattr(store, "put_blob", None)):
        raise Fatal("this store keeps no files (no put_blob): files cannot be sent")
    return cast(BlobStore, store)


async def store_files(
    store: object,
    specs: Sequence[FileSpec],
    cap: int | None = None,
    platform: str = "",
    media: MediaConfig | None = None,
) -> list[OutFile]:
    """Each file's bytes stored as a blob, and the :class:`OutFile` that names it.
    ``cap`` is the platform's upload limit (its adapter's ``upload_limit``), and never
    above the store's; ``platform`` names it in errors and logs; ``media`` is what local
    paths and URLs may reach (``media:``; without it, no local file and no private host)."""
    media = media or MediaConfig()
    most = min(MAX_BLOB_BYTES, media.max_file_bytes)  # media.max_file_bytes
    cap = most if cap is None else min(cap, most)
    blobs = blob_store(store) if specs else None
    out: list[OutFile] = []
    for index, raw in enumerate(specs):
        if isinstance(raw, bytearray | memoryview):
            raw = bytes(raw)
        if not isinstance(raw, File | str | Path | bytes):
            raise Fatal(
                f"files[{index}]: expected a path, bytes, an http(s) URL or a File,"
                f" not {type(raw).__name__}"
            )
        spec = raw if isinstance(raw, File) else File(raw)
        if spec.kind is not None and spec.kind not in KINDS:
            raise Fatal(f"files[{index}]: kind {spec.kind!r} is not one of {', '.join(KINDS)}")
        try:
            data = await _read(spec, cap, media)
        except Fatal as exc:
            _note_refusal(exc, platform)
            raise Fatal(f"files[{index}]: {exc}") from exc
        except Retryable as exc:
            raise Retryable(f"files[{index}]: {exc}", retry_after=exc.retry_after) from exc
        if len(data) > cap:
            where = f" for {platform}" if platform else ""
            raise Fatal(f"files[{index}]: {len(data)} bytes, over the cap of {cap}{where}")
        if not data:
            raise Fatal(f"files[{index}]: the file is empty (platforms refuse empty files)")
        name = (spec.name or _default_name(spec.source))[-255:]
        kind = spec.kind or guess_kind(name, spec.mime)
        mime = spec.mime or guess_mime(name, kind)
        assert blobs is not None
        key = await blobs.put_blob(data)
        out.append(OutFile(kind=kind, name=name, mime=mime, blob=key, size=len(data)))
        metrics.labelled(metrics.MEDIA, platform, "stored").inc()
        log.info("media.stored", platform=platform, kind=kind, size=len(data), blob=key[:12])
    return out


class Downloader(Protocol):
    async def __call__(self, event: Event, attachment: Attachment, cap: int) -> bytes: ...
