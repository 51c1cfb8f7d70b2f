"""Config: every error names the file and the key path; secrets never print."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from tests.conftest import TETHER
from tether.config import ConfigError, load, load_text
from tether.gateway.cli import main


def check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code = main(["check", "-c", str(path)])
    captured = capsys.readouterr()
    return code, captured.err


@pytest.mark.parametrize(
    "text, expected",
    [
        ("agent:\n  nmae: Bob\n", "agent.nmae: unknown key"),
        (
            "pipeline:\n  max_attempts: lots\n",
            "pipeline.max_attempts: Input should be a valid integer",
        ),
        ("agent:\n  name: ${TETHER_SURELY_UNSET}\n", "agent.name: environment variable"),
        ("plugins:\n  - ok\n  - ${TETHER_SURELY_UNSET}\n", "plugins[1]: environment variable"),
        ("memory:\n  store: mysql://x\n", "memory.store: Value error, must start with sqlite:///"),
        ("- just\n- a list\n", "the top level must be a mapping"),
        ("agent: [unclosed\n", "invalid YAML"),
    ],
)
def test_invalid_config_exits_nonzero_naming_the_key_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    code, err = check(tmp_path, text, capsys)
    assert code == 2
    assert f"{tmp_path / 'bad.yaml'}: " in err
    assert expected in err


def test_check_subprocess_reports_unknown_key(tmp_path: Path) -> None:
    path = tmp_path / "tether.yaml"
    path.write_text("http:\n  prot: 8080\n")
    result = subprocess.run([TETHER, "check", "-c", str(path)], capture_output=True, text=True)
    assert result.returncode == 2
    assert "http.prot: unknown key" in result.stderr


def test_interpolation_with_defaults_and_env() -> None:
    settings = load_text(
        "agent:\n  name: ${BOT_NAME:-Fallback}\n  persona: 'Hi ${WHO}, ok'\n",
        env={"WHO": "there"},
    )
    assert settings.agent.name == "Fallback"
    assert settings.agent.persona == "Hi there, ok"
    assert load_text("agent: {name: '${BOT_NAME:-x}'}", env={"BOT_NAME": "Set"}).agent.name == "Set"


def test_env_values_cannot_inject_structure() -> None:
    settings = load_text("agent:\n  name: ${EVIL}\n", env={"EVIL": "a\nhandler: llm"})
    assert settings.agent.name == "a\nhandler: llm"
    assert settings.agent.handler == "echo"


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read"):
        load(tmp_path / "nope.yaml")


def test_defaults_without_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = load(None)
    assert settings.memory.store == "sqlite:///tether.db"
    assert settings.platforms.console.enabled
    assert settings.agent.handler == "echo"


def test_check_prints_effective_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text("agent: {name: Ada}\n")
    assert main(["check", "-c", str(path)]) == 0
    out = capsys.readouterr().out
    assert "name: Ada" in out and "store: sqlite:///tether.db" in out


def test_check_rejects_a_plugin_that_does_not_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = check(tmp_path, "plugins: ['no_such_module_x:router']\n", capsys)
    assert code == 1
    assert "cannot import 'no_such_module_x'" in err


def test_chat_in_a_pipe_answers_and_history_survives_restart(tmp_path: Path) -> None:
    path = tmp_path / "tether.yaml"
    path.write_text(f"memory: {{store: 'sqlite:///{tmp_path}/chat.db'}}\n")
    first = subprocess.run(
        [TETHER, "chat", "-c", str(path)], input="hi\n/start now\n", capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout == "hi\n/start now\n"
    second = subprocess.run(
        [TETHER, "chat", "-c", str(path)], input="again\n", capture_output=True, text=True
    )
    assert second.stdout == "again\n"

    async def history() -> list[str]:
        from tether.memory.sqlite import SqliteStore

        store = SqliteStore(str(tmp_path / "chat.db"))
        await store.open()
        try:
            return [t.text for t in await store.history("console:local", 10)]
        finally:
            await store.close()

    assert asyncio.run(history()) == ["hi", "hi", "/start now", "/start now", "again", "again"]
