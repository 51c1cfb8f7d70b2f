"""Reloading the configuration without a restart, and secrets read from files.

Reloads run against the real gateway with the real Telegram adapter on a fake Bot API
(tests/fakes/telegram_api.py) and the LLM agent on a fake OpenAI server; ``tether
reload`` and SIGHUP against a real ``tether run`` subprocess. Synchronization waits on
conditions in the fakes or on the gateway draining, never on sleeps.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import TETHER, subprocess_env
from tether.config import ConfigError, load_text
from tether.gateway import logs

FILE_TOKEN = "123456:FILE-token_from_a_secret_file"


def test_a_file_secret_is_read_without_its_trailing_newline_and_masked(tmp_path: Path) -> None:
    secret = tmp_path / "telegram_token"
    secret.write_text(FILE_TOKEN + "\n")
    persona = tmp_path / "persona"
    persona.write_text("You are the file persona.\r\n")
    settings = load_text(
        f"platforms:\n  telegram:\n    token: ${{file:{secret}}}\n"
        f"agent:\n  persona: ${{file:{persona}}}\n"
    )
    assert settings.platforms.telegram is not None
    assert settings.platforms.telegram.token.get_secret_value() == FILE_TOKEN
    assert settings.agent.persona == "You are the file persona."
    # What a file held is a secret wherever it is used: the logs mask it.
    assert logs.redactor.scrub("persona is You are the file persona.") == "persona is ***"


def test_a_missing_secret_file_is_one_line_naming_the_key(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError) as caught:
        load_text(f"platforms:\n  telegram:\n    token: ${{file:{missing}}}\n", source="t.yaml")
    message = str(caught.value)
    assert message == (
        f"t.yaml: platforms.telegram.token: cannot read secret file {missing}:"
        " No such file or directory"
    )


def test_tether_check_masks_a_value_read_from_a_file(tmp_path: Path) -> None:
    persona = tmp_path / "persona"
    persona.write_text("a persona kept in a secret file\n")
    config = tmp_path / "tether.yaml"
    config.write_text(
        f"memory:\n  store: sqlite:///{tmp_path / 'tether.db'}\n"
        f"agent:\n  persona: ${{file:{persona}}}\n"
    )
    done = subprocess.run(
        [TETHER, "check", "-c", str(config)],
        capture_output=True, text=True, env=subprocess_env(), timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "persona: ***\n" in done.stdout
    assert "secret file" not in done.stdout + done.stderr
