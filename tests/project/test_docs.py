"""The manual stays usable: its links resolve, the front door stays short, samples compile.

README.md is the front door and docs/ holds the rest; a page renamed or a heading reworded
would otherwise leave links that quietly go nowhere. Headings become anchors the way GitHub
makes them, so a link that works here works on the rendered page.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.config import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Pages whose Python samples must at least compile: what a bot author copies first.
SAMPLED = [ROOT / "README.md", ROOT / "docs" / "handlers.md"]

_FENCE = re.compile(r"^ *```(\w*)\n(.*?)^ *```$", re.DOTALL | re.MULTILINE)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The page without its fenced code blocks (a ``# comment`` there is no heading)."""
    return _FENCE.sub("", text)


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings, ``-1``, ``-2`` … for repeats."""
    seen: dict[str, int] = {}
    found = set()
    for line in _prose(text).splitlines():
        match = re.match(r"#{1,6} (.+)", line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def local_links(page: Path) -> list[str]:
    links = _LINK.findall(_prose(page.read_text()))
    return [link for link in links if not re.match(r"[a-z]+:", link)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for link in local_links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no file {path}")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target.read_text()):
            broken.append(f"{link}: no heading #{anchor} in {target.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(ROOT / link.partition("#")[0]).resolve() for link in local_links(ROOT / "README.md")}
    missing = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not missing, f"docs pages the README does not link: {missing}"


def test_readme_is_a_front_door() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size <= 16 * 1024, f"README.md is {size} bytes; move detail into docs/"


@pytest.mark.parametrize("page", SAMPLED, ids=lambda p: p.name)
def test_python_samples_compile(page: Path) -> None:
    samples = [code for lang, code in _FENCE.findall(page.read_text()) if lang == "python"]
    assert samples, f"{page.name} has no python sample"
    for number, code in enumerate(samples, 1):
        compile(code, f"{page.name}, python sample {number}", "exec")


def test_anchors_follow_github() -> None:
    text = "# Feishu / Lark\n## Replies (`resend_unknown`)\n## Logs\n## Logs\n```\n# no\n```\n"
    assert anchors(text) == {"feishu--lark", "replies-resend_unknown", "logs", "logs-1"}


#: An import of Tether a bot author could copy: ``from tether.x import …`` or ``import tether.x``.
_IMPORT = re.compile(r"\b(?:from\s+(tether(?:\.\w+)*)\s+import|import\s+(tether(?:\.\w+)*))")
#: Where the manual may name what a bot author imports.
PUBLIC_MODULES = {"tether", "tether.testing"}
EXAMPLES = sorted((ROOT / "examples").rglob("*.py"))


def outside_imports(text: str) -> list[str]:
    found = (a or b for a, b in _IMPORT.findall(text))
    return sorted({module for module in found if module not in PUBLIC_MODULES})


@pytest.mark.parametrize("page", [*PAGES, *EXAMPLES], ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_and_examples_import_only_the_public_surface(page: Path) -> None:
    """Every import the manual and the examples show comes from ``tether`` or
    ``tether.testing``: a file moved inside the package must never break user code that
    followed the docs. (docs/development.md is for contributors and may name insides,
    but not as an import to copy.)"""
    assert not outside_imports(page.read_text()), page.name


def test_the_import_check_catches_each_shape() -> None:
    text = (
        "from tether import Router\nfrom tether.testing import Bot\n"
        "(`from tether.gateway.handler.tool import ToolError`)\nimport tether.memory.store\n"
    )
    assert outside_imports(text) == ["tether.gateway.handler.tool", "tether.memory.store"]
