"""Local files in ``files=`` (gateway/handler/local_files.py): regular files only, opened
without following a swap, and a gateway that a handler naming ``/dev/zero`` or a FIFO
can neither fill nor hang.

A FIFO read blocks its thread until a writer comes; a device reads forever. So "nothing
read" is checked where it shows: no reader ever held the FIFO open (a writer that does
not wait finds none), the device node is refused before it is opened, and a real
``tether run`` asked for both keeps its peak memory and still exits on SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.telegram_media import MediaTelegram
from tests.support.config import write_config
from tests.support.processes import spawn_run, subprocess_env
from tether.config import Settings
from tether.config.schema import MediaConfig
from tether.errors import Fatal
from tether.gateway.handler.files import store_files
from tether.memory.inmemory import MemoryStore

SECRET = b"TETHER_SECRET=hunter2"


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    folder = tmp_path / "allowed"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "deep.txt").write_bytes(b"deep")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "deep.txt").write_bytes(SECRET)
    return folder


def allowing(folder: Path) -> MediaConfig:
    return MediaConfig(allow_paths=[str(folder)])


@pytest.fixture
def fifo(allowed: Path) -> Iterator[Path]:
    path = allowed / "pipe"
    os.mkfifo(path)
    try:
        yield path
    finally:
        release(path)


def release(fifo: Path) -> None:
    """Let go of a reader stuck opening ``fifo`` (the bug): O_RDWR opens at once, as a
    writer too, and closing it leaves that reader at the end of the file. Called by the
    test itself, before the event loop's teardown waits for the reader's thread."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))


def device(allowed: Path, name: str = "zero", minor: int = 5) -> Path:
    """A character device node inside the allowed folder (needs root): /dev/zero's by
    default, which reads forever, so only a process with capped memory may be given it."""
    path = allowed / name
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD")
    return path


async def test_a_fifo_is_refused_and_never_opened(allowed: Path, fifo: Path) -> None:
    reading = store_files(MemoryStore(), [fifo], media=allowing(allowed))
    try:
        with pytest.raises(Fatal, match=r"files\[0\]: file '.*pipe' is a FIFO, not a regular file"):
            await asyncio.wait_for(reading, 10)
    finally:
        release(fifo)
    with pytest.raises(OSError) as nobody:  # no reader has it open, nor is opening it
        os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    assert nobody.value.errno == errno.ENXIO


async def test_a_device_is_refused_before_it_is_opened(allowed: Path) -> None:
    null = device(allowed, "null", 3)  # /dev/null's: read, it would be "empty", not refused
    with pytest.raises(Fatal, match=r"file '.*null' is a device, not a regular file"):
        await store_files(MemoryStore(), [null], cap=10, media=allowing(allowed))


async def test_a_folder_swapped_for_a_symlink_after_the_check_is_not_followed(
    allowed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check saw ``sub/`` as a folder inside the allowed one; by the open it is a
    symlink to a folder outside. The open, one component at a time with O_NOFOLLOW,
    fails instead of reading the secret there."""
    target = allowed / "sub" / "deep.txt"
    resolve = Path.resolve

    def resolve_then_swap(self: Path, strict: bool = False) -> Path:
        resolved = resolve(self, strict)
        if self == target:
            shutil.rmtree(allowed / "sub")
            (allowed / "sub").symlink_to(tmp_path / "outside")
        return resolved

    monkeypatch.setattr(Path, "resolve", resolve_then_swap)
    with pytest.raises(Fatal, match=r"file '.*deep.txt' changed while it was opened"):
        await store_files(MemoryStore(), [target], media=allowing(allowed))


async def test_a_file_swapped_for_a_symlink_after_the_check_is_not_followed(
    allowed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = allowed / "sub" / "deep.txt"
    resolve = Path.resolve

    def resolve_then_swap(self: Path, strict: bool = False) -> Path:
        resolved = resolve(self, strict)
        if self == target:
            target.unlink()
            target.symlink_to(tmp_path / "outside" / "deep.txt")
        return resolved

    monkeypatch.setattr(Path, "resolve", resolve_then_swap)
    with pytest.raises(Fatal, match=r"file '.*deep.txt' is a symlink, not a regular file"):
        await store_files(MemoryStore(), [target], media=allowing(allowed))


def _peak_kb(pid: int) -> int:
    """The process's peak resident memory (VmHWM), in kB."""
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


@pytest.mark.slow
async def test_a_gateway_asked_for_dev_zero_and_a_fifo_stays_flat_and_still_stops(
    tmp_path: Path, allowed: Path, fifo: Path
) -> None:
    """A real ``tether run`` whose handler makes a Path of what the person writes: asked
    for ``/dev/zero``, a device node and a FIFO inside the allowed folder, it tells the
    person (the dead notice) each time, its peak memory does not move, and SIGTERM
    still ends it at once (no worker thread is stuck on the FIFO)."""
    zero = device(allowed)
    fake = MediaTelegram()
    await fake.start()
    log = tmp_path / "tether.log"
    try:
        section = {"token": fake.token, "base_url": fake.base_url, "poll_timeout": 1,
                   "rate_limits": False}  # fmt: skip
        config = write_config(
            tmp_path,
            plugins=["tests.plugins.media:router"],
            media={"allow_paths": [str(allowed)]},
            platforms={"telegram": section},
        )
        process = await spawn_run(config, log, subprocess_env())
        try:
            fake.push(message=fake.message(1, f"path {allowed / 'sub' / 'deep.txt'}"))
            await fake.wait_for(lambda: len(fake.media) >= 1, timeout=60)
            before = _peak_kb(process.pid)
            for chat, path in enumerate(("/dev/zero", str(zero), str(fifo)), start=2):
                fake.push(message=fake.message(chat, f"path {path}"))
            await fake.wait_for(lambda: len(fake.sent) >= 3, timeout=60)
            grown = _peak_kb(process.pid) - before
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                code = await asyncio.wait_for(process.wait(), 60)
            except TimeoutError:  # a thread stuck on the FIFO (the bug): let it go, kill
                release(fifo)
                process.kill()
                await process.wait()
                raise
    finally:
        await fake.stop()
    assert code == 0, log.read_text()[-3000:]
    assert [m["data"] for m in fake.media] == [b"deep"]
    assert sorted(int(m["chat_id"]) for m in fake.sent) == [2, 3, 4]
    assert {m["text"] for m in fake.sent} == {Settings().pipeline.dead_notice}  # told, each
    assert grown < 20 * 1024, f"peak memory grew by {grown} kB"
    text = log.read_text()
    assert "'/dev/zero' is in a pseudo-filesystem" in text
    assert "zero' is a device, not a regular file" in text
    assert "pipe' is a FIFO, not a regular file" in text
