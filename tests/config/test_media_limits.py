"""``media:``'s size caps (config/schema.py): the old constants as defaults, validated, and
what ``files=``, ``ctx.download`` and the model's images obey."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.config import make_settings
from tests.support.gateway import running
from tether import Context, Router
from tether.config import Settings, load_text
from tether.config.schema import MediaConfig
from tether.errors import ConfigError, Fatal, TooLarge
from tether.events import Attachment
from tether.gateway.handler.files import store_files
from tether.memory.blobs import MAX_BLOB_BYTES
from tether.memory.inmemory import MemoryStore

MB = 1024 * 1024


def test_the_defaults_are_the_constants_they_replace() -> None:
    media = Settings().media
    assert (media.max_file_bytes, media.max_download_bytes, media.max_image_bytes) == (
        MAX_BLOB_BYTES, 20 * MB, 10 * MB,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"max_file_bytes": 60 * MB}, "media.max_file_bytes"),  # over what the store takes
        ({"max_file_bytes": 0}, "media.max_file_bytes"),
        ({"max_download_bytes": -1}, "media.max_download_bytes"),
        ({"max_image_bytes": "big"}, "media.max_image_bytes"),
    ],
)
def test_a_bad_cap_is_refused_at_its_key(section: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_text(yaml.safe_dump({"media": section}))


async def test_a_reply_file_over_the_configured_cap_is_refused() -> None:
    media = MediaConfig(max_file_bytes=10)
    with pytest.raises(Fatal, match="over the cap of 10"):
        await store_files(MemoryStore(), [b"x" * 11], media=media)
    assert len(await store_files(MemoryStore(), [b"x" * 10], media=media)) == 1


async def test_ctx_download_defaults_to_the_configured_cap(tmp_path: Path) -> None:
    router, seen = Router(), []

    @router.fallback
    async def fetch(ctx: Context) -> None:
        try:
            await ctx.download(ctx.event.attachments[0])
        except TooLarge as exc:
            seen.append(str(exc))

    settings = make_settings(tmp_path, media={"max_download_bytes": 4})
    async with running(settings, router) as (gateway, loop):
        loop.files["f1"] = b"12345"
        event = loop.event("file").model_copy(
            update={"attachments": [Attachment(kind="document", file_id="f1")]}
        )
        await loop.deliver(event)
        await gateway.drain()
    assert len(seen) == 1
