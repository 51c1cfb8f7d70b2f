"""``media:`` (config/schema.py, its entries parsed by tether/addresses.py): closed by
default, and a bad entry names its key path."""

from __future__ import annotations

import pytest
import yaml

from tether.config import Settings, load_text
from tether.errors import ConfigError


def media(**section: object) -> Settings:
    return load_text(yaml.safe_dump({"media": section}))


def test_by_default_no_local_file_and_no_private_host() -> None:
    settings = Settings()
    assert settings.media.allow_paths == [] and settings.media.allow_hosts == []
    assert (settings.media.fetch_timeout, settings.media.max_redirects) == (30.0, 5)


@pytest.mark.parametrize(
    ("paths", "error"),
    [
        (["reports"], r"media\.allow_paths\[0\]: .*must be an absolute path"),
        (["/srv", "/"], r"media\.allow_paths\[1\]: .*'/' would allow every file"),
        (["/proc"], r"media\.allow_paths\[0\]: .*/proc is a pseudo-filesystem"),
        (["/proc/self/"], r"media\.allow_paths\[0\]: .*/proc/self is a pseudo-filesystem"),
        (["/srv/../dev"], r"media\.allow_paths\[0\]: .*/dev is a pseudo-filesystem"),
        (["/sys/kernel"], r"media\.allow_paths\[0\]: .*/sys/kernel is a pseudo-filesystem"),
    ],
)
def test_allow_paths_must_be_real_directories(paths: list[str], error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        media(allow_paths=paths)


def test_allow_paths_are_kept_normalized() -> None:
    assert media(allow_paths=["/srv/reports/", "/srv/a/../b"]).media.allow_paths == [
        "/srv/reports",
        "/srv/b",
    ]


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ("cdn_lan", r"media\.allow_hosts\[0\]: .*is not a host name"),
        ("cdn.lan:0", r"media\.allow_hosts\[0\]: .*the port must be 1 to 65535"),
        ("cdn.lan:http", r"media\.allow_hosts\[0\]: .*the port must be 1 to 65535"),
        ("[::1", r"media\.allow_hosts\[0\]: .*write an IPv6 address as \[::1\]"),
        ("10.0.0.0/33", r"media\.allow_hosts\[0\]: .*is not an address, a network or a host"),
        ("127.1", r"media\.allow_hosts\[0\]: .*not an IPv4 address in its a\.b\.c\.d form"),
        ("http://cdn.lan/", r"media\.allow_hosts\[0\]: .*write the host .*, not a URL"),
    ],
)
def test_a_bad_allow_hosts_entry_names_its_key_path(entry: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        media(allow_hosts=[entry])


def test_unknown_media_keys_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"media\.allow_path: unknown key"):
        media(allow_path=["/srv"])
    with pytest.raises(ConfigError, match=r"media\.max_redirects: "):
        media(max_redirects=100)
