"""``agents:`` and ``rooms:`` in the config: what each agent runs with, and every mistake
reported as one line naming its key path (``agents[1].platforms.telegram.token``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.support.config import parse, problem
from tether.gateway.agent.accounts import account, agent_settings, split_account
from tether.gateway.agent.rooms import Rooms
from tether.gateway.assembly import build_adapters

LLM = {
    "providers": {"fake": {"base_url": "http://127.0.0.1:9/v1", "api_key": "sk-x"}},
    "models": {
        "main": {"provider": "fake", "model": "m1"},
        "small": {"provider": "fake", "model": "m2"},
    },
}


def tg(n: int) -> dict[str, Any]:
    return {"telegram": {"token": f"{n}:AAAA-token"}}


def test_each_agent_runs_with_its_own_persona_routes_and_budgets() -> None:
    settings = parse(
        llm=LLM,
        memory={"store": "memory://", "task_token_budget": 1000, "history_tokens": 500},
        agents=[
            {"name": "alice", "persona": "You are alice.", "platforms": tg(1)},
            {
                "name": "bob",
                "model": "small",
                "task_token_budget": 99,
                "respond_to_agents": "all",
                "aliases": ["bobby"],
                "platforms": {**tg(2), "discord": {"token": "abc.def.ghi"}},
            },
        ],
        rooms={"max_agent_turns": 2, "agent_rate": 5},
    )
    alice, bob = (agent_settings(settings, spec) for spec in settings.agents)
    assert alice.agent.persona == "You are alice." and alice.agent.handler == "llm"
    assert alice.memory.task_token_budget == 1000 and alice.llm.default_model() == "main"
    assert bob.memory.task_token_budget == 99 and bob.memory.history_tokens == 500
    assert bob.llm.default_model() == "small" and bob.agents == []
    assert settings.rooms.max_agent_turns == 2 and settings.rooms.agent_rate == 5
    adapters = build_adapters(settings, console=False)
    assert sorted(adapters) == ["discord@bob", "telegram@alice", "telegram@bob"]
    # The secrets of every account reach the log redactor.
    assert {"1:AAAA-token", "2:AAAA-token", "abc.def.ghi"} <= set(settings.secrets())


def test_the_one_agent_form_is_unchanged() -> None:
    settings = parse(agent={"name": "Solo"}, platforms={**tg(1)})
    assert settings.agents == [] and settings.rooms.max_agent_turns == 3
    assert sorted(build_adapters(settings, console=False)) == ["telegram"]


@pytest.mark.parametrize(
    ("agents", "where"),
    [
        (
            [{"name": "a", "platforms": tg(1)}, {"name": "b", "platforms": tg(1)}],
            "agents[1].platforms.telegram.token: agents[0].platforms.telegram has this account",
        ),
        ([{"name": "a"}, {"name": "A"}], "agents[1].name: agent name used twice"),
        ([{"name": "a b"}], "agents[0].name: must be 1-32 characters"),
        ([{"name": "a", "model": "huge"}], "agents[0].model: no model 'huge' in llm.models"),
        (
            [{"name": "a", "routes": [{"model": "main"}, {"model": "nope"}]}],
            "agents[0].routes[1].model: no model 'nope'",
        ),
        ([{"name": "a", "respond_to_agents": "sometimes"}], "agents[0].respond_to_agents:"),
        ([{"name": "a", "platforms": {"telegram": {"tokn": "1:A"}}}], "agents[0].platforms"),
        (
            [{"name": "a", "platforms": {"telegram": {"token": "nope"}}}],
            "agents[0].platforms.telegram.token:",
        ),
        ([{"name": "a", "access": {"allow": ["bare"]}}], "agents[0].access.allow:"),
    ],
)
def test_a_mistake_names_its_key(agents: list[dict[str, Any]], where: str) -> None:
    message = problem(llm=LLM, agents=agents)
    assert where in message
    assert "Traceback" not in message and "AAAA" not in message


def test_an_llm_agent_needs_an_llm_section() -> None:
    assert "agents[0].handler: is 'llm', so an llm section is required" in problem(
        agents=[{"name": "a"}]
    )
    assert parse(agents=[{"name": "a", "handler": "echo"}]).agents[0].handler == "echo"


def test_rooms_values_are_checked() -> None:
    assert "rooms.agent_rate" in problem(rooms={"agent_rate": 0})
    assert "rooms.max_agent_turns" in problem(rooms={"max_agent_turns": -1})
    assert "rooms.extra: unknown key" in problem(rooms={"extra": 1})


@pytest.mark.slow
def test_tether_check_reports_the_key(tmp_path: Path) -> None:
    import subprocess

    from tests.support.processes import TETHER, subprocess_env

    config = tmp_path / "tether.yaml"
    agents = [{"name": "a", "handler": "echo", "platforms": tg(1)}] * 2
    config.write_text(yaml.safe_dump({"agents": agents, "memory": {"store": "memory://"}}))
    done = subprocess.run(
        [TETHER, "check", "-c", str(config)],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=60,
    )
    assert done.returncode != 0
    assert "agents[1].name: agent name used twice" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr


#: Stands in for the gateway's inbox where only the naming and stamping are exercised.
SHELL = SimpleNamespace(store=None, dispatcher=None, group_sessions="per_user", throttle=None)
names = st.from_regex(r"[A-Za-z0-9_-]{1,32}", fullmatch=True)


@given(platform=st.sampled_from(["telegram", "discord", "feishu"]), agent=names)
def test_account_names_split_back(platform: str, agent: str) -> None:
    assert split_account(account(platform, agent)) == (platform, agent)
    assert split_account(platform) == (platform, None)


@given(text=st.text(max_size=200), name=names)
def test_naming_an_agent_is_a_whole_word(text: str, name: str) -> None:
    """Any text is read without error; the name counts only as a word of its own."""
    settings = parse(agents=[{"name": name, "handler": "echo"}])
    rooms = Rooms(settings, SHELL, {})  # type: ignore[arg-type]
    assert rooms._named[name].search(f"{text} @{name}, hi") is not None
    assert rooms._named[name].search(f"{text} {name}") is not None
    glued = f"x{name}x"
    if name.lower() not in text.lower():
        assert rooms._named[name].search(text + " " + glued) is None


@given(
    message=st.from_regex(r"[0-9]{1,20}", fullmatch=True),
    stamp=st.from_regex(r"[0-9:T.+-]{1,30}", fullmatch=True),
    bots=st.lists(st.integers(1, 2**63), min_size=2, max_size=2, unique=True),
)
def test_discord_keys_name_the_bot_and_remember_the_old_key(
    message: str, stamp: str, bots: list[int]
) -> None:
    """Two bots receiving one message (or one edit) get two keys; each knows the key a
    one-agent Tether gave it."""
    from tether.adapters.discord import DiscordAdapter
    from tether.config.platforms import DiscordConfig
    from tether.events import Conversation, Event
    from tether.gateway.agent.accounts import AccountInbox

    def inbox_of(bot_id: int) -> AccountInbox:
        adapter = DiscordAdapter(DiscordConfig(token="t0ken-for-tests"))
        adapter.bot_id = bot_id  # known once logged in; the adapter makes the key from it
        return AccountInbox(SHELL, f"discord@bot{bot_id}", adapter, lambda _e: False)  # type: ignore[arg-type]

    for old in (f"dc:msg:{message}", f"dc:edit:{message}:{stamp}", f"dc:int:{message}"):
        chat = Conversation(platform="discord", chat_id="1", chat_type="group")
        event = Event(key=old, platform="discord", conversation=chat, text="x")
        stamped = [inbox_of(bot).stamp(event) for bot in bots]
        if old.startswith("dc:int:"):  # an interaction goes to one application only
            assert all(s.key == old and legacy is None for s, legacy in stamped)
            continue
        assert stamped[0][0].key != stamped[1][0].key
        for bot, (new, legacy) in zip(bots, stamped, strict=True):
            assert legacy == old and new.key.startswith(f"dc:{bot}:")
            assert new.key.replace(f"dc:{bot}:", "dc:", 1) == old


def test_a_platform_copy_of_our_own_agents_message_is_recognised() -> None:
    """Discord and Feishu deliver one bot's message to the other bots: it is ours, and
    the room relay is the one path (with ignore_bots off, normalize would let it in)."""
    from tether.adapters.loopback import LoopbackAdapter
    from tether.events import Conversation, Event, Sender

    settings = parse(agents=[{"name": n, "handler": "echo"} for n in ("a", "b")])
    ours = LoopbackAdapter()
    ours.bot_id = 42  # type: ignore[attr-defined]
    adapters = {"discord@a": ours, "discord@b": LoopbackAdapter()}
    rooms = Rooms(settings, SHELL, adapters)  # type: ignore[arg-type]
    chat = Conversation(platform="discord", chat_id="1", chat_type="group")

    def said_by(sender: Sender) -> Event:
        return Event(key="dc:msg:1", platform="discord", conversation=chat, sender=sender)

    assert rooms._ours(said_by(Sender(id="42", is_bot=True)))
    assert not rooms._ours(said_by(Sender(id="42", is_bot=False)))
    assert not rooms._ours(said_by(Sender(id="43", is_bot=True)))  # someone else's bot


def test_changing_agents_or_rooms_waits_for_a_restart() -> None:
    from tether.gateway.reload import needs_restart

    agents = [{"name": "a", "handler": "echo", "platforms": tg(1)}]
    old = parse(agents=agents)
    assert needs_restart(old, parse(agents=agents)) == []
    assert needs_restart(old, parse(agents=[{**agents[0], "persona": "new"}])) == ["agents"]
    assert needs_restart(old, parse(agents=agents, rooms={"agent_rate": 3})) == ["rooms"]


async def test_the_console_and_events_of_no_account_talk_to_the_first_agent(
    tmp_path: Path,
) -> None:
    """``tether chat`` beside ``agents:``: the console is no agent's account, so the
    first agent answers it, with its own persona and memory."""
    from tests.support.config import make_settings
    from tests.support.gateway import running

    agents = [
        {"name": "first", "handler": "echo", "persona": "one"},
        {"name": "second", "handler": "echo"},
    ]
    settings = make_settings(tmp_path, agents=agents)
    async with running(settings) as (gateway, loopback):
        await loopback.say("hello there")
        (sent,) = await loopback.wait_for_sent(1)
        await gateway.drain()
    assert sent.message.text == "hello there"
    console = build_adapters(settings, console=True)["console"]
    assert console.name == "first"  # type: ignore[attr-defined]  # "Chatting with first."
