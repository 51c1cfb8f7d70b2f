"""Tether's configuration: one YAML file, validated into typed models.

`load()` is the only entry point most code needs; `Settings` is the root model.
"""

from tether.config.loader import ConfigError, load, load_text
from tether.config.schema import Settings

__all__ = ["ConfigError", "Settings", "load", "load_text"]
