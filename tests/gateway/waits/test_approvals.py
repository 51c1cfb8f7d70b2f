"""Approval-gated tools in one process, through the real tool loop and a fake model:
approve runs once, deny and expiry are what the model reads, who may press, a second
press, and arguments that differ from the approved ones never run on that approval."""

from __future__ import annotations

from typing import Any

from tether import Context, Router
from tether.memory.inmemory import MemoryStore
from tether.testing import Bot, FakeModel, asks_for, scripted, tool_call


def gated(calls: list[dict[str, Any]]) -> Router:
    router = Router()

    @router.tool(approval=True)
    async def wipe(ctx: Context, path: str) -> str:
        """Delete the folder at path."""
        calls.append({"path": path})
        return f"wiped {path}"

    return router


ADMIN = {"access": {"admins": ["loopback:boss"], "allow": ["*"]}}


async def test_approve_runs_the_tool_once_and_the_model_answers(fake_model: FakeModel) -> None:
    calls: list[dict[str, Any]] = []
    fake_model.reply = scripted(asks_for(tool_call("wipe", {"path": "/tmp/x"})), "Done.")
    async with Bot(gated(calls), model=fake_model, config=ADMIN) as bot:
        [card] = await bot.say("wipe /tmp/x")
        assert card.text.startswith("Approval needed: the agent wants to run wipe")
        assert '{"path": "/tmp/x"}' in card.text and "Hash: " in card.text
        assert calls == []
        [refused] = await bot.press(card.button("Approve"), under=card, user="mallory")
        assert "you may not decide this" in refused.text and calls == []
        replies = await bot.press(card.button("Approve"), under=card, user="boss")
        texts = [r.text for r in replies]
        assert texts[0].startswith("Approved by boss: wipe")
        assert "Done." in texts
        assert calls == [{"path": "/tmp/x"}]
        [again] = await bot.press(card.button("Deny"), under=card, user="boss")
        assert again.text.startswith("This was approved already")
        assert calls == [{"path": "/tmp/x"}]
        [row] = await bot.gateway.store.waits("approval")
        assert row.status == "answered" and row.answer and row.answer["decision"] == "approved"
        assert row.answer["sender"] == "loopback:boss"


async def test_deny_is_what_the_model_reads(fake_model: FakeModel) -> None:
    calls: list[dict[str, Any]] = []
    fake_model.reply = scripted(asks_for(tool_call("wipe", {"path": "/"})), "I did not.")
    async with Bot(gated(calls), model=fake_model, config=ADMIN) as bot:
        [card] = await bot.say("wipe everything")
        await bot.press(card.button("Deny"), under=card, user="boss")
    assert calls == []
    results = [r["content"] for r in fake_model.requests[-1].tool_results]
    assert results and results[0].startswith("denied by boss")


async def test_no_approvers_is_a_denial_without_a_card(fake_model: FakeModel) -> None:
    calls: list[dict[str, Any]] = []
    fake_model.reply = scripted(asks_for(tool_call("wipe", {"path": "/"})), "Not allowed.")
    config = {"agent": {"tools": {"approvals": {"approvers": []}}}}
    async with Bot(gated(calls), model=fake_model, config=config) as bot:
        [answer] = await bot.say("wipe")
    assert answer.text == "Not allowed." and calls == []
    assert "no approver is configured" in fake_model.requests[-1].tool_results[0]["content"]


async def test_an_expired_approval_is_what_the_model_reads(fake_model: FakeModel) -> None:
    calls: list[dict[str, Any]] = []
    fake_model.reply = scripted(asks_for(tool_call("wipe", {"path": "/a"})), "It expired.")
    async with Bot(gated(calls), model=fake_model, config=ADMIN) as bot:
        await bot.say("wipe /a")
        assert await bot.gateway.waits.expire(now=10**12) == 1
        await bot.say("/help")
        assert "It expired." in [r.text for r in bot.replies]
    assert calls == []
    assert fake_model.requests[-1].tool_results[0]["content"].startswith("expired")


