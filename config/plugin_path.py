"""Where ``plugins`` and job ``handler`` modules import from: the config file's directory.

A config names its modules (``mybot.handlers:router``) as they sit beside it, so
``tether check -c examples/tether.yaml`` works from any working directory, and the
installed console script (which puts neither the config's directory nor the working
directory on ``sys.path``) finds them without ``PYTHONPATH``. The directory is first on
``sys.path`` only while a configured module imports, so the plugins named in the config
are the ones beside it; after that it stays on ``sys.path`` last, so a module a handler
imports later (``import helpers`` inside a function, a package's lazily loaded part)
is found beside the config too, and a file there never shadows an installed module.
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
    if str(_base) not in sys.path:
        sys.path.append(str(_base))  # last: for imports at any time (see the module)


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
