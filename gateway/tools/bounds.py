"""How large one tool call's arguments and result may be (``agent.tools.max_argument_bytes``,
``agent.tools.max_result_chars``).

The model writes the arguments, so a broken or hostile provider decides their size: 10 MB
of them were once stored three times (the call's two steps on top of the model's answer)
and, sent back in the next round's transcript, had their tokens counted on the event
loop: 8.4 s in which no chat was answered. So a call over the cap is refused before
anything of it is parsed or stored (its steps name it by a digest), the model reads why,
and the next round's transcript carries a short stand-in for those arguments instead of
them. A result over ``max_result_chars`` is cut, and says so.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.config.tools import ToolsConfig

if TYPE_CHECKING:
    from tether.gateway.handler.context import Context

_DEFAULTS = ToolsConfig()


def limits(ctx: Context) -> ToolsConfig:
    """The caps of this turn's agent (an agent may have its own ``tools``)."""
    return ctx.llm.settings.agent.tools if ctx.llm.configured else _DEFAULTS


def arguments_text(raw: Any) -> str:
    """The arguments as the API sent them: a JSON string (some servers send an object)."""
    return raw if isinstance(raw, str) else json.dumps(raw)


def size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def digest(text: str, length: int) -> str:
    """How the steps name arguments too large to store: their hash and size."""
    sha = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"sha256:{sha} ({length} bytes, refused)"


def refused(name: str, length: int, cap: int) -> str:
    """What the model reads of a call whose arguments are over the cap."""
    return (
        f"error: the call to {name} was refused and the tool did not run: its arguments are"
        f" {length:,} bytes, over the limit of {cap:,} bytes for one tool call"
        " (agent.tools.max_argument_bytes). Send less: split the work into smaller calls,"
        " or pass a reference (a name, an id, a URL) instead of the content."
    )


def stand_in(call: Mapping[str, Any], cap: int) -> Mapping[str, Any]:
    """``call`` as the next round's transcript carries it: arguments over the cap
    replaced by a note, so they are neither sent again nor counted again."""
    function = call.get("function") or {}
    text = arguments_text(function.get("arguments"))
    if len(text) <= cap // 4 or (length := size(text)) <= cap:  # a char is at most 4 bytes
        return call
    note = json.dumps({"omitted": f"{length} bytes of arguments, over the limit; refused"})
    return {**call, "function": {**function, "arguments": note}}


def cut(text: str, cap: int) -> str:
    """``text`` within ``cap`` characters, saying what was cut and why."""
    if len(text) <= cap:
        return text
    return text[:cap] + (
        f"\n[cut: the result was {len(text):,} characters; only the first {cap:,} are"
        " shown (agent.tools.max_result_chars). Ask the tool for less if you need the rest.]"
    )
