"""Reloading the configuration without a restart, and secrets read from files.

Reloads run against the real gateway with the real Telegram adapter on a fake Bot API
(tests/fakes/telegram_api.py) and the LLM agent on a fake OpenAI server; ``tether
reload`` and SIGHUP against a real ``tether run`` subprocess. Synchronization waits on
conditions in the fakes or on the gateway draining, never on sleeps.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml
from aiohttp import web

from tests.fakes.telegram_api import TOKEN, FakeTelegram
from tests.fakes.telegram_text import rendered
from tests.support.config import SECRETS, config_dict, events_named, inbox_rows
from tests.support.processes import TETHER, spawn_run, subprocess_env
from tether.config import load, load_text
from tether.errors import ConfigError
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters
from tether.gateway.handler.context import Context
from tether.gateway.handler.routing import Router
from tether.gateway.reload import _read_state, state_path
from tether.redaction import redactor
from tether.testing.model import FakeModel

FILE_TOKEN = "123456:FILE-token_from_a_secret_file"
#: The same bot's token after the owner revoked the first one (same id, new secret).
NEW_TOKEN = "123456:NEW-token_after_revoking_the_old_one"
SECRETS.update({NEW_TOKEN, NEW_TOKEN.split(":", 1)[1], FILE_TOKEN})
ALICE, BOB = 111, 222


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
    assert redactor.scrub("persona is You are the file persona.") == "persona is ***"


def test_a_missing_secret_file_is_one_line_naming_the_key(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError) as caught:
        load_text(f"platforms:\n  telegram:\n    token: ${{file:{missing}}}\n", source="t.yaml")
    message = str(caught.value)
    assert message == (
        f"t.yaml: platforms.telegram.token: cannot read secret file {missing}:"
        " No such file or directory"
    )


@pytest.mark.slow
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


# -- reload in a running gateway -------------------------------------------------------


@pytest.fixture
def openai(model: FakeModel) -> FakeModel:
    """The shared fake (model, tests/fixtures.py), as this module uses it."""
    model.reply = lambda body: "answer to " + body["messages"][-1]["content"]
    return model


def write(
    tmp_path: Path,
    telegram: FakeTelegram,
    openai: FakeModel,
    *,
    persona: str = "You are Alpha.",
    allow: list[str] | None = None,
    token: str = TOKEN,
    **extra: Any,
) -> Path:
    """The test's config file: the LLM agent on Telegram (polling), written in place."""
    llm = openai.section(timeout=5)
    platform = {
        "token": token,
        "base_url": telegram.base_url,
        "poll_timeout": 1,
        "rate_limits": False,
        "typing": False,
    }
    sections: dict[str, Any] = {
        "platforms": {"telegram": platform},
        "llm": llm,
        "agent": {"persona": persona},
        "access": {"allow": allow or [f"telegram:{ALICE}"], "pairing": False},
        **extra,
    }
    path = tmp_path / "tether.yaml"
    path.write_text(yaml.safe_dump(config_dict(tmp_path, **sections)))
    return path


@asynccontextmanager
async def gateway_on(config: Path) -> AsyncIterator[Gateway]:
    settings = load(config)
    gateway = Gateway(settings, build_adapters(settings), config_path=str(config))
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()


def say(telegram: FakeTelegram, user: int, text: str) -> None:
    telegram.push(message=telegram.message(user, text))


def answers(telegram: FakeTelegram) -> collections.Counter[str]:
    """How many times each text was answered (as the chat shows it: the agent's Markdown
    goes out as MarkdownV2)."""
    shown = (rendered(sent["text"], sent.get("parse_mode")) for sent in telegram.sent)
    return collections.Counter(text.removeprefix("answer to ") for text in shown)


def persona_of(openai: FakeModel, text: str) -> list[str]:
    """The system prompts of the model calls that answered ``text``."""
    return [r.system for r in openai.requests if r.messages[-1]["content"] == text]


