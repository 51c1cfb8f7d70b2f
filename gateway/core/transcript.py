"""An event's tool calls, in order, read back from its steps: for the dead-letter
snapshot (and so ``tether dead show``), where an operator asks "what did the tools do
before this event died?" — including calls that started and never finished."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_STEP = re.compile(r"^tool:(\d+):(\d+)(:started)?$")
#: Enough of a result to recognise it; the full text stays in the step.
RESULT_CHARS = 500


def transcript(steps: Mapping[str, str]) -> list[dict[str, Any]]:
    """One entry per call (``step``, ``tool``, ``arguments``, ``outcome``, ``result``),
    ordered by round and position; a call with only its ``started`` mark has the outcome
    ``interrupted`` (it was running when the attempt ended)."""
    calls: dict[tuple[int, int], dict[str, Any]] = {}
    for name, raw in steps.items():
        match = _STEP.match(name)
        if not match:
            continue
        place = (int(match.group(1)), int(match.group(2)))
        entry = calls.setdefault(place, {"step": f"tool:{place[0]}:{place[1]}"})
        try:
            value = json.loads(raw)
        except ValueError:
            value = {}
        if not isinstance(value, dict):
            value = {}
        if match.group(3):
            entry.setdefault("tool", value.get("tool"))
            entry.setdefault("outcome", "interrupted")
            continue
        result = str(value.get("result", ""))
        entry.update(
            tool=value.get("tool"),
            arguments=value.get("arguments"),
            outcome=value.get("outcome"),
            result=result if len(result) <= RESULT_CHARS else result[:RESULT_CHARS] + "…",
            duration_ms=value.get("duration_ms"),
        )
    return [calls[place] for place in sorted(calls)]
