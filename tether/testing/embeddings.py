"""The fake model's embeddings: deterministic vectors in which meaning is a table.

A text's vector is the sum of one fixed pseudo-random direction per word (lowercased
``\\w+`` runs), in :data:`DIMENSIONS` dimensions: texts that share words are near,
texts that share none are nearly orthogonal (a cosine of about ±0.06). A test makes two
different words mean the same by naming them in ``concepts`` (``{"automobile": "car"}``:
either word is the direction of ``car``), so it can say which texts are near without
sharing a word: what a real model learns, written down.
"""

from __future__ import annotations

import base64
import math
import random
import re
import sys
import zlib
from array import array
from collections.abc import Mapping
from functools import lru_cache

DIMENSIONS = 256
_WORD = re.compile(r"\w+", re.UNICODE)


@lru_cache(maxsize=4096)
def direction(word: str) -> tuple[float, ...]:
    """The fixed direction of ``word`` (seeded by its CRC-32: the same in every run)."""
    rng = random.Random(zlib.crc32(word.encode()))
    return tuple(rng.gauss(0.0, 1.0) for _ in range(DIMENSIONS))


def vector(text: str, concepts: Mapping[str, str]) -> list[float]:
    """``text``'s unit vector (all zeros for a text without words)."""
    total = [0.0] * DIMENSIONS
    for word in _WORD.findall(text.lower()):
        for i, x in enumerate(direction(concepts.get(word, word))):
            total[i] += x
    length = math.sqrt(sum(x * x for x in total))
    return [x / length for x in total] if length else total


def as_base64(values: list[float]) -> str:
    """What the API sends for ``encoding_format: base64``: float32 little-endian bytes."""
    packed = array("f", values)
    if sys.byteorder == "big":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")
