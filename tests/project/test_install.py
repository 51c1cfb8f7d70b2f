"""A fresh install puts one package, ``tether``, into site-packages — nothing generic.

The wheel is built from a copy of the repository's files (as a fresh clone has them),
installed into an empty target folder, and imported by an interpreter that sees only that
folder and the dependencies (``-S``: no ``.pth`` files, so the editable install of the
checkout is not on the path). A user's own ``config.py`` or ``memory/`` can then never
shadow, or be shadowed by, Tether's.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import ROOT, write_config

FOLDERS = ("gateway", "adapters", "memory", "scheduler", "config")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "tether", src / "tether", symlinks=True, ignore=ignore)
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, src / folder, ignore=ignore)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("tether_gateway-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_holds_one_top_level_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"tether"}
    for folder in FOLDERS:
        assert f"tether/{folder}/__init__.py" in names
    assert "tether/adapters/kit.py" in names and "tether/py.typed" in names
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "tether = tether.gateway.cli:main" in text
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    assert "License-Expression: MIT" in zipfile.ZipFile(wheel).read(metadata).decode()


@pytest.mark.slow
def test_installed_tether_imports_and_generic_names_do_not(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    probe = f"""
import importlib.util, sys
sys.path[:0] = [{str(target)!r}, {sysconfig.get_paths()["purelib"]!r}]
from tether import Router, Context
import tether.gateway.cli
assert tether.gateway.cli.__file__.startswith({str(target)!r}), tether.gateway.cli.__file__
assert Router.__module__ == "tether.gateway.handler.routing"
assert Context.__module__ == "tether.gateway.handler.context"
print(sorted(n for n in {FOLDERS!r} if importlib.util.find_spec(n) is not None))
"""
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"  # no top-level gateway, memory, config, ...


@pytest.mark.slow
def test_the_console_templates_and_static_files_are_in_the_wheel(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("templates/base.html", "templates/chat.html", "static/console.js"):
        assert f"tether/gateway/web/{name}" in names


@pytest.fixture(scope="module")
def telegram_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel and its ``telegram`` extra, from the package
    index: what ``pip install 'tether-gateway[telegram]'`` gives a user."""
    venv = tmp_path_factory.mktemp("venv") / "telegram"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", f"{wheel}[telegram]"],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return venv


@pytest.mark.slow
def test_a_telegram_install_holds_no_other_part_and_names_a_missing_extra(
    telegram_venv: Path, tmp_path: Path
) -> None:
    listed = subprocess.run(
        [str(telegram_venv / "bin" / "pip"), "list", "--format=freeze"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.lower()
    installed = {line.split("==")[0] for line in listed.splitlines()}
    assert {"python-telegram-bot", "tether-gateway"} <= installed
    others = {"lark-oapi", "discord.py", "slack-sdk", "asyncpg", "mcp", "playwright", "openai"}
    assert not installed & others
    discord = write_config(tmp_path, platforms={"discord": {"token": "abc.def.ghi"}})
    done = subprocess.run(
        [str(telegram_venv / "bin" / "tether"), "check", "-c", str(discord)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert done.stderr == (
        "tether: platforms.discord needs the discord extra (discord.py not installed):"
        " pip install 'tether-gateway[discord]'\n"
    )


@pytest.mark.slow
async def test_a_telegram_install_runs_a_bot_against_the_fake(
    telegram_venv: Path, tmp_path: Path, telegram: FakeTelegram
) -> None:
    platform = {"token": telegram.token, "base_url": telegram.base_url}
    config = write_config(tmp_path, platforms={"telegram": platform})
    proc = await asyncio.create_subprocess_exec(
        str(telegram_venv / "bin" / "tether"), "run", "-c", str(config),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path,
    )  # fmt: skip
    try:
        telegram.push(message=telegram.message(4242, "hello from a lean install"))
        await telegram.wait_for(lambda: len(telegram.sent) >= 1, timeout=60)
    finally:
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert telegram.sent[0]["text"] == "hello from a lean install", err.decode()[-2000:]
