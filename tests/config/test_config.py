"""Config: every error names the file and the key path; secrets never print."""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.processes import TETHER
from tether.config import load, load_text
from tether.errors import ConfigError
from tether.gateway.cli import main
from tether.memory.stores import open_store, sqlite_path


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_chat_in_a_pipe_answers_and_history_survives_restart(tmp_path: Path) -> None:
    path = tmp_path / "tether.yaml"
    path.write_text(f"memory: {{store: 'sqlite:///{tmp_path}/chat.db'}}\n")
    first = subprocess.run(
        [TETHER, "chat", "-c", str(path)], input="hi\n/nope now\n", capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout == "hi\n/nope now\n"
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

    assert asyncio.run(history()) == ["hi", "hi", "/nope now", "/nope now", "again", "again"]


# -- config that cannot blow up (issue 14) ---------------------------------------------

#: The "billion laughs": 342 bytes that expand to 9^9 strings, all under unknown keys.
ALIAS_BOMB = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def _limited_memory() -> None:
    """A hang guard's companion: a child that expands a bomb fails instead of eating the box."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.mark.slow
def test_a_yaml_alias_bomb_is_refused_at_once_naming_where(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB)
    assert len(ALIAS_BOMB.encode()) == 342
    result = subprocess.run(
        [TETHER, "check", "-c", str(path)],
        capture_output=True, text=True, timeout=120, preexec_fn=_limited_memory,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    [problem] = result.stderr.splitlines()[1:]
    assert problem.startswith(f"{path}: line ") and "alias *" in problem


def test_an_alias_that_contains_itself_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"line 1, column \d+: .*alias \*loop"):
        load_text("plugins: &loop [a, *loop]\n")


def test_a_modest_alias_still_works() -> None:
    settings = load_text(
        "access:\n  allow: &people ['telegram:1', 'discord:2']\n  admins: *people\n"
    )
    assert settings.access.admins == ["telegram:1", "discord:2"]


def test_a_config_that_is_not_utf8_names_the_file_and_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("agent:\n  name: Zo\xeb\n".encode("latin-1"))
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert str(caught.value) == f"{path}: not UTF-8 text: byte 0xeb at offset 17 (line 2)"


def test_sqlite_without_a_path_is_refused_not_silently_in_memory() -> None:
    for url in ("sqlite://", "sqlite:///"):
        with pytest.raises(ConfigError, match=r"memory\.store: .*needs a file path"):
            load_text(f"memory: {{store: '{url}'}}\n")
        with pytest.raises(ValueError, match="needs a file path"):
            open_store(url)
    # The stores that keep nothing stay reachable, by names that say so.
    assert load_text("memory: {store: 'memory://'}\n").memory.store == "memory://"
    assert sqlite_path("sqlite:///:memory:") == ":memory:"


@pytest.mark.parametrize(
    "text, where",
    [
        ("pipeline: {max_attempts: true}\n", "pipeline.max_attempts"),
        ("outbox: {backoff_base: false}\n", "outbox.backoff_base"),
        ("http: {port: true}\n", "http.port"),
        ("memory: {task_token_budget: true}\n", "memory.task_token_budget"),
        (
            "platforms: {discord: {token: x, backfill_limit: true}}\n",
            "platforms.discord.backfill_limit",
        ),
    ],
)
def test_a_boolean_is_not_a_number(text: str, where: str) -> None:
    with pytest.raises(ConfigError, match=rf": {re.escape(where)}: .*a number, not a boolean"):
        load_text(text)


def test_numbers_from_the_environment_still_parse() -> None:
    settings = load_text(
        "http: {port: '${PORT}'}\npipeline: {max_attempts: 3}\n", env={"PORT": "9090"}
    )
    assert settings.http.port == 9090 and settings.pipeline.max_attempts == 3


def test_an_infinite_or_nan_number_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"pipeline\.handler_timeout: .*finite"):
        load_text("pipeline: {handler_timeout: .inf}\n")
    with pytest.raises(ConfigError, match=r"outbox\.backoff_max: .*finite"):
        load_text("outbox: {backoff_max: .nan}\n")


# A weekday starting with * leaves the day of month to decide; "0 0 30 2 mon" fires (on
# February's Mondays: both day fields restricted, either matches, as in crontab).
@pytest.mark.slow
@pytest.mark.parametrize("cron", ["0 0 31 2 *", "0 0 30 2 */2", "0 0 31 4,6,9,11 *"])
def test_a_cron_expression_that_never_fires_is_refused(cron: str) -> None:
    text = f"jobs: [{{id: never, cron: '{cron}', text: hi, deliver: 'console:local'}}]\n"
    with pytest.raises(ConfigError, match=r"jobs\[0\]\.cron: .*never fires"):
        load_text(text)


def test_rare_but_real_cron_expressions_are_kept() -> None:
    text = "jobs: [{id: leap, cron: '0 0 29 2 mon', text: hi, deliver: 'console:local'}]\n"
    assert load_text(text).jobs[0].cron == "0 0 29 2 mon"
    text = "jobs: [{id: feb, cron: '0 0 30 2 mon', text: hi, deliver: 'console:local'}]\n"
    assert load_text(text).jobs[0].cron == "0 0 30 2 mon"


def test_a_yaml_syntax_error_is_one_line_that_does_not_quote_the_line() -> None:
    secret = "123456:AAH-not-to-be-echoed"
    with pytest.raises(ConfigError) as caught:
        load_text(f'platforms:\n  telegram:\n    token: "{secret}\n', source="t.yaml")
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and message.startswith("t.yaml: line ")
    assert "invalid YAML" in message and secret.split(":")[1] not in message


@pytest.mark.parametrize(
    "text",
    [
        "pipeline: {max_attempts: " + "9" * 5000 + "}\n",  # beyond int()'s digit limit
        "jobs: [{id: x, cron: '* * * * *', text: hi, grace: !!float nope}]\n",
        "agent: {name: 2001-02-30}\n",  # a YAML timestamp that is no date
        "plugins: " + "[" * 5000 + "]" * 5000 + "\n",
    ],
)
def test_values_yaml_cannot_construct_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^<config>: line \d+, column \d+: "):
        load_text(text)
