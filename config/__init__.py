"""Tether's configuration: one YAML file, validated into typed models.

`load()` is the only entry point most code needs; `Settings` is the root model.

- ``loader.py``       file → Settings: UTF-8, ``${VAR}`` interpolation, one-line errors
- ``document.py``     YAML text → plain data, with aliases and nesting bounded
- ``schema.py``       ``Settings`` and its sections (``platforms.py``, ``llm.py``, ``jobs.py``,
                      on the shared base in ``section.py``)
- ``credentials.py``  the secret parts of values that are not secrets whole (URLs, headers)
"""

from tether.config.loader import load, load_text
from tether.config.schema import Settings
from tether.errors import ConfigError

__all__ = ["ConfigError", "Settings", "load", "load_text"]
