"""``SlackConfig``, where the adapter's modules have always imported it from.

The section itself lives with the other platforms' in :mod:`tether.config.platforms`
(``platforms.slack``, and an agent's ``agents[i].platforms.slack``), so ``tether check``
validates it with the rest of the file and names the key of a mistake; this module
re-exports it so the adapter keeps one import and its floor (``adapters/`` above
``config/``).
"""

from __future__ import annotations

from tether.config.platforms import SlackConfig

__all__ = ["SlackConfig"]
