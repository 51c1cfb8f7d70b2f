"""Hostile config: whatever the file holds, ``load`` returns Settings or raises ConfigError.

Hypothesis writes the files: YAML-ish text built from the pieces that break parsers
(anchors and aliases, tags, flow brackets, quotes, huge numbers, interpolation), random
values under every kind of known key, alias chains of random fan-out, raw bytes that are
not UTF-8, and environment variables that are not either. For each, the contract:

- no other exception escapes (no traceback reaches the person running ``tether check``);
- the message is one line per problem, each starting with the file and saying where:
  a key path, or a line and column while the text is not YAML yet;
- no secret of the file is in the message, in any form.

The examples' number comes from the suite's Hypothesis profile (``make fuzz`` raises it).
"""

from __future__ import annotations

import re
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tether.config import Settings, load, load_text
from tether.errors import ConfigError

SOURCE = "hostile.yaml"
#: One secret, configured under secret keys and in URLs, and echoed where errors show
#: values: it must never reach a message.
SECRET = "Zq9-hostile_SECRET-value"
SECRET_FORMS = (SECRET, quote(SECRET, safe=""), SECRET[: len(SECRET) // 2 + 4])

#: Configures SECRET as secrets: a token, a URL's password, a header, an API key.
SECRETS_CONFIG: dict[str, Any] = {
    "memory": {"store": f"postgresql://tether:{SECRET}@127.0.0.1:5432/test"},
    "platforms": {"telegram": {"token": f"123456:{SECRET}"}},
    "llm": {
        "providers": {
            "p": {
                "base_url": f"https://user:{SECRET}@proxy.example/v1",
                "api_key": SECRET,
                "headers": {"Authorization": f"Bearer {SECRET}"},
            }
        },
        "models": {"m": {"provider": "p", "model": "gpt"}},
    },
}

#: Where a value may land: every kind of key the schema has (numbers, enums, strings,
#: lists, nested sections, validated strings), a few unknown ones.
KNOWN_PATHS = [
    ("agent", "name"),
    ("agent", "handler"),
    ("agent", "group_sessions"),
    ("memory", "history_tokens"),
    ("memory", "task_token_budget"),
    ("memory", "sqlite_synchronous"),
    ("http", "port"),
    ("http", "enabled"),
    ("pipeline", "max_attempts"),
    ("pipeline", "backoff_base"),
    ("pipeline", "handler_timeout"),
    ("outbox", "concurrency"),
    ("platforms", "console", "user"),
    ("platforms", "telegram", "mode"),
    ("platforms", "telegram", "poll_timeout"),
    ("platforms", "telegram", "webhook", "path"),
    ("platforms", "discord"),
    ("platforms", "feishu", "domain"),
    ("llm", "providers", "p", "timeout"),
    ("llm", "models", "m", "context_tokens"),
    ("llm", "routes"),
    ("llm", "default"),
    ("access", "allow"),
    ("access", "rate_limit", "per_seconds"),
    ("jobs",),
    ("jobs", 0, "cron"),
    ("jobs", 0, "timezone"),
    ("jobs", 0, "grace"),
    ("jobs", 0, "deliver"),
    ("plugins",),
    ("logging", "format"),
    ("nonsense",),
    ("agent", "nonsense"),
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(
        [
            SECRET,
            f"x{SECRET}y",
            f"postgresql://u:{SECRET}@h/db",
            "sqlite://",
            "0 0 31 2 *",
            "* * * * *",
            "telegram:1",
            "Europe/Berlin",
            "${HOSTILE_UNSET}",
            "${HOSTILE_VAR}",
            "${HOSTILE_VAR:-5}",
            "/path",
            "echo",
            "llm",
        ]
    ),
)
keys = st.text(max_size=8)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)

#: Pieces that break YAML parsers, joined at random into documents.
FRAGMENTS = [
    "agent:", "pipeline:", "jobs:", "plugins:", "memory:", "platforms:", "telegram:",
    "  name: ", "  max_attempts: ", "  store: ", "  token: ", "\n", "\n  ", "- ", "? ",
    ": ", ", ", "[", "]", "{", "}", "'", '"', "&a ", "&b ", "*a", "*b", "<<: ", "<<: *a",
    "!!int ", "!!float ", "!!bool ", "!!str ", "!!binary ", "!!timestamp ", "!!set ",
    "!!omap ", "!!python/object:os.system ", "!foo ", "|\n", ">-\n", "# c\n", "---\n",
    "...\n", "%YAML 1.1\n", "%TAG ! x\n", "\t", "\\", "~", "null", "true", "yes", ".inf",
    ".nan", "-.inf", "0x", "0o", "0b", "1_000", "1e400", "2001-02-30", "2001-12-14t21:59",
    "9" * 4400, "0x" + "f" * 4000, "${HOSTILE_VAR}", "${", "}", "\x00", "\x85",
    "\ufeff", "é", "😀",
]  # fmt: skip
documents = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=6), max_size=40).map("".join)


