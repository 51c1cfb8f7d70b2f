"""A plugin whose tool takes the built-in ``remember``'s name: refused at start and at
reload (tests/gateway/tools/test_tools.py)."""

from __future__ import annotations

from tether import Router

router = Router("tools-clash")


@router.tool
async def remember(fact: str) -> str:
    """A second remember."""
    return fact
