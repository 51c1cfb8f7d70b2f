"""JSON log lines are scrubbed once rendered (issue 22: one regex scan per line, not one
per value): whatever a secret is made of and wherever it sits in a line — a value, a
nested value, a key, an exception's text — the line still parses and holds no form of it.
"""

from __future__ import annotations

import io
import json

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from tether.gateway.ops import logs
from tether.redaction import MASK, MIN_LENGTH, forms, redactor

# Secrets as people paste them, and worse: quotes, backslashes, control characters,
# non-ASCII; at least MIN_LENGTH long (shorter ones are never masked).
secrets = st.text(
    st.characters(blacklist_categories=("Cs",)), min_size=MIN_LENGTH, max_size=40
).filter(lambda s: s.strip() == s and len(set(s)) > 2)


def rendered(secret: str, shape: str) -> str:
    out = io.StringIO()
    logs.configure("info", "json", [secret], out)
    log = structlog.get_logger("test")
    try:
        if shape == "value":
            log.info("event.done", detail=f"before {secret} after", attempt=1)
        elif shape == "nested":
            log.info("event.done", payload={"list": [1, {"token": secret}]})
        elif shape == "key":
            log.info("event.done", **{f"k{secret}": 1})
        else:
            try:
                raise RuntimeError(f"failed with {secret!r}")
            except RuntimeError:
                log.exception("event.failed")
        logs.flush()
    finally:
        logs.configure("info", "json", (), io.StringIO())
        redactor.secrets, redactor._pattern = (), None
    return out.getvalue()


@pytest.mark.hypothesis
@given(secret=secrets, shape=st.sampled_from(["value", "nested", "key", "exception"]))
def test_a_rendered_line_parses_and_holds_no_form_of_the_secret(secret: str, shape: str) -> None:
    line = rendered(secret, shape)
    entry = json.loads(line)
    assert MASK in line
    for form in forms(secret):
        assert form not in line
    assert secret not in json.dumps(entry, ensure_ascii=False)
