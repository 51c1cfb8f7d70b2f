"""The shape of the code: no import cycles, memory/ below the gateway, small modules.

Read from the source with ``ast``, not by importing, so that every import counts: those
inside functions and under ``TYPE_CHECKING`` too. A lazy or type-only import still ties
two modules together; it only hides the cycle from the interpreter, not from the reader.
"""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import tether

#: The installed package: its own modules, and one link per repository folder.
PACKAGE = Path(tether.__file__).parent
REPO = PACKAGE.resolve().parent
FOLDERS = {"gateway", "adapters", "memory", "scheduler", "config"}
MAX_LINES = 400
#: Modules a folder may hold before it wants rooms of its own.
MAX_MODULES = 15

#: module → (imported module → line of the first import), within one package.
Graph = dict[str, dict[str, int]]


def modules(folder: Path, name: str) -> dict[str, Path]:
    """Every module under ``folder`` by dotted name, following the package's links to
    the repository's folders."""
    found: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if path.suffix == ".py":
            found[name if path.stem == "__init__" else f"{name}.{path.stem}"] = path.resolve()
        elif path.is_dir() and path.name != "__pycache__":
            found.update(modules(path, f"{name}.{path.name}"))
    return found


def imported(name: str, path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """The known modules ``name`` imports, anywhere in its file, with their lines.

    ``from pkg import x`` is an edge to ``pkg.x`` when that is a module, else to ``pkg``.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            if target in known and target != name:
                yield target, node.lineno


def import_graph(package: Path, name: str) -> tuple[Graph, dict[str, Path]]:
    found = modules(package, name)
    graph: Graph = {}
    for module, path in found.items():
        edges = graph.setdefault(module, {})
        for target, line in imported(module, path, set(found)):
            edges.setdefault(target, line)
    return graph, found


def cycles(graph: Graph) -> list[list[str]]:
    """One cycle through each group of modules that import each other (Tarjan's SCCs)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while (top := stack.pop()) != node:
                group.append(top)
            group.append(node)
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_loop(graph, group) for group in groups]


def _loop(graph: Graph, group: list[str]) -> list[str]:
    """A shortest path from the group's first module back to itself, inside the group."""
    start, members = group[0], set(group)
    paths = {start: [start]}
    queue = [start]
    for node in queue:
        for nxt in sorted(graph[node]):
            if nxt == start:
                return [*paths[node], start]
            if nxt in members and nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    raise AssertionError(f"no loop in {group}")  # a strongly connected group has one


def describe(graph: Graph, files: dict[str, Path], loop: list[str]) -> str:
    """One line per import in ``loop``, with the file and line that makes it."""
    return "\n".join(
        f"  {a} -> {b}  ({where(files[a])}:{graph[a][b]})" for a, b in itertools.pairwise(loop)
    )


def where(path: Path) -> Path:
    return path.relative_to(REPO) if path.is_relative_to(REPO) else path


@pytest.mark.slow
def test_the_walk_finds_every_folder() -> None:
    graph, _ = import_graph(PACKAGE, "tether")
    assert {name.split(".")[1] for name in graph if name.count(".") >= 1} >= FOLDERS
    assert {"tether.events", "tether.memory.store", "tether.gateway.core.pipeline"} <= set(graph)


@pytest.mark.slow
def test_no_import_cycles() -> None:
    graph, files = import_graph(PACKAGE, "tether")
    found = cycles(graph)
    report = "\n\n".join(describe(graph, files, loop) for loop in found)
    assert not found, f"{len(found)} import cycle(s):\n{report}"


#: The floors, lowest first. A module may import its own floor and any floor below it,
#: never one above: the ground floor is the shared vocabulary (``tether/*.py``); the
#: gateway's subpackages each hold one concern; the composition root (app, assembly,
#: reload, cli, init) builds them all; the public face (``tether`` itself and
#: ``tether.testing``) re-exports from anywhere.
FLOORS = [
    "ground",
    "tether.memory",
    "tether.config",
    "tether.adapters",
    "tether.scheduler",
    "tether.gateway.ops",
    "tether.gateway.llm",
    "tether.gateway.handler",
    "tether.gateway.core",
    "tether.gateway.builtin",
    "tether.gateway.tools",
    "tether.gateway.tasks",
    "tether.gateway.web",
    "tether.gateway.agent",
    "tether.gateway.inspection",
    "tether.gateway",
    "face",
]
FACE = {"tether", "tether.__main__", "tether.testing"}


def floor(module: str) -> str:
    """The floor ``module`` lives on (see :data:`FLOORS`)."""
    if module in FACE or module.startswith("tether.testing."):
        return "face"
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in FOLDERS:
        if parts[1] == "gateway" and len(parts) >= 3:
            inner = f"tether.gateway.{parts[2]}"
            if inner in FLOORS:
                return inner
        return f"tether.{parts[1]}"
    return "ground"


def downward_violations(graph: Graph, files: dict[str, Path]) -> list[str]:
    rank = {name: index for index, name in enumerate(FLOORS)}
    return [
        f"{module} ({floor(module)}) -> {target} ({floor(target)})  ({where(files[module])}:{line})"
        for module, edges in sorted(graph.items())
        for target, line in edges.items()
        if rank[floor(target)] > rank[floor(module)]
    ]


@pytest.mark.slow
def test_every_module_has_a_floor() -> None:
    graph, _ = import_graph(PACKAGE, "tether")
    homeless = [
        m
        for m in graph
        if m.startswith("tether.gateway.") and m.count(".") >= 3 and floor(m) == "tether.gateway"
    ]
    assert not homeless, f"gateway subpackages missing from FLOORS: {homeless}"


@pytest.mark.slow
def test_every_import_points_down() -> None:
    graph, files = import_graph(PACKAGE, "tether")
    upward = downward_violations(graph, files)
    assert not upward, f"{len(upward)} import(s) point up a floor:\n" + "\n".join(upward)


@pytest.mark.slow
def test_floors_have_no_cycles() -> None:
    """At the level of folders and subpackages, too: what points down cannot loop."""
    graph, _ = import_graph(PACKAGE, "tether")
    floors: Graph = {}
    for module, edges in graph.items():
        mine = floors.setdefault(floor(module), {})
        for target in edges:
            if floor(target) != floor(module):
                mine.setdefault(floor(target), 0)
    assert cycles(floors) == []


@pytest.mark.slow
def test_no_product_module_is_over_400_lines() -> None:
    _, files = import_graph(PACKAGE, "tether")
    big = {
        name: count
        for name, path in files.items()
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not big, f"modules over {MAX_LINES} lines: {big}"


def test_no_folder_holds_more_than_15_modules() -> None:
    """A folder past that wants rooms of its own (the product's and the tests' alike)."""
    folders = [REPO / name for name in sorted(FOLDERS)] + [REPO / "tether", REPO / "tests"]
    crowded = {}
    for top in folders:
        for folder in [top, *(d for d in top.rglob("*") if d.is_dir())]:
            if folder.is_symlink() or "__pycache__" in folder.parts:
                continue
            count = len([p for p in folder.glob("*.py") if not p.is_symlink()])
            if count > MAX_MODULES:
                crowded[str(folder.relative_to(REPO))] = count
    assert not crowded, f"folders over {MAX_MODULES} modules: {crowded}"


@pytest.mark.slow
def test_importing_the_inbox_loads_no_llm_mcp_web_agent_or_tool_module() -> None:
    """The engine stands on its own: what an adapter or the scheduler hands events to
    loads neither the model client nor the tools, the agent or the console (nor their
    libraries). A fresh interpreter, so nothing imported by this test run counts."""
    code = "import sys, tether.gateway.core.inbox\nprint('\\n'.join(sorted(sys.modules)))\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    assert "tether.gateway.core.inbox" in loaded
    above = (
        "tether.gateway.llm",
        "tether.gateway.tools",
        "tether.gateway.web",
        "tether.gateway.agent",
        "tether.gateway.builtin",
        "tether.gateway.handler",
    )
    libraries = {"openai", "mcp", "jinja2", "aiohttp.web", "tiktoken", "telegram", "discord"}
    found = sorted(m for m in loaded if m.startswith(above) or m in libraries)
    assert not found, f"importing the inbox loaded {found}"


# -- the checker checks: a planted cycle is found, however it is hidden ----------------


def test_cycles_hidden_in_functions_type_checking_and_relative_imports_are_found(
    tmp_path: Path,
) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import c\n"
    )
    (pkg / "sub" / "c.py").write_text("from .. import a\n")
    (pkg / "d.py").write_text("import pkg.a\nfrom pkg import sub\n")
    graph, _ = import_graph(pkg, "pkg")
    assert graph["pkg.d"] == {"pkg.a": 1, "pkg.sub": 2}
    assert cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.sub.c", "pkg.a"]]
