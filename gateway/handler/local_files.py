"""Reading a local file a handler names in ``files=``: confined, a regular file, capped.

A handler passes a ``Path`` (a plain string is a URL, never a path), and that path is
often built from what a person or a model said. So the file must sit inside one of the
directories ``media.allow_paths`` names, *after* symlinks and ``..`` are resolved, and
must be a regular file: never a FIFO (a read blocks a worker thread forever, and the
process then never exits), a device (``/dev/zero`` has no end), or anything under
``/proc``, ``/sys`` or ``/dev`` (``/proc/self/environ`` is the gateway's secrets; its
files say they are empty and are not).

The resolved path is opened one component at a time from the allowed directory with
``O_NOFOLLOW``, so a directory or the file swapped for a symlink after the check fails
the open instead of leading elsewhere; the file is looked at (``lstat``) before it is
opened and again (``fstat``) after, so a device or FIFO is never opened and a file
swapped in between is refused. The size the file states is not trusted: the cap counts
the bytes actually read, and reading stops one byte past it.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from tether.errors import Fatal
from tether.files import in_pseudo_filesystem

__all__ = ["PathRefused", "read_confined"]

_CHUNK = 1 << 20
_OPEN = os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
_DIRECTORY = _OPEN | os.O_DIRECTORY | os.O_NOFOLLOW
#: O_NONBLOCK: a FIFO swapped in after the ``lstat`` opens at once (and is then
#: refused by ``fstat``) instead of blocking the thread until a writer comes.
_FILE = _OPEN | os.O_NOFOLLOW | os.O_NONBLOCK


class PathRefused(Fatal):
    """A local file ``files=`` will not read: outside ``media.allow_paths``, not a
    regular file, or changed while it was opened. Another attempt is refused too."""


def read_confined(path: Path, roots: Sequence[str], cap: int) -> bytes:
    """The bytes of ``path`` if it is a regular file inside one of ``roots`` (at most
    ``cap``), else :class:`PathRefused`; :class:`~tether.errors.Fatal` when it cannot
    be read. Blocking: run it in a thread."""
    shown = str(path)
    if not roots:
        raise PathRefused(f"file {shown!r}: local files are off (media.allow_paths is empty)")
    resolved = str(path.resolve())  # symlinks and '..' first, then the check
    if in_pseudo_filesystem(resolved):
        raise PathRefused(f"file {shown!r} is in a pseudo-filesystem ({resolved}), not a file")
    root = _root_of(resolved, roots)
    if root is None:
        raise PathRefused(f"file {shown!r} ({resolved}) is outside media.allow_paths")
    parts = Path(resolved).relative_to(root).parts
    if not parts:
        raise PathRefused(f"file {shown!r} is a directory, not a file")
    try:
        fd = _open_beneath(root, parts, shown)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise PathRefused(f"file {shown!r} changed while it was opened") from exc
        raise Fatal(f"file {shown!r} cannot be read: {exc.strerror or exc}") from exc
    try:
        return _read_capped(fd, cap, shown)
    except OSError as exc:
        raise Fatal(f"file {shown!r} cannot be read: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def _root_of(resolved: str, roots: Sequence[str]) -> str | None:
    """The allowed directory (itself resolved: it may be a symlink) holding ``resolved``."""
    for root in roots:
        real = os.path.realpath(root)
        if resolved == real or resolved.startswith(real.rstrip("/") + "/"):
            return real
    return None


def _open_beneath(root: str, parts: Sequence[str], shown: str) -> int:
    """``root/parts…`` opened without following a symlink anywhere below ``root``."""
    fd = os.open(root, _OPEN | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = os.open(part, _DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        before = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISREG(before.st_mode):
            raise PathRefused(f"file {shown!r} is {_kind(before.st_mode)}, not a regular file")
        leaf = os.open(parts[-1], _FILE, dir_fd=fd)
    finally:
        os.close(fd)
    after = os.fstat(leaf)
    if not stat.S_ISREG(after.st_mode) or (after.st_dev, after.st_ino) != (
        before.st_dev,
        before.st_ino,
    ):
        os.close(leaf)
        raise PathRefused(f"file {shown!r} changed while it was opened")
    return leaf


def _read_capped(fd: int, cap: int, shown: str) -> bytes:
    """At most ``cap`` bytes, counted as read: the size the file states is not trusted."""
    chunks: list[bytes] = []
    total = 0
    while chunk := os.read(fd, min(_CHUNK, cap + 1 - total)):
        total += len(chunk)
        if total > cap:
            raise Fatal(f"file {shown!r} is over the cap of {cap} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "something else"