def alias_chain(levels: int, fanout: int, under: str) -> str:
    """``levels`` anchors, each a list of ``fanout`` aliases of the one before: a bomb
    when both are large, an ordinary reuse when small."""
    lines = [f"{under}:", f'  - &l0 ["{SECRET}"]']
    for level in range(1, levels + 1):
        lines.append(f"  - &l{level} [{', '.join([f'*l{level - 1}'] * fanout)}]")
    return "\n".join(lines) + "\n"


@contextmanager
def memory_ceiling(headroom: int = 1 << 30) -> Iterator[None]:
    """At most ``headroom`` more bytes of address space: a regression that expands a bomb
    fails with MemoryError, instead of the machine's OOM killer picking a victim."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    status = Path("/proc/self/status").read_text()
    [kilobytes] = re.findall(r"^VmSize:\s+(\d+) kB", status, re.MULTILINE)
    used = int(kilobytes) * 1024
    ceiling = used + headroom if hard == resource.RLIM_INFINITY else min(used + headroom, hard)
    resource.setrlimit(resource.RLIMIT_AS, (ceiling, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def nested(path: tuple[str | int, ...], value: Any) -> Any:
    """``value`` under ``path``: ``("jobs", 0, "cron")`` → ``{"jobs": [{"cron": value}]}``."""
    for part in reversed(path):
        value = [value] if isinstance(part, int) else {part: value}
    return value


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merged(out[key], value) if both else value
    return out


_WHERE = re.compile(
    r"line \d+, column \d+: \S"  # before there are keys
    r"|not UTF-8 text: byte 0x[0-9a-f]{2} at offset \d+ \(line \d+\)$"
    r"|the top level must be a mapping, not \w+$"
    r"|… and \d+ more problems$"
    r"|invalid YAML: \S"
    r"|[^\s:][^\n]*?: \S"  # a key path, then what is wrong there
)


def outcome(load_it: Any, source: str = SOURCE, secret: bool = True) -> Settings | str:
    """Settings, or the ConfigError's message after checking it keeps the contract
    (``secret``: SECRET is configured as a secret, so it must not be in the message)."""
    try:
        result = load_it()
    except ConfigError as exc:
        message = str(exc)
    else:
        assert isinstance(result, Settings)
        return result
    lines = message.split("\n")
    assert lines and all(line.startswith(f"{source}: ") for line in lines), message
    for line in lines:
        assert _WHERE.match(line, len(source) + 2), line
    for form in SECRET_FORMS if secret else ():
        assert form not in message, message
    return message


@given(documents)
def test_yaml_ish_text(text: str) -> None:
    # Whether the text makes SECRET a secret is up to chance: only the shape is checked.
    outcome(lambda: load_text(text, source=SOURCE, env={"HOSTILE_VAR": SECRET}), secret=False)


@pytest.mark.slow
@given(st.lists(st.tuples(st.sampled_from(KNOWN_PATHS), values), max_size=6))
def test_random_values_in_known_keys_next_to_secrets(
    assignments: list[tuple[tuple[str | int, ...], Any]],
) -> None:
    document = SECRETS_CONFIG
    for path, value in assignments:
        document = merged(document, nested(path, value))
    text = yaml.safe_dump(document, allow_unicode=True)
    outcome(lambda: load_text(text, source=SOURCE, env={"HOSTILE_VAR": SECRET}))


@given(
    st.integers(min_value=0, max_value=12),
    st.integers(min_value=1, max_value=12),
    st.sampled_from(["nonsense", "plugins", "access:\n  allow", "jobs"]),
)
def test_alias_chains_of_any_fanout(levels: int, fanout: int, under: str) -> None:
    text = yaml.safe_dump(SECRETS_CONFIG) + alias_chain(levels, fanout, under)
    with memory_ceiling():
        result = outcome(lambda: load_text(text, source=SOURCE))
    if fanout**levels > 20_000:  # far past the bound: refused, naming the alias
        assert isinstance(result, str) and "alias *l" in result, result


@given(st.binary(max_size=200))
def test_bytes_that_may_not_be_utf8(tmp_path_factory: Any, data: bytes) -> None:
    path = tmp_path_factory.mktemp("hostile") / "tether.yaml"
    path.write_bytes(data)
    outcome(lambda: load(path), source=str(path))


@given(
    st.sampled_from(KNOWN_PATHS), st.text(max_size=20), st.sampled_from(["", "\udcff", "\ud800x"])
)
def test_environment_values_that_may_not_be_utf8(
    path: tuple[str | int, ...], value: str, undecodable: str
) -> None:
    text = yaml.safe_dump(merged(SECRETS_CONFIG, nested(path, "${HOSTILE_VAR}")))
    outcome(lambda: load_text(text, source=SOURCE, env={"HOSTILE_VAR": value + undecodable}))


def test_the_suite_would_see_a_leak() -> None:
    """The secret really is echoed where the schema shows values, so a redactor that
    missed it would fail the properties above."""
    text = yaml.safe_dump(merged(SECRETS_CONFIG, {"agent": {"handler": SECRET}}))
    message = outcome(lambda: load_text(text, source=SOURCE))
    assert isinstance(message, str) and "agent.handler: " in message and "***" in message
