"""The handler's side of files: what ``ctx.reply(files=...)`` accepts, and storing each
file's bytes in the store's blobs while the handler runs.

Stored before the checkpoint: when the checkpoint commits the outbox rows, the bytes
they name are already durable, so a row never points at nothing. A handler that runs
again stores the same bytes under the same key (their sha256): nothing twice. Kept
apart from ``gateway/core/media.py`` (rows → platform calls), which needs the adapters: the context
imports this module, and must not reach the adapters through it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, cast
from urllib.parse import unquote, urlsplit

import structlog

from tether import metrics
from tether.adapters.media import DEFAULT_MAX_DOWNLOAD, fetch
from tether.errors import DownloadError, Fatal, Retryable, TooLarge
from tether.events import Attachment, Event
from tether.files import KINDS, File, OutFile, guess_kind, guess_mime
from tether.memory.blobs import MAX_BLOB_BYTES
from tether.memory.roles import BlobStore

log = structlog.get_logger("tether.media")

__all__ = ["DEFAULT_MAX_DOWNLOAD", "Downloader", "File", "FileSpec", "blob_store", "store_files"]


FileSpec = File | str | Path | bytes


def _is_url(source: object) -> bool:
    return isinstance(source, str) and source.startswith(("http://", "https://"))


def _default_name(source: str | Path | bytes) -> str:
    if isinstance(source, bytes):
        return "file"
    if _is_url(source):
        return unquote(urlsplit(str(source)).path.rsplit("/", 1)[-1]) or "file"
    return Path(source).name or "file"


async def _read(spec: File, cap: int) -> bytes:
    source = spec.source
    if isinstance(source, bytes):
        return source
    if _is_url(source):
        try:
            return await fetch(str(source), cap)
        except TooLarge as exc:  # another try fetches the same bytes
            raise Fatal(f"file {_default_name(source)!r}: {exc}") from exc
        except DownloadError as exc:  # a URL that fails now may answer on a retry
            raise Retryable(f"file {_default_name(source)!r}: {exc}") from exc
    return await asyncio.to_thread(_read_path, Path(source), cap)


def _read_path(path: Path, cap: int) -> bytes:
    try:
        size = path.stat().st_size
        if size > cap:
            raise Fatal(f"file {str(path)!r} is {size} bytes, over the cap of {cap}")
        return path.read_bytes()
    except OSError as exc:
        raise Fatal(f"file {str(path)!r} cannot be read: {exc.strerror or exc}") from exc


def blob_store(store: object) -> BlobStore:
    """The store's blob role; every store of Tether's has one (a test's fake may not)."""
    if not callable(getattr(store, "put_blob", None)):
        raise Fatal("this store keeps no files (no put_blob): files cannot be sent")
    return cast(BlobStore, store)


async def store_files(
    store: object, specs: Sequence[FileSpec], cap: int | None = None, platform: str = ""
) -> list[OutFile]:
    """Each file's bytes stored as a blob, and the :class:`OutFile` that names it.
    ``cap`` is the platform's upload limit (its adapter's ``upload_limit``), and never
    above the store's; ``platform`` names it in errors and logs."""
    cap = MAX_BLOB_BYTES if cap is None else min(cap, MAX_BLOB_BYTES)
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
        data = await _read(spec, cap)
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
