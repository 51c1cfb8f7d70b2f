"""``memory.retention`` ages as written in YAML: ``null`` is forever, durations are
seconds, and a bad age is refused at its key path (never a traceback)."""

from __future__ import annotations

import pytest

from tether.config.loader import ConfigError, load_text
from tether.config.retention import RetentionConfig
from tether.config.retention.ages import CLASSES


@pytest.mark.parametrize("name", CLASSES)
def test_null_is_kept_forever(name: str) -> None:
    settings = load_text(f"memory:\n  retention:\n    {name}: null\n")
    assert getattr(settings.memory.retention, name) is None


def test_a_duration_is_seconds() -> None:
    settings = load_text("memory:\n  retention:\n    outbox: 1d12h\n    audit: 90\n")
    retention: RetentionConfig = settings.memory.retention
    assert (retention.outbox, retention.audit) == (129600.0, 90.0)


@pytest.mark.parametrize("value", ["0", "-5", "soon"])
def test_a_bad_age_names_its_key(value: str) -> None:
    with pytest.raises(ConfigError, match=r"memory\.retention\.outbox"):
        load_text(f"memory:\n  retention:\n    outbox: {value}\n")
