"""YAML → :class:`Settings`, with ``${VAR}`` and ``${file:/path}`` interpolation and errors
that name the key path.

Interpolation runs on parsed string scalars, not on the raw text, so an environment
variable can never inject YAML structure and every failure knows its key path. The text
is parsed with bounds first (:mod:`tether.config.document`), so aliases cannot expand it
before anything is checked.

A :class:`ConfigError` is one line per problem, each naming the file and a key path (or a
line and column, before there are keys), and never shows a secret: values under secret
names are not echoed, and every secret the file holds, in every form, is masked in the
message by the same redactor as the logs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tether.config.credentials import secret_name, url_secrets
from tether.config.document import YamlProblem, parse
from tether.config.schema import Settings
from tether.errors import ConfigError
from tether.redaction import Redactor, redactor

# Values at these paths are never echoed back in an error: they may be secrets.
_SECRETISH = re.compile(r"token|secret|key|password", re.IGNORECASE)
#: A key shown as it is in a key path; any other (empty, spaces, colons, a newline) is quoted.
_PLAIN_KEY = re.compile(r"[\w@/+.-]+")
_VAR = re.compile(r"\$\{(?:file:([^}]+)|([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?)\}")
#: An error lists this many problems, then how many more: a config pasted into the wrong
#: key can fail in thousands of places, and the first ones tell what happened.
MAX_PROBLEMS = 20
#: Longer values are shortened where an error shows what it got, and longer messages.
_SHOWN = 80
_LONGEST = 300


def load(path: str | Path | None, env: Mapping[str, str] | None = None) -> Settings:
    """Load ``path``; with ``None``, ``./tether.yaml`` if present, else built-in defaults."""
    if path is None:
        default = Path("tether.yaml")
        if not default.exists():
            return Settings()
        path = default
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{path}: not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start}"
            f" (line {line})"
        ) from None
    return load_text(text, source=str(path), env=env)


def load_text(
    text: str, source: str = "<config>", env: Mapping[str, str] | None = None
) -> Settings:
    """Parse and validate YAML text; ``source`` is used in error messages."""
    try:
        data = parse(text)
    except YamlProblem as exc:
        raise ConfigError(f"{source}: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping, not {type(data).__name__}")
    from_files: list[str] = []
    data = _interpolate(data, (), os.environ if env is None else env, source, from_files)
    # A value read from a file is a secret wherever it is used (that is why it is in a
    # file): the logs' redactor masks it from now on, and so does this load's error.
    redactor.update(from_files)
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        secrets: list[str] = list(from_files)
        _secrets_in(data, False, secrets)
        raise ConfigError(_describe(exc, source, Redactor(secrets))) from None


def _interpolate(
    value: Any,
    path: tuple[str | int, ...],
    env: Mapping[str, str],
    source: str,
    from_files: list[str],
) -> Any:
    """Substitute ``${VAR}``, ``${VAR:-default}`` and ``${file:/path}`` in every string;
    what files gave is appended to ``from_files``."""
    if isinstance(value, dict):
        return {
            k: _interpolate(v, (*path, str(k)), env, source, from_files) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_interpolate(v, (*path, i), env, source, from_files) for i, v in enumerate(value)]
    if isinstance(value, str) and "${" in value:

        def substitute(match: re.Match[str]) -> str:
            if match.group(1) is not None:
                content = _secret_file(match.group(1), path, source)
                from_files.append(content)
                return content
            name, default = match.group(2), match.group(3)
            if name in env and (env[name] != "" or default is None):
                if not env[name].isascii() and not _utf8(env[name]):
                    raise ConfigError(
                        f"{source}: {_dotted(path)}: environment variable ${{{name}}} is not"
                        " valid UTF-8"
                    )
                return env[name]
            if default is not None:
                return default
            raise ConfigError(
                f"{source}: {_dotted(path)}: environment variable ${{{name}}} is not set "
                f"(set it, or write ${{{name}:-default}})"
            )

        return _VAR.sub(substitute, value)
    return value


def _secret_file(name: str, path: tuple[str | int, ...], source: str) -> str:
    """The text of a secret file (Docker and Kubernetes secrets, ``/run/secrets/name``),
    without the trailing newline an editor or ``echo`` leaves; a file that cannot be
    read is one line naming the key, never its content."""
    try:
        text = Path(name).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"{source}: {_dotted(path)}: cannot read secret file {name}: {exc.strerror or exc}"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{source}: {_dotted(path)}: secret file {name} is not UTF-8") from None
    return text.rstrip("\r\n")


def _utf8(value: str) -> bool:
    """False for a value with lone surrogates: bytes that were not UTF-8 in the environment."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _secrets_in(value: Any, named: bool, out: list[str]) -> None:
    """What the raw data holds that must not show in an error: strings under a secret
    name (``token``, ``api_keys``, ``Authorization``) and the credentials in URLs."""
    if isinstance(value, str):
        out.extend([value] if named else url_secrets(value))
    elif isinstance(value, dict):
        for key, item in value.items():
            _secrets_in(item, secret_name(key), out)
    elif isinstance(value, list):
        for item in value:
            _secrets_in(item, named, out)


def _dotted(path: tuple[Any, ...]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            text = str(part)
            text = text if _PLAIN_KEY.fullmatch(text) else repr(text)  # ' a:b\n' stays one part
            out += f".{text}" if out else text
    return out or "<root>"


def _shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _describe(exc: ValidationError, source: str, redactor: Redactor) -> str:
    """One line per problem; a shown value is scrubbed before it is shortened, so no
    secret is cut where the redactor could no longer recognise it."""
    lines = []
    errors = exc.errors()
    for error in errors[:MAX_PROBLEMS]:
        where = _dotted(tuple(error["loc"]))
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        else:
            message = _shortened(redactor.scrub(" ".join(error["msg"].split())), _LONGEST)
            shown = "input" in error and not isinstance(error["input"], dict | list)
            if shown and not _SECRETISH.search(where):
                message += f" (got {_shortened(redactor.scrub(repr(error['input'])), _SHOWN)})"
        lines.append(f"{source}: {redactor.scrub(where)}: {message}")
    if len(errors) > MAX_PROBLEMS:
        lines.append(f"{source}: … and {len(errors) - MAX_PROBLEMS} more problems")
    return "\n".join(lines)
