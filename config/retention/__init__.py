"""``memory.retention`` (see ``ages.py``): in a room of its own, config/ holding 15 modules."""

from tether.config.retention.ages import (
    CLASSES,
    REDELIVERY_WINDOWS,
    RetentionConfig,
    check_inbox_retention,
    duration,
    enabled_platforms,
    longest_window,
)

__all__ = [
    "CLASSES",
    "REDELIVERY_WINDOWS",
    "RetentionConfig",
    "check_inbox_retention",
    "duration",
    "enabled_platforms",
    "longest_window",
]
