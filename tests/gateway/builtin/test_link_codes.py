"""What ``/link`` reads from a person: the code as they type it, and whether a fact they
save in a group speaks of themselves (gateway/builtin/people.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.gateway.builtin.people import _FIRST_PERSON, _normal, _shown, new_code


@given(st.text())
def test_any_typed_code_reads_without_error_into_the_codes_letters_or_fewer(typed: str) -> None:
    read = _normal(typed)
    assert not any(c.isspace() or c == "-" for c in read)
    assert read == read.upper()


def test_a_code_as_shown_reads_back_as_issued_however_it_is_typed() -> None:
    for _ in range(200):
        code = new_code()
        assert len(code) == 8 and not set(code) & set("01OI")
        shown = _shown(code)
        for typed in (shown, shown.lower(), f"  {code} ", shown.replace("-", " - ")):
            assert _normal(typed) == code


@pytest.mark.parametrize(
    "text",
    [
        "I'm vegetarian",
        "my birthday is in May",
        "call me Al",
        "Ich bin Vegetarier",
        "我不吃肉",
        "remind myself to stretch",
        "I am allergic to nuts",
    ],
)
def test_a_fact_that_speaks_of_its_writer_is_theirs(text: str) -> None:
    assert _FIRST_PERSON.search(text)


@pytest.mark.parametrize(
    "text",
    ["the launch is on Friday", "Miami in March", "stand-up at 9 in room Mira", "Imagine dragons"],
)
def test_a_fact_about_something_else_is_the_chats(text: str) -> None:
    assert not _FIRST_PERSON.search(text)
