"""The manual does not contradict itself or the program.

Each check here was a real contradiction once: platform pages whose "Not yet" lists said
buttons and media could not be sent while docs/buttons.md and docs/media.md showed them
working, a page saying Feishu files are never downloaded beside ``ctx.download``, a YAML
sample a reader could not paste (``[${A}, ${B}]`` is not YAML unquoted) and a ``grep``
example that never matched the JSON log lines. The samples are run against the real
thing (PyYAML, the real log renderer, the real ``grep``), not compared with strings.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import structlog
import yaml

from gateway.ops import logs
from tests.support.config import ROOT
from tether.config.loader import ConfigError, load_text

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^ *```(\w*)\n(.*?)^ *```$", re.DOTALL | re.MULTILINE)

#: What docs/buttons.md and docs/media.md document as working on every platform: a
#: "Not yet" list must not say any of it cannot be sent.
WORKING = ("button", "keyboard", "photo", "image", "file", "media", "video", "audio", "document")

#: Claims once made and since made false, as patterns no page may match.
RETRACTED = {
    "files are not downloaded (ctx.download fetches them)": re.compile(
        r"files are not downloaded(?!\s+until)", re.IGNORECASE
    ),
}


def _not_yet(text: str) -> str:
    """A page's "## Not yet" section, parenthetical asides and link targets removed."""
    match = re.search(r"^## Not yet\n(.*?)(?=^## |\Z)", text, re.DOTALL | re.MULTILINE)
    if not match:
        return ""
    section, nested = match.group(1), ""
    while nested != section:  # innermost first: a link inside an aside
        nested, section = section, re.sub(r"\([^()]*\)", "", section)
    return section


def unsendable(text: str) -> list[str]:
    """The working features a page's "Not yet" list says cannot be sent."""
    found = []
    for sentence in re.split(r"(?<=[.;])\s", _not_yet(text)):
        if re.search(r"cannot\s+be\s+\*?sent", sentence):
            found += [word for word in WORKING if word in sentence.lower()]
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_not_yet_lists_do_not_deny_buttons_or_media(page: Path) -> None:
    assert unsendable(page.read_text()) == []


def test_the_not_yet_check_catches_the_old_wording() -> None:
    old = "## Not yet\n\nInline keyboards, photos and other media cannot be *sent* yet.\n"
    assert unsendable(old) == ["keyboard", "photo", "media"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_repeats_a_retracted_claim(page: Path) -> None:
    text = page.read_text()
    assert [name for name, pattern in RETRACTED.items() if pattern.search(text)] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_yaml_block_parses(page: Path) -> None:
    for lang, body in _FENCE.findall(page.read_text()):
        if lang in ("yaml", "yml"):
            yaml.safe_load(body)  # raises with the line and column


def grep_examples() -> list[tuple[str, str]]:
    """Every ``grep '...'`` on a docs page whose pattern names a JSON field."""
    found = []
    for page in PAGES:
        for pattern in re.findall(r"grep '([^']+)'", page.read_text()):
            if re.search(r'"\w+":', pattern):
                found.append((page.name, pattern))
    return found


def test_the_docs_have_grep_examples() -> None:
    assert {page for page, _ in grep_examples()} >= {"cron.md", "operations.md"}


@pytest.mark.skipif(shutil.which("grep") is None, reason="needs grep")
@pytest.mark.parametrize(("page", "pattern"), grep_examples())
def test_grep_examples_match_a_real_log_line(page: str, pattern: str, tmp_path: Path) -> None:
    """A line logged through the real JSON renderer with the fields the pattern names
    (a value the pattern cuts short gets a tail), written to a file the real grep reads."""
    fields = {
        key: value if closed else f"{value}:9"
        for key, value, closed in re.findall(r'"(\w+)":\s*"([^"]*)(")?', pattern)
    }
    assert fields, f"{page}: {pattern!r} names no field"
    log_file = tmp_path / "tether.log"
    with log_file.open("w") as out:
        logs.configure("info", "json", stream=out)
        structlog.get_logger("docs").info("cron.fired", **fields)
        logs.flush()
    assert log_file.read_text().strip(), "nothing was logged"
    found = subprocess.run(["grep", pattern, str(log_file)], capture_output=True, check=False)
    assert found.returncode == 0, f"{page}: {pattern!r} does not match {log_file.read_text()!r}"


#: YAML blocks that are not a whole config, each named by a line only it has: reference
#: blocks with placeholders, and fragments that lean on a section shown elsewhere.
FRAGMENTS = {
    ("agent.md", "base_url: URL"): "the reference, NAME and URL placeholders",
    ("agents.md", "llm: ..."): "leans on agent.md's llm: section",
    ("configuration.md", "name: Tether  "): "the reference, ... for each platform's section",
    ("console.md", 'password_hash: "scrypt$32768$8$1$..."'): "a hash placeholder",
    ("media.md", "vision: true}"): "a model fragment of an llm: section",
    ("recall.md", "model: text-embedding-3-small"): "leans on an llm: section",
    ("slack.md", "socket_mode_enabled: true"): "the Slack app manifest, not a config",
    ("slack.md", "socket_mode_enabled: false"): "a fragment of the Slack app manifest",
}


def _secret_value(name: str) -> str:
    """A value an environment variable of the samples could hold: a secret token where
    the name says so, Slack's token shapes for its tokens, else a Telegram-shaped bot
    token (which the other fields take too)."""
    if "SECRET" in name:
        return "A" * 40
    return _SHAPED.get(name, "123456:ABCdefGHIjklMNOpqrSTUvwxYZ0123456789")


#: Variables whose values are checked for a prefix (docs/slack.md).
_SHAPED = {"SLACK_BOT_TOKEN": "xoxb-1-docs", "SLACK_APP_TOKEN": "xapp-1-docs"}


def yaml_configs() -> list[tuple[str, str]]:
    return [
        (page.name, body)
        for page in PAGES
        for lang, body in _FENCE.findall(page.read_text())
        if lang in ("yaml", "yml")
    ]


@pytest.mark.parametrize(("page", "body"), yaml_configs())
def test_every_whole_yaml_config_passes_the_loader(page: str, body: str) -> None:
    """What ``tether check`` validates: a block pasted as tether.yaml loads, with its
    ``${VAR}``s set (a Telegram token is checked for its shape)."""
    if any(page == fragment and marker in body for fragment, marker in FRAGMENTS):
        return
    env = {name: _secret_value(name) for name in re.findall(r"\$\{(\w+)", body)}
    try:
        load_text(body, source=page, env=env)
    except ConfigError as exc:
        pytest.fail(f"{page}: a YAML sample does not load: {exc}\n{body}")


def test_every_listed_fragment_is_still_on_its_page() -> None:
    found = yaml_configs()
    for (page, marker), why in FRAGMENTS.items():
        assert any(p == page and marker in body for p, body in found), (page, marker, why)