async def test_other_arguments_than_the_approved_ones_are_asked_again(
    fake_model: FakeModel,
) -> None:
    """The model's stored round is lost (as if it had been asked again) and it now wants
    another path: the approval of /a does not run /b; a new card asks for /b."""
    calls: list[dict[str, Any]] = []
    answers = iter(["/a", "/b"])

    def reply(body: dict[str, Any]) -> Any:
        if any(m.get("role") == "tool" for m in body["messages"]):
            return "Done."
        return asks_for(tool_call("wipe", {"path": next(answers, "/b")}))

    fake_model.reply = reply
    async with Bot(gated(calls), model=fake_model, config=ADMIN) as bot:
        [card] = await bot.say("wipe")
        assert '"/a"' in card.text
        store = bot.gateway.store
        assert isinstance(store, MemoryStore)
        [row] = await store.waits("approval")
        steps = await store.steps(row.event_key)
        forget = [name for name in steps if name.startswith("llm")]
        assert forget, steps
        for name in forget:  # the model's memoized round is gone
            del store._steps[(row.event_key, name)]
        replies = await bot.press(card.button("Approve"), under=card, user="boss")
        assert calls == []  # /b was never approved
        [second] = [r for r in replies if r.text.startswith("Approval needed")]
        assert '"/b"' in second.text
        await bot.press(second.button("Approve"), under=second, user="boss")
    assert calls == [{"path": "/b"}]


async def test_a_tool_that_asks_the_person_runs_again_with_the_answer(
    fake_model: FakeModel,
) -> None:
    """A non-idempotent tool that asks (a clarifying question) is not taken for a call
    cut off by a crash on the re-run: it runs again, its own step memoized, and gets the
    answer; and a cached tool's steps before a later question keep the trace the same."""
    calls: list[str] = []
    router = Router()

    @router.tool
    async def book(ctx: Context, what: str) -> str:
        """Book something, asking which day."""
        slot = await ctx.step("slots", lambda: calls.append("slots") or "9:00")
        day = await ctx.ask(f"Which day for the {what} at {slot}?", buttons=["Mon", "Tue"])
        calls.append(f"booked {what} {day.data}")
        return f"booked {what} on {day.data}"

    def reply(body: dict[str, Any]) -> Any:
        results = [m for m in body["messages"] if m.get("role") == "tool"]
        if len(results) == 0:
            return asks_for(tool_call("book", {"what": "dentist"}))
        if len(results) == 1:
            return asks_for(tool_call("book", {"what": "haircut"}))
        return "Both booked."

    fake_model.reply = reply
    async with Bot(router, model=fake_model) as bot:
        [first] = await bot.say("book the dentist and a haircut")
        assert first.text == "Which day for the dentist at 9:00?"
        [second] = await bot.press(first.button("Tue"), under=first)
        assert second.text == "Which day for the haircut at 9:00?"
        replies = await bot.press(second.button("Mon"), under=second)
        assert [r.text for r in replies] == ["Both booked."]
        assert await bot.gateway.store.dead_letters() == []
    assert calls == ["slots", "booked dentist Tue", "slots", "booked haircut Mon"]


async def test_a_chat_named_in_admins_does_not_make_its_members_approvers(
    fake_model: FakeModel,
) -> None:
    """access.admins may name a chat (its members run admin commands there); approving a
    tool call takes a person: the chat's pattern does not count for the presser."""
    calls: list[dict[str, Any]] = []
    fake_model.reply = scripted(asks_for(tool_call("wipe", {"path": "/x"})), "Done.")
    config = {"access": {"admins": ["loopback:ops", "loopback:boss"], "allow": ["*"]}}
    async with Bot(gated(calls), model=fake_model, config=config) as bot:
        [card] = await bot.say("wipe /x", user="eve", chat="ops", group=True)
        [refused] = await bot.press(card.button("Approve"), under=card, user="eve")
        assert "you may not decide this" in refused.text and calls == []
        await bot.press(card.button("Approve"), under=card, user="boss")
    assert calls == [{"path": "/x"}]


async def test_cancel_ends_a_pending_approval_and_the_model_reads_it(
    fake_model: FakeModel,
) -> None:
    calls: list[dict[str, Any]] = []
    fake_model.reply = scripted(asks_for(tool_call("wipe", {"path": "/c"})), "Left it.")
    async with Bot(gated(calls), model=fake_model, config=ADMIN) as bot:
        [card] = await bot.say("wipe /c")
        replies = await bot.say("/cancel")
        assert replies[0].text.startswith("Cancelled: I am no longer waiting")
        assert [r.text for r in replies][-1] == "Left it."
        [late] = await bot.press(card.button("Approve"), under=card, user="boss")
        assert late.text == "This question was cancelled; nothing was done."
    assert calls == []
    assert fake_model.requests[-1].tool_results[0]["content"].startswith("cancelled")
