"""Vectors as the stores keep them: unit length, float32, little-endian.

Every vector is scaled to length 1 before it is stored or searched with, so a dot
product is the cosine similarity (1: the same direction, 0: unrelated) and the stores
compare with a plain sum of products. float32 is what embedding models produce and what
sqlite-vec and pgvector read; four bytes a dimension (a 1,536-dimension vector is 6 KB).
"""

from __future__ import annotations

import base64
import math
import operator
import sys
from array import array
from collections.abc import Iterable, Sequence

Vector = Sequence[float]


def unit(vector: Iterable[float]) -> array[float]:
    """``vector`` scaled to length 1, as float32 (a zero vector stays zero: it is near
    nothing, rather than a division by zero)."""
    values = array("f", vector)
    length = math.sqrt(math.fsum(x * x for x in values))
    if length > 0:
        values = array("f", (x / length for x in values))
    return values


def similarity(a: Vector, b: Vector) -> float:
    """The cosine similarity of two unit vectors (their dot product); 0 when their
    dimensions differ (vectors of two models are not comparable)."""
    if len(a) != len(b):
        return 0.0
    return math.fsum(map(operator.mul, a, b))


def packed(vector: Iterable[float]) -> bytes:
    """``vector`` as float32 little-endian bytes (a SQLite BLOB, a memoized step)."""
    values = array("f", vector)
    if sys.byteorder != "little":
        values.byteswap()
    return values.tobytes()


def unpacked(blob: bytes) -> array[float]:
    values = array("f")
    values.frombytes(blob)
    if sys.byteorder != "little":
        values.byteswap()
    return values


def encoded(vector: Iterable[float]) -> str:
    """``vector`` as text for a JSON step result: base64 of :func:`packed` (a quarter of
    the size of a list of decimal numbers)."""
    return base64.b64encode(packed(vector)).decode("ascii")


def decoded(text: str) -> array[float]:
    return unpacked(base64.b64decode(text))
