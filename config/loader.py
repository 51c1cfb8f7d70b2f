"""YAML → :class:`Settings`, with ``${VAR}`` interpolation and errors that name the key path.

Interpolation runs on parsed string scalars, not on the raw text, so an environment
variable can never inject YAML structure and every failure knows its key path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tether.config.schema import Settings

# Values at these paths are never echoed back in an error: they may be secrets.
_SECRETISH = re.compile(r"token|secret|key|password", re.IGNORECASE)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ConfigError(Exception):
    """A config file that cannot be used; the message names the file and the key path."""


def load(path: str | Path | None, env: Mapping[str, str] | None = None) -> Settings:
    """Load ``path``; with ``None``, ``./tether.yaml`` if present, else built-in defaults."""
    if path is None:
        default = Path("tether.yaml")
        if not default.exists():
            return Settings()
        path = default
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    return load_text(text, source=str(path), env=env)


def load_text(
    text: str, source: str = "<config>", env: Mapping[str, str] | None = None
) -> Settings:
    """Parse and validate YAML text; ``source`` is used in error messages."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping, not {type(data).__name__}")
    data = _interpolate(data, (), os.environ if env is None else env, source)
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from None


def _interpolate(
    value: Any, path: tuple[str | int, ...], env: Mapping[str, str], source: str
) -> Any:
    if isinstance(value, dict):
        return {k: _interpolate(v, (*path, str(k)), env, source) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, (*path, i), env, source) for i, v in enumerate(value)]
    if isinstance(value, str) and "${" in value:

        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env and (env[name] != "" or default is None):
                return env[name]
            if default is not None:
                return default
            raise ConfigError(
                f"{source}: {_dotted(path)}: environment variable ${{{name}}} is not set "
                f"(set it, or write ${{{name}:-default}})"
            )

        return _VAR.sub(substitute, value)
    return value


def _dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "<root>"


def _describe(exc: ValidationError, source: str) -> str:
    lines = []
    for error in exc.errors():
        where = _dotted(tuple(error["loc"]))
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        else:
            message = error["msg"]
            shown = "input" in error and not isinstance(error["input"], dict | list)
            if shown and not _SECRETISH.search(where):
                message += f" (got {error['input']!r})"
        lines.append(f"{source}: {where}: {message}")
    return "\n".join(lines)
