"""Splitting long text: limits respected, fences balanced, nothing lost."""

from __future__ import annotations

import pytest

from tether.text import split_text, utf16_len


def test_short_text_is_one_chunk() -> None:
    assert split_text("hello", 4096) == ["hello"]
    assert split_text("x" * 10_000, None) == ["x" * 10_000]


def test_prose_splits_at_lines_within_the_limit() -> None:
    text = "\n".join(f"line {i} " + "word " * 30 for i in range(100))
    chunks = split_text(text, 1000)
    assert all(len(c) <= 1000 for c in chunks)
    assert "\n".join(chunks) == text


def test_code_fences_are_closed_and_reopened_with_their_language() -> None:
    code = "\n".join(f"x{i} = {i}" for i in range(800))
    text = f"Here:\n```python\n{code}\n```\nDone."
    chunks = split_text(text, 1000)
    assert len(chunks) > 3
    for chunk in chunks:
        assert len(chunk) <= 1000
        assert chunk.count("```") % 2 == 0
    assert all(c.startswith("```python\n") for c in chunks[1:-1])


def test_long_words_are_cut_and_utf16_is_counted() -> None:
    emoji = "😀" * 3000  # 6000 UTF-16 units
    chunks = split_text(emoji, 4096, utf16_len)
    assert all(utf16_len(c) <= 4096 for c in chunks)
    assert "".join(chunks) == emoji


def test_tiny_limit_is_refused() -> None:
    with pytest.raises(ValueError):
        split_text("x" * 100, 10)
