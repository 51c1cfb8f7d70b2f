"""What ``files=`` can reach (gateway/handler/files.py): a string is a URL or an error,
a ``Path`` is read only inside ``media.allow_paths``, a URL only from a public address
or one ``media.allow_hosts`` allows.

In process: :func:`store_files` on the real in-memory store, and a real gateway on the
loopback platform and a SQLite store whose handler passes on what the person said, as a
handler passing on a model's choice would. Devices, FIFOs, swaps and the gateway's
memory are in test_local_files.py; the URL guard itself in tests/adapters/test_url_guard.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.discord_media import FakeCdn
from tests.support.config import db_rows, make_settings
from tests.support.gateway import running
from tether import Context, File, Router
from tether.config.schema import MediaConfig
from tether.errors import Fatal
from tether.gateway.handler.files import store_files
from tether.gateway.handler.local_files import PathRefused
from tether.memory.inmemory import MemoryStore

SECRET = b"TETHER_SECRET=hunter2, not for any chat"
REPORT = b"%PDF-1.4 the weekly report"


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    """``tmp_path/allowed`` (report.pdf, sub/deep.txt) beside ``tmp_path/outside``
    (secret.env), which no test allows."""
    folder = tmp_path / "allowed"
    (folder / "sub").mkdir(parents=True)
    (folder / "report.pdf").write_bytes(REPORT)
    (folder / "sub" / "deep.txt").write_bytes(b"deep")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.env").write_bytes(SECRET)
    return folder


@pytest.fixture
async def cdn() -> AsyncIterator[FakeCdn]:
    server = await FakeCdn().start()
    try:
        yield server
    finally:
        await server.stop()


def allowing(*folders: Path) -> MediaConfig:
    return MediaConfig(allow_paths=[str(folder) for folder in folders])


async def test_a_path_inside_an_allowed_folder_is_stored(allowed: Path, tmp_path: Path) -> None:
    store = MemoryStore()
    specs = [
        allowed / "report.pdf",
        File(allowed / "sub" / "deep.txt", name="d.txt"),
        allowed / "sub" / ".." / "report.pdf",
    ]
    stored = await store_files(store, specs, media=allowing(allowed))
    assert [await store.blob(file.blob) for file in stored] == [REPORT, b"deep", REPORT]
    assert [file.name for file in stored] == ["report.pdf", "d.txt", "report.pdf"]
    # An allowed folder may itself be a symlink: it is resolved once, as configured.
    link = tmp_path / "reports"
    link.symlink_to(allowed)
    (again,) = await store_files(store, [link / "report.pdf"], media=allowing(link))
    assert again.blob == stored[0].blob


async def test_a_string_is_a_url_or_an_error_never_a_path(
    allowed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(allowed / "sub")
    strings = [
        "/proc/self/environ",
        "../report.pdf",
        str(allowed / "report.pdf"),
        "deep.txt",
        "file:///etc/passwd",
        "/dev/zero",
    ]
    for text in strings:
        for spec in (text, File(text)):
            with pytest.raises(Fatal) as caught:
                await store_files(MemoryStore(), [spec], media=allowing(allowed))
            assert str(caught.value) == (
                f"files[0]: {text!r} is not an http(s) URL; a local file is passed as a Path"
                " (inside media.allow_paths), never as a string"
            )


async def test_local_files_are_off_until_a_folder_is_allowed(allowed: Path) -> None:
    with pytest.raises(Fatal) as caught:
        await store_files(MemoryStore(), [allowed / "report.pdf"])
    assert str(caught.value) == (
        f"files[0]: file '{allowed / 'report.pdf'}': local files are off"
        " (media.allow_paths is empty)"
    )


async def test_paths_outside_the_allowed_folders_are_refused(
    allowed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "outside" / "secret.env"
    (allowed / "innocent.txt").symlink_to(secret)
    (allowed / "more").symlink_to(tmp_path / "outside")
    monkeypatch.chdir(allowed)
    refused = {
        Path("/proc/self/environ"): "is in a pseudo-filesystem (/proc/",
        Path("/dev/zero"): "is in a pseudo-filesystem (/dev/zero)",
        Path("/proc/self/root/etc/passwd"): "(/etc/passwd) is outside media.allow_paths",
        secret: f"({secret}) is outside media.allow_paths",
        allowed / ".." / "outside" / "secret.env": f"({secret}) is outside",
        Path("../outside/secret.env"): f"({secret}) is outside",
        Path("innocent.txt"): f"({secret}) is outside",  # a symlink, resolved first
        allowed / "more" / "secret.env": f"({secret}) is outside",
        allowed: "is a directory, not a file",
        allowed / "sub": "is a directory, not a regular file",
        tmp_path / "allowed-but-not": "is outside media.allow_paths",  # a prefix is not a folder
    }
    for path, reason in refused.items():
        with pytest.raises(Fatal, match=r"^files\[0\]: file ") as caught:
            await store_files(MemoryStore(), [path], media=allowing(allowed))
        assert reason in str(caught.value), (path, str(caught.value))
        assert isinstance(caught.value.__cause__, PathRefused)


async def test_a_file_that_is_missing_or_over_the_cap_fails_naming_it(allowed: Path) -> None:
    (allowed / "eleven.bin").write_bytes(bytes(11))
    (allowed / "ten.bin").write_bytes(b"0123456789")
    media = allowing(allowed)
    with pytest.raises(Fatal, match=r"'.*eleven.bin' is over the cap of 10 bytes"):
        await store_files(MemoryStore(), [allowed / "eleven.bin"], cap=10, media=media)
    (ten,) = await store_files(MemoryStore(), [allowed / "ten.bin"], cap=10, media=media)
    assert ten.size == 10
    with pytest.raises(Fatal, match=r"'.*gone.pdf' cannot be read: No such file or directory"):
        await store_files(MemoryStore(), [allowed / "gone.pdf"], media=media)


# -- through a running gateway --------------------------------------------------------


def passing_on() -> Router:
    """A handler that sends what the person names, as one passing on a model's choice
    would: ``send TEXT`` as the string, ``path TEXT`` as a Path."""
    router = Router("files")

    @router.text(r"^send (.+)$")
    async def send(ctx: Context) -> None:
        await ctx.reply("here it is", files=[ctx.event.text.split(" ", 1)[1]])

    @router.text(r"^path (.+)$")
    async def path(ctx: Context) -> None:
        await ctx.reply("here it is", files=[Path(ctx.event.text.split(" ", 1)[1])])

    return router


@pytest.mark.slow
async def test_what_a_person_names_reaches_no_secret_and_they_are_told(
    tmp_path: Path, allowed: Path, cdn: FakeCdn
) -> None:
    url = cdn.add(SECRET, "admin.txt")  # a server on loopback, as a LAN admin page would be
    asked = [
        "send /proc/self/environ",
        "send ../outside/secret.env",
        f"send {url}",
        f"send {cdn.redirect(url)}",
        "send http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "path /proc/self/environ",
        f"path {tmp_path / 'outside' / 'secret.env'}",
        f"path {allowed / 'report.pdf'}",
    ]
    settings = make_settings(tmp_path, media={"allow_paths": [str(allowed)]})
    async with running(settings, passing_on()) as (_gateway, adapter):
        for index, text in enumerate(asked):
            await adapter.say(text, chat=str(index))
        sent = await adapter.wait_for_sent(len(asked))
    notice = settings.pipeline.dead_notice
    by_chat = {delivery.message.target.chat_id: delivery for delivery in sent}
    assert [by_chat[str(i)].message.text for i in range(len(asked))] == [notice] * 7 + [
        "here it is"
    ]
    assert [upload.data for upload in by_chat["7"].files] == [REPORT]
    assert cdn.fetched == []  # not even the redirect was asked: 127.0.0.1 is not allowed
    assert db_rows(tmp_path, "SELECT sha256 FROM blobs") == [(hashlib.sha256(REPORT).hexdigest(),)]
    errors = [row[0] for row in db_rows(tmp_path, "SELECT error FROM dead_letters ORDER BY key")]
    assert len(errors) == 7 and all("files[0]: " in error for error in errors)
    joined = "\n".join(errors)
    for reason in (
        "'/proc/self/environ' is not an http(s) URL",
        "'../outside/secret.env' is not an http(s) URL",
        "127.0.0.1 is a loopback address: not fetched (media.allow_hosts can allow it)",
        "169.254.169.254 is a link-local address",
        "file '/proc/self/environ' is in a pseudo-filesystem",
        "secret.env) is outside media.allow_paths",
    ):
        assert reason in joined, reason
    assert SECRET.decode() not in joined


async def test_an_allowed_host_is_fetched_through_redirects(tmp_path: Path, cdn: FakeCdn) -> None:
    url = cdn.add(REPORT, "report.pdf")
    settings = make_settings(tmp_path, media={"allow_hosts": [f"127.0.0.1:{cdn.port}"]})
    async with running(settings, passing_on()) as (_gateway, adapter):
        await adapter.say(f"send {cdn.redirect(url)}")
        (delivery,) = await adapter.wait_for_sent(1)
    assert delivery.message.text == "here it is"
    assert [upload.data for upload in delivery.files] == [REPORT]
    assert len(cdn.fetched) == 2  # the redirect, then the file


async def test_a_reload_opens_a_folder_for_the_events_after_it(
    tmp_path: Path, allowed: Path
) -> None:
    """``media:`` is not restart-only: a reload's folders apply from its next event."""
    settings = make_settings(tmp_path)
    report = allowed / "report.pdf"
    async with running(settings, passing_on()) as (gateway, adapter):
        await adapter.say(f"path {report}", chat="before")
        await adapter.wait_for_sent(1)
        gateway.apply(
            gateway.assemble(make_settings(tmp_path, media={"allow_paths": [str(allowed)]}))
        )
        await adapter.say(f"path {report}", chat="after")
        sent = await adapter.wait_for_sent(2)
    by_chat = {delivery.message.target.chat_id: delivery for delivery in sent}
    assert by_chat["before"].message.text == settings.pipeline.dead_notice
    assert [upload.data for upload in by_chat["after"].files] == [REPORT]
