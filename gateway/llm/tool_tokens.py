"""What a tool round adds to a prompt beyond the messages' text: the tool schemas the
request carries and the calls in earlier assistant messages. The API bills them as
prompt tokens, so the budget check before a round counts them too (a round that would
cross the task budget is not made)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tether.memory import tokens


def extra_tokens(
    messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None, encoding: str
) -> int:
    """Tokens of ``tools`` (as sent) and of the ``tool_calls`` in ``messages``."""
    parts = [json.dumps(list(tools))] if tools else []
    parts += [json.dumps(m["tool_calls"]) for m in messages if m.get("tool_calls")]
    return sum(tokens.count(part, encoding) for part in parts)
