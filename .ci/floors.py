"""The floors check: every declared lower bound is a version the code works with.

A ``>=X`` in pyproject.toml is a promise to whoever installs tether-gateway beside other
packages: their resolver may pick X. Nothing else ever installs X (every other venv takes
the newest), so the promise is only true if something installs exactly X and runs the
code. This does: it turns each lower bound of the core, of every extra and of the test
tools into ``==X``, installs ``.[all]`` with those pins into a fresh venv, and runs a smoke
suite that touches each dependency (the core, each platform's SDK, both stores, the model
client, MCP). Exits non-zero when the install or any test fails.

Usage: python .ci/floors.py [--venv DIR] [--keep] [-- extra pytest args]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
import tomllib
import venv
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTION = "tether-gateway"

#: The test tools from the dev extra the smoke suite runs on (linters, type stubs and
#: Playwright are not needed by it: the browser tests are deselected).
TEST_TOOLS = ("pytest", "pytest-asyncio", "hypothesis")

#: The smoke suite: fast and representative, one or more folders per dependency.
SMOKE = (
    # core: the pipeline, the outbox, config (pydantic, PyYAML), cron (APScheduler),
    # the HTTP side and metrics (aiohttp, prometheus-client), tokens (tiktoken)
    "tests/gateway/core/test_pipeline.py",
    "tests/gateway/core/test_outbox.py",
    "tests/config",
    "tests/scheduler",
    "tests/gateway/ops/test_ops.py",
    "tests/memory/test_tokens.py",
    "tests/adapters/test_url_guard.py",
    # each platform's normalize and send with its SDK
    "tests/adapters/telegram",
    "tests/adapters/discord",
    "tests/adapters/feishu",
    "tests/adapters/test_buttons_normalize.py",
    "tests/adapters/test_media.py",
    # the stores: SQLite (aiosqlite) and PostgreSQL (asyncpg)
    "tests/memory/test_store_contract.py",
    "tests/memory/test_task_store_contract.py",
    # documents (pypdf), the model client (openai) against the fake model
    "tests/memory/test_documents.py",
    "tests/memory/test_embeddings.py",
    "tests/gateway/llm",
    "tests/gateway/agent",
    # MCP tools
    "tests/gateway/tools",
    # the console (Jinja2), without the browser (the layout and UI modules import
    # Playwright, which is not installed here)
    "tests/gateway/web/test_web_auth.py",
    "tests/gateway/web/test_web_forms.py",
    "tests/gateway/web/test_web_guard.py",
    "tests/gateway/web/test_web_sessions.py",
    "tests/gateway/web/test_web_timeline.py",
)
MARKERS = "not slow and not browser and not crash"


def requirements(pyproject: dict[str, object]) -> list[Requirement]:
    """The core's, every extra's and the test tools' requirements, without the extras
    that only name this distribution again (``all``, ``dev``)."""
    project = pyproject["project"]
    assert isinstance(project, dict)
    found = [Requirement(line) for line in project["dependencies"]]
    for name, lines in project["optional-dependencies"].items():
        for line in lines:
            req = Requirement(line)
            if req.name == DISTRIBUTION:
                continue
            if name == "dev" and req.name not in TEST_TOOLS:
                continue
            found.append(req)
    return found


def floor(req: Requirement) -> str:
    """The ``==X`` constraint line for a requirement's ``>=X``, marker kept."""
    lows = [spec.version for spec in req.specifier if spec.operator == ">="]
    if len(lows) != 1:
        raise SystemExit(f"floors: {req} has no single >= lower bound; every dependency needs one")
    line = f"{req.name}=={lows[0]}"
    return f"{line}; {req.marker}" if req.marker else line


#: pip's line for each package the machine's local extra index lacks: harmless, and
#: dozens of them would hide the line that matters.
NOISE = "is ignored: it is neither a file nor a directory"


def run(*args: str | Path, env: dict[str, str] | None = None) -> None:
    """One step, echoed; a failing step ends the check with its exit code."""
    print("+", " ".join(str(a) for a in args), flush=True)
    with subprocess.Popen(
        [str(a) for a in args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if NOISE not in line:
                print(line, end="", flush=True)
    if proc.returncode:
        raise SystemExit(f"floors: {Path(args[0]).name} exited {proc.returncode}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv-floors")
    parser.add_argument(
        "--keep", action="store_true", help="reuse the venv as it is (no fresh install)"
    )
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args()

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = requirements(pyproject)
    constraints = [floor(req) for req in reqs]
    target: Path = args.venv
    bin_dir = target / "bin"
    started = time.monotonic()

    if not args.keep:
        print(f"floors: a fresh venv at {target}", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(target)
        pins = target / "constraints.txt"
        pins.write_text("\n".join(constraints) + "\n")
        print(pins.read_text(), end="", flush=True)
        pip = bin_dir / "pip"
        run(pip, "install", "-q", "--upgrade", "pip")
        tools = [req.name for req in reqs if req.name in TEST_TOOLS]
        run(pip, "install", "-q", "-c", pins, f"{ROOT}[all]", *tools)
        run(pip, "freeze")
    installed = time.monotonic()

    env = dict(
        os.environ, VIRTUAL_ENV=str(target), PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    )
    env.pop("PYTHONPATH", None)
    run(
        bin_dir / "python",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        MARKERS,
        *SMOKE,
        *args.pytest_args,
        env=env,
    )
    done = time.monotonic()
    print(
        f"floors: passed; install {installed - started:.0f}s, smoke suite {done - installed:.0f}s",
        flush=True,
    )


if __name__ == "__main__":
    main()
