"""Whatever an operator's browser (or anything holding the session) posts to a console
form, the answer is a page or a 4xx that says what is wrong, never a 500: on SQLite and
on PostgreSQL, whose integers stop at 64 bits and whose text holds no NUL. And the web
chat's API tells the truth when the inbox refuses a message.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.config import db_rows, make_settings
from tests.support.gateway import base_url, running
from tests.support.web import TOKEN, client, log_in
from tether.config import Settings

UI = {"enabled": True, "token": TOKEN}


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_dsn"))
    return f"sqlite:///{tmp_path / 'tether.db'}"


def ui_settings(tmp_path: Path, store: str | None = None) -> Settings:
    sections: dict[str, Any] = {"memory": {"store": store}} if store else {}
    return make_settings(
        tmp_path,
        http={"enabled": True, "port": 0, "ui": {**UI, "login_attempts": 100_000}},
        platforms={"web": {"enabled": True}},
        **sections,
    )


async def test_a_fact_id_beyond_64_bits_is_a_400_not_a_500(tmp_path: Path, store_url: str) -> None:
    async with running(ui_settings(tmp_path, store_url)) as (gateway, _), client() as session:
        base = base_url(gateway)
        csrf = await log_in(session, base)
        for fact_id in (str(2**63), str(2**64 + 5), "9" * 40, "-" + str(2**63 + 1), "0"):
            for action in ("edit", "forget"):
                form = {"csrf": csrf, "c": "loopback:1", "id": fact_id, "action": action,
                        "text": "x"}  # fmt: skip
                async with session.post(f"{base}/ui/conversation/fact", data=form) as r:
                    assert r.status == 400, (fact_id, action, await r.text())
                    assert "id: 1 to" in await r.text()
        form = {"csrf": csrf, "c": "loopback:1", "id": str(2**63 - 1), "action": "forget"}
        async with session.post(f"{base}/ui/conversation/fact", data=form) as r:
            assert r.status == 200  # no such fact: back to the conversation's page


# Values as a person, a paste or a fuzzer would type them: any text (right-to-left,
# overrides, NUL), integers of any size (those just past 64 bits often), long strings.
_value = st.one_of(
    st.text(st.characters(codec="utf-8"), max_size=60),
    st.integers().map(str),
    st.integers(min_value=2**63 - 2, max_value=2**65).map(str),
    st.sampled_from(["1", "loopback:1", "\u202eevil", "\x00", "a\x00b", "a" * 3000]),
)


def _form(*names: str, **fixed: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, str]]:
    """A form as its page sends it (every field, as the page always sends them all),
    with any values. Forms missing fields are test_web_auth's."""
    return st.fixed_dictionaries({name: fixed.get(name, _value) for name in names})


#: Each console form (path, then the form) and each page's query.
FORMS = {
    "/ui/login": _form("password", "csrf", "next"),
    "/ui/dead/retry": _form("key"),
    "/ui/conversation/fact": _form(
        "c",
        "id",
        "action",
        "text",
        id=st.integers(min_value=-(2**70), max_value=2**70).map(str) | _value,
        action=st.sampled_from(["edit", "forget"]) | _value,
    ),
    "/ui/jobs/run": _form("job"),
    "/ui/tasks/cancel": _form("task"),
}
PAGES = {
    "/ui/events": _form("key", "conversation", "status"),
    "/ui/event": _form("key"),
    "/ui/conversation": _form("c"),
    "/ui/dead": _form("retried", "missing"),
    "/ui/jobs": _form("fired"),
    "/ui/tasks": _form("cancelled", "missing"),
    "/ui/conversations": _form(),
    "/ui/api/chat/log": _form("chat"),
    "/ui/login": _form("next"),
    "/ui/": _form(),
}
_chat = _form("chat", "id", "text")


@pytest.mark.slow
async def test_no_console_form_or_query_answers_500(tmp_path: Path, store_url: str) -> None:
    """Every form (login, retry, facts, run a job, the chat's JSON) and every page's query,
    with a valid session and CSRF token, from Hypothesis in a thread driving one gateway.
    (A login with a wrong password spends its form: those are 403s, which is fine.)"""
    loop = asyncio.get_running_loop()
    settings = ui_settings(tmp_path, store_url)
    async with running(settings) as (gateway, _), client() as session:
        base = base_url(gateway)
        csrf = await log_in(session, base)

        async def post(path: str, form: dict[str, str]) -> tuple[int, str]:
            body = form if path == "/ui/login" else {**form, "csrf": csrf}
            async with session.post(base + path, data=body, allow_redirects=False) as r:
                return r.status, await r.text()

        async def send(form: dict[str, str]) -> tuple[int, str]:
            headers = {"X-CSRF-Token": csrf}
            async with session.post(f"{base}/ui/api/chat/send", json=form, headers=headers) as r:
                return r.status, await r.text()

        async def get(path: str, form: dict[str, str]) -> tuple[int, str]:
            async with session.get(base + path, params=form, allow_redirects=False) as r:
                return r.status, await r.text()

        def run(call: Any) -> tuple[int, str]:
            result: tuple[int, str] = asyncio.run_coroutine_threadsafe(call, loop).result(30)
            return result

        @given(
            forms=st.fixed_dictionaries(FORMS),
            pages=st.fixed_dictionaries(PAGES),
            chat=_chat,
        )
        def example(
            forms: dict[str, dict[str, str]], pages: dict[str, dict[str, str]], chat: dict[str, str]
        ) -> None:
            """Each example posts every form and reads every page once."""
            answers = [(path, run(post(path, form))) for path, form in forms.items()]
            answers += [(path, run(get(path, query))) for path, query in pages.items()]
            answers.append(("chat", run(send(chat))))
            for path, (status, text) in answers:
                assert status < 500, (path, forms, pages, chat, text)

        await asyncio.to_thread(example)
        async with session.get(f"{base}/ui/api/overview") as response:
            assert response.status == 200  # still logged in, still serving


async def test_the_chat_api_says_when_the_inbox_refuses_a_message(tmp_path: Path) -> None:
    """A lone surrogate is valid JSON and no valid text: the inbox leaves it out
    (event.unstorable), and the API answered 200 accepted, so the page dropped it as
    sent. Now: 422, accepted false, the reason; a resend of a stored one is still 200."""
    async with running(ui_settings(tmp_path)) as (gateway, _), client() as session:
        base = base_url(gateway)
        csrf = await log_in(session, base)
        headers = {"X-CSRF-Token": csrf, "Content-Type": "application/json"}
        body = b'{"chat": "c1", "id": "m1", "text": "half a pair \\ud800 here"}'
        async with session.post(f"{base}/ui/api/chat/send", data=body, headers=headers) as r:
            assert r.status == 422
            answer = await r.json()
        assert answer["accepted"] is False and "surrogate" in answer["error"]
        message = {"chat": "c1", "id": "m2", "text": "fine"}
        for new in (True, False):  # stored, then a resend: both the truth, both 200
            async with session.post(
                f"{base}/ui/api/chat/send", json=message, headers={"X-CSRF-Token": csrf}
            ) as r:
                assert r.status == 200 and await r.json() == {"accepted": True, "new": new}
        await gateway.drain()
    assert db_rows(tmp_path, "SELECT key FROM inbox") == [("web:c1:m2",)]
