"""Where ``plugins`` and job ``handler`` modules import from: the config file's directory.

A config names its modules (``mybot.handlers:router``) as they sit beside it, so
``tether check -c examples/tether.yaml`` works from any working directory, and the
installed console script (which puts neither the config's directory nor the working
directory on ``sys.path``) finds them without ``PYTHONPATH``. The directory is first on
``sys.path`` only while a module imports: the rest of the process sees the path it had.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

_base: Path | None = None


def use_config(path: str | Path | None) -> None:
    """Import modules relative to ``path``'s directory (the working directory without one)."""
    global _base
    _base = Path(path).resolve().parent if path is not None else Path.cwd().resolve()


def import_module(name: str) -> ModuleType:
    """``importlib.import_module(name)``, with the config's directory searched first."""
    if _base is None:
        return importlib.import_module(name)
    entry = str(_base)
    sys.path.insert(0, entry)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(entry)  # the first occurrence: the one inserted above