@pytest.mark.slow
async def test_a_reload_during_a_stream_changes_persona_and_allow_list_from_the_next_messages(
    tmp_path: Path, telegram: FakeTelegram, openai: FakeModel
) -> None:
    config = write(tmp_path, telegram, openai)
    async with gateway_on(config) as gateway:
        before = [f"before-{i}" for i in range(5)]
        for text in before:
            say(telegram, ALICE, text)
        say(telegram, BOB, "bob-before")  # not on the allow list yet: ignored
        await telegram.wait_for(lambda: len(telegram.sent) >= len(before))
        await gateway.drain()
        # The stream goes on while the file changes and the gateway reloads it.
        during = [f"during-{i}" for i in range(5)]
        for text in during[:3]:
            say(telegram, ALICE, text)
        write(
            tmp_path,
            telegram,
            openai,
            persona="You are Beta.",
            allow=[f"telegram:{ALICE}", f"telegram:{BOB}"],
        )
        with structlog.testing.capture_logs() as captured:
            reloading = asyncio.create_task(gateway.reloader.reload())
            for text in during[3:]:
                say(telegram, ALICE, text)
            assert await reloading
        after = [f"after-{i}" for i in range(5)]
        for text in after:
            say(telegram, ALICE, text)
        say(telegram, BOB, "bob-after")
        expected = before + during + after + ["bob-after"]
        await telegram.wait_for(lambda: len(telegram.sent) >= len(expected))
        await gateway.drain()

    # Every message answered exactly once; Bob's first message was never answered.
    assert answers(telegram) == collections.Counter(expected)
    assert len({key for key, _ in inbox_rows(tmp_path)}) == len(expected) + 1
    assert {status for _, status in inbox_rows(tmp_path)} == {"done"}
    # The persona: the old one before the reload, the new one from the next messages on.
    for text in before:
        assert persona_of(openai, text) and "Alpha" in persona_of(openai, text)[0]
    for text in [*after, "bob-after"]:
        assert persona_of(openai, text) and "Beta" in persona_of(openai, text)[0]
    reloaded = events_named(captured, "config.reloaded")
    assert len(reloaded) == 1
    assert set(reloaded[0]["changed"]) == {"agent", "access"}
    assert reloaded[0]["restart"] == []


async def test_an_invalid_reload_changes_nothing_and_says_which_key(
    tmp_path: Path, telegram: FakeTelegram, openai: FakeModel
) -> None:
    config = write(tmp_path, telegram, openai)
    async with gateway_on(config) as gateway:
        running = gateway.settings
        broken = yaml.safe_load(config.read_text())
        broken["agent"]["persona"] = "You are Beta."
        broken["access"]["allow"].append(f"telegram:{BOB}")
        broken["pipeline"]["max_attempts"] = "many"
        config.write_text(yaml.safe_dump(broken))
        with structlog.testing.capture_logs() as captured:
            assert not await gateway.reloader.reload()
        assert gateway.settings is running
        say(telegram, BOB, "bob")
        say(telegram, ALICE, "alice")
        await telegram.wait_for(lambda: len(telegram.sent) >= 1)
        await gateway.drain()

    failed = events_named(captured, "config.reload_failed")
    assert len(failed) == 1
    assert f"{config}: pipeline.max_attempts:" in failed[0]["error"]
    assert not events_named(captured, "config.reloaded")
    assert answers(telegram) == collections.Counter(["alice"])  # Bob is still not allowed
    assert "Alpha" in persona_of(openai, "alice")[0]


async def test_settings_that_need_a_restart_are_reported_and_kept(
    tmp_path: Path, telegram: FakeTelegram, openai: FakeModel
) -> None:
    config = write(tmp_path, telegram, openai)
    async with gateway_on(config) as gateway:
        store = gateway.settings.memory.store
        write(
            tmp_path,
            telegram,
            openai,
            persona="You are Beta.",
            memory={"store": f"sqlite:///{tmp_path / 'other.db'}"},
            http={"enabled": False, "port": 9999},
        )
        with structlog.testing.capture_logs() as captured:
            assert await gateway.reloader.reload()
        assert gateway.settings.memory.store == store
        assert gateway.settings.agent.persona == "You are Beta."

    (reloaded,) = events_named(captured, "config.reloaded")
    assert reloaded["restart"] == ["memory.store", "http"]
    assert reloaded["changed"] == ["agent"]


