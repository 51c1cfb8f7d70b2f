"""Handlers that send and fetch files, for tests/test_media*.py (in process and as a
``tether run`` subprocess).

- ``files``: a caption with a photo (bytes), a document (a path) and a voice note;
- ``album``: two photos;
- ``/ask files`` (Discord's slash command): as ``files``;
- a message with a file: downloads it (``max:N`` in the text caps it) and answers
  with its size and sha256, or why not;
- ``path TEXT``: sends ``Path(TEXT)``, the careless handler ``media.allow_paths`` exists
  for (``/dev/zero``, a FIFO or a device node named in chat must be refused, not read).
  Its first run caps the process's address space at 2 GiB above what it uses then, so
  a regression that reads ``/dev/zero`` fails its test with a MemoryError instead of
  taking the machine's memory.
"""

from __future__ import annotations

import hashlib
import os
import re
import resource
import tempfile
from pathlib import Path

from tether import Context, File, Router
from tether.errors import DownloadError
from tether.events import Kind

router = Router("media")

CAPTION = "Here are your files"
#: Small but real: a 1-pixel PNG, a PDF header and an Ogg page header (contents are opaque).
PHOTO = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)
DOCUMENT = b"%PDF-1.4\n% a report\n" + bytes(range(256)) * 4
VOICE = b"OggS\x00\x02" + b"\x00" * 20 + b"OpusHead" + bytes(64)


def document_path() -> Path:
    """The document as a file on disk (``ctx.reply`` reads paths while the handler runs)."""
    folder = Path(os.environ.get("TETHER_TEST_DIR") or tempfile.gettempdir())
    path = folder / "report.pdf"
    if not path.exists():
        path.write_bytes(DOCUMENT)
    return path


@router.text(r"^files$")
async def files(ctx: Context) -> None:
    await ctx.reply(
        CAPTION,
        files=[
            File(PHOTO, name="chart.png"),
            document_path(),
            File(VOICE, name="note.ogg", kind="voice"),
        ],
    )


@router.command("ask")  # Discord's /ask: the question is the args
async def ask(ctx: Context) -> None:
    if ctx.event.args == "files":
        await files(ctx)


@router.text(r"^album$")
async def album(ctx: Context) -> None:
    await ctx.reply("two photos", files=[File(PHOTO, name="a.png"), File(PHOTO, name="b.png")])


def _cap_memory() -> None:
    with open("/proc/self/status") as status:
        size = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
    limit = (size + 2 * 1024 * 1024) * 1024  # kB → bytes, 2 GiB above now
    if resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@router.text(r"^path (.+)$")
async def path(ctx: Context) -> None:
    _cap_memory()
    await ctx.reply("here it is", files=[Path(ctx.event.text.split(" ", 1)[1])])


@router.on(Kind.MESSAGE, when=lambda event: bool(event.attachments))
async def fetch(ctx: Context) -> None:
    attachment = ctx.event.attachments[0]
    cap = re.search(r"max:(\d+)", ctx.event.text)
    try:
        data = await ctx.download(attachment, max_bytes=int(cap.group(1)) if cap else None)
    except DownloadError as exc:
        await ctx.reply(f"cannot fetch: {exc}")
        return
    await ctx.reply(f"got {attachment.kind} {len(data)} bytes {hashlib.sha256(data).hexdigest()}")