class RotatingTelegram(FakeTelegram):
    """A Bot API where a bot can have two valid tokens for a while, as when the owner
    makes a new one and revokes the old one after switching; records which token each
    call used."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = {TOKEN}
        self.used: list[tuple[str, str]] = []  # (method, token)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        token = request.match_info["token"]
        self.used.append((request.match_info["method"], token))
        # The base class compares with self.token before its first await.
        self.token = token if token in self.tokens else next(iter(self.tokens))
        return await super()._handle(request)


async def test_a_changed_token_restarts_the_adapter_with_it_and_loses_no_update(
    tmp_path: Path, openai: FakeModel
) -> None:
    telegram = RotatingTelegram()
    await telegram.start()
    try:
        config = write(tmp_path, telegram, openai)
        async with gateway_on(config) as gateway:
            say(telegram, ALICE, "first")
            await telegram.wait_for(lambda: len(telegram.sent) >= 1)
            telegram.tokens.add(NEW_TOKEN)
            write(tmp_path, telegram, openai, token=NEW_TOKEN)
            with structlog.testing.capture_logs() as captured:
                reloading = asyncio.create_task(gateway.reloader.reload())
                say(telegram, ALICE, "during")  # taken by the old adapter or the new one
                assert await reloading
            switched = len(telegram.used)
            telegram.tokens.discard(TOKEN)  # revoked: only the new token works now
            say(telegram, ALICE, "after")
            await telegram.wait_for(lambda: len(telegram.sent) >= 3)
            await gateway.drain()
            assert gateway.adapters["telegram"].connected
    finally:
        await telegram.stop()

    assert answers(telegram) == collections.Counter(["first", "during", "after"])
    assert len(inbox_rows(tmp_path)) == 3
    assert {status for _, status in inbox_rows(tmp_path)} == {"done"}
    # From the reload on, the old token is never used again.
    assert {token for _, token in telegram.used[switched:]} == {NEW_TOKEN}
    assert ("getUpdates", NEW_TOKEN) in telegram.used[switched:]
    (reloaded,) = events_named(captured, "config.reloaded")
    assert reloaded["changed"] == ["platforms"]
    assert events_named(captured, "adapter.restarted")
    assert NEW_TOKEN.split(":", 1)[1] not in repr(captured)


async def test_a_token_the_platform_refuses_fails_the_reload_and_keeps_the_old_one(
    tmp_path: Path, telegram: FakeTelegram, openai: FakeModel
) -> None:
    config = write(tmp_path, telegram, openai)
    async with gateway_on(config) as gateway:
        write(tmp_path, telegram, openai, token=NEW_TOKEN, persona="You are Beta.")
        with structlog.testing.capture_logs() as captured:
            assert not await gateway.reloader.reload()
        say(telegram, ALICE, "still-served")
        await telegram.wait_for(lambda: len(telegram.sent) >= 1)
        await gateway.drain()

    (failed,) = events_named(captured, "config.reload_failed")
    assert "platforms.telegram.token was rejected" in failed["error"]
    assert "Alpha" in persona_of(openai, "still-served")[0]


# -- tether reload and SIGHUP on a tether run subprocess ------------------------------


async def _cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        TETHER, *args, env=subprocess_env(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _announced(config: Path, generation: int = 0) -> dict[str, Any]:
    """The running gateway's state file once it reaches ``generation``."""
    async with asyncio.timeout(60):
        while True:
            state = _read_state(state_path(config))
            if state and state.get("generation", -1) >= generation:
                return state
            await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_tether_reload_and_sighup_on_a_running_gateway(
    tmp_path: Path, telegram: FakeTelegram, openai: FakeModel
) -> None:
    config = write(tmp_path, telegram, openai)
    log = tmp_path / "run.log"
    proc = await spawn_run(config, log)
    try:
        await _announced(config)
        # An invalid file: tether reload says why, and the gateway is not even asked.
        good = config.read_text()
        config.write_text(good.replace("allow:", "alow:"))
        code, _out, err = await _cli("reload", "-c", str(config))
        assert code == 2 and "access.alow: unknown key" in err
        assert _read_state(state_path(config))["generation"] == 0  # type: ignore[index]
        # A valid one: reloaded, and the answer says what changed.
        write(tmp_path, telegram, openai, allow=[f"telegram:{ALICE}", f"telegram:{BOB}"])
        code, out, err = await _cli("reload", "-c", str(config))
        assert code == 0, err
        assert "changed access" in out
        say(telegram, BOB, "bob")
        await telegram.wait_for(lambda: len(telegram.sent) >= 1, timeout=30)
        # SIGHUP does the same.
        write(tmp_path, telegram, openai, persona="You are Gamma.")
        os.kill(proc.pid, signal.SIGHUP)
        state = await _announced(config, generation=2)
        assert state["outcome"] == "config.reloaded" and state["changed"] == ["agent", "access"]
        say(telegram, ALICE, "alice")
        await telegram.wait_for(lambda: len(telegram.sent) >= 2, timeout=30)
        # An invalid file by SIGHUP: the gateway says why and keeps running as it was.
        config.write_text(config.read_text().replace("persona:", "persona: [unclosed"))
        os.kill(proc.pid, signal.SIGHUP)
        state = await _announced(config, generation=3)
        assert state["outcome"] == "config.reload_failed"
        assert str(config) in state["error"] and "line" in state["error"]
        # Valid, but the platform refuses the new token: tether reload says so, exit 1.
        write(tmp_path, telegram, openai, persona="You are Delta.", token=NEW_TOKEN)
        code, out, err = await _cli("reload", "-c", str(config))
        assert code == 1 and "reload failed, nothing changed" in err
        assert "platforms.telegram.token was rejected" in err
        assert NEW_TOKEN.split(":", 1)[1] not in out + err
        say(telegram, ALICE, "alice again")
        await telegram.wait_for(lambda: len(telegram.sent) >= 3, timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(60):
            await proc.wait()
    assert proc.returncode == 0, log.read_text()
    assert answers(telegram) == collections.Counter(["bob", "alice", "alice again"])
    assert "Gamma" in persona_of(openai, "alice")[0]
    assert "Gamma" in persona_of(openai, "alice again")[0]
    assert not state_path(config).exists()  # a stopped gateway leaves no state behind
    code, _out, err = await _cli("reload", "-c", str(config))
    assert code == 1 and "no running gateway" in err


async def test_an_event_in_flight_finishes_on_the_settings_it_started_with(
    tmp_path: Path, telegram: FakeTelegram, openai: FakeModel
) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    router = Router("persona-tests")

    @router.text(r"^slow$")
    async def slow(ctx: Context) -> None:
        persona = ctx.llm.settings.agent.persona  # what this event started with
        started.set()
        await release.wait()
        await ctx.reply(f"slow: {persona} / {ctx.llm.settings.agent.persona}")

    @router.text(r"^quick$")
    async def quick(ctx: Context) -> None:
        await ctx.reply(f"quick: {ctx.llm.settings.agent.persona}")

    both = [f"telegram:{ALICE}", f"telegram:{BOB}"]
    config = write(tmp_path, telegram, openai, allow=both)
    settings = load(config)
    gateway = Gateway(settings, build_adapters(settings), router=router, config_path=str(config))
    await gateway.start()
    try:
        say(telegram, ALICE, "slow")
        async with asyncio.timeout(10):
            await started.wait()
        write(tmp_path, telegram, openai, persona="You are Beta.", allow=both)
        assert await gateway.reloader.reload()
        say(telegram, BOB, "quick")  # another conversation: runs while "slow" waits
        await telegram.wait_for(lambda: len(telegram.sent) >= 1)
        release.set()
        await telegram.wait_for(lambda: len(telegram.sent) >= 2)
        await gateway.drain()
    finally:
        await gateway.stop()

    texts = [sent["text"] for sent in telegram.sent]
    assert texts == [
        "quick: You are Beta.",
        "slow: You are Alpha. / You are Alpha.",
    ]


@pytest.mark.slow
async def test_a_reload_that_adds_a_job_starts_a_scheduler_that_fires_it(
    tmp_path: Path, telegram: FakeTelegram, openai: FakeModel
) -> None:
    config = write(tmp_path, telegram, openai)
    async with gateway_on(config) as gateway:
        assert gateway.scheduler is None
        job = {
            "id": "tick",
            "cron": "* * * * * *",
            "text": "tick",
            "deliver": [f"telegram:{ALICE}"],
        }
        write(tmp_path, telegram, openai, jobs=[job])
        with structlog.testing.capture_logs() as captured:
            assert await gateway.reloader.reload()
        assert gateway.scheduler is not None
        await telegram.wait_for(lambda: any(s["text"] == "tick" for s in telegram.sent))
        write(tmp_path, telegram, openai)
        assert await gateway.reloader.reload()
        assert gateway.scheduler is None

    (reloaded,) = events_named(captured, "config.reloaded")
    assert reloaded["changed"] == ["jobs"]
