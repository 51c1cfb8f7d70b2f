"""What the console changes, and how one logs in: each action is the operation the CLI
or a chat command would run, never a second implementation of it.

- Retry a dead letter: :meth:`~tether.memory.operator.ReportStore.requeue`, which is ``tether
  dead retry``; then the row is handed to this gateway's lanes at once instead of
  waiting for the sweep (which would find it anyway, and knows it is queued).
- Run a job now: the manual fire ``tether jobs run`` inserts (``cron:{job}:manual:…``),
  accepted through the inbox.
- Cancel a task: :meth:`~tether.gateway.tasks.Tasks.cancel` as the operator, which is
  ``tether tasks cancel``; a runner in this process stops at once, one elsewhere within
  a second.
- Edit or forget a fact: the store's operator edits (``/forget`` deletes the same way).
- The web chat: a message is accepted by the web adapter (deduplicated on its key); the
  chat is read back from the store. The answer is what the inbox did with it: new,
  already there (a resend), or refused (422, with the reason: a message no store can
  hold), which the page then shows as not sent instead of dropping it.

What a form or a body holds is outside input: a value that cannot be what it names (an
id beyond a 64-bit integer, a NUL no PostgreSQL text can hold) is a 400 that says which,
never a 500 from the store.

Every action is logged (``console.*``) with what it touched, never with a secret.
"""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import quote

import structlog
from aiohttp import web
from prometheus_client import Counter

from tether.adapters.untrusted import unstorable
from tether.adapters.web import WebAdapter, WebChatError
from tether.cron import stamp
from tether.gateway.tasks.start import OPERATOR
from tether.gateway.web.auth import (
    COOKIE,
    LOGIN_COOKIE,
    LOGIN_FORM_SECONDS,
    Auth,
    over_tls,
    safe_next,
)
from tether.gateway.web.host import ConsoleHost
from tether.gateway.web.render import Renderer
from tether.gateway.web.retry import retry
from tether.keys import event_of
from tether.memory import tokens
from tether.scheduler.jobs import manual_cursor, now_utc

__all__ = ["Actions", "retry"]

log = structlog.get_logger("tether.console")

ACTIONS = Counter("tether_console_actions_total", "Operator actions in the console", ["action"])

MAX_FACT = 2000


#: Fact ids are SQL integers: SQLite's and PostgreSQL's BIGINT hold 64 bits, signed.
MAX_ID = 2**63 - 1


class Actions:
    def __init__(self, host: ConsoleHost, auth: Auth, render: Renderer) -> None:
        self.host = host
        self.auth = auth
        self.render = render

    # -- login ------------------------------------------------------------------------

    async def login_page(self, request: web.Request) -> web.Response:
        if await self.auth.session(request) is not None:
            raise web.HTTPFound(safe_next(request.query.get("next", "/ui")))
        return self._login_form(request, "")

    def _login_form(self, request: web.Request, error: str, status: int = 200) -> web.Response:
        nonce = self.auth.login_nonce()
        response = self.render.page(
            request,
            "login.html",
            status=status,
            nonce=nonce,
            error=error,
            next=safe_next(request.query.get("next", "/ui")),
        )
        response.set_cookie(
            LOGIN_COOKIE,
            nonce,
            path="/ui",
            httponly=True,
            samesite="Strict",
            max_age=LOGIN_FORM_SECONDS,
            secure=over_tls(request),
        )
        return response

    async def login(self, request: web.Request) -> web.Response:
        remote = request.remote or "unknown"
        wait = self.auth.wait(remote)
        if wait:
            log.warning("console.login_limited", remote=remote, retry_after_s=round(wait))
            response = self._login_form(request, "Too many wrong passwords: wait.", 429)
            response.headers["Retry-After"] = str(int(wait) + 1)
            return response
        form = await request.post()
        password, nonce = form.get("password"), form.get("csrf")
        if not await self.auth.spend_login_nonce(nonce, request.cookies.get(LOGIN_COOKIE, "")):
            log.warning("console.csrf_refused", path=request.path, remote=remote)
            return self._login_form(request, "The form expired or was used: try again.", 403)
        if not isinstance(password, str) or not await self.auth.check(password):
            self.auth.failed(remote)
            return self._login_form(request, "Wrong password.", 401)
        self.auth.succeeded(remote)
        target = form.get("next")
        response = web.HTTPFound(safe_next(target if isinstance(target, str) else "/ui"))
        self.auth.set_cookie(response, request, self.auth.new_session())
        response.del_cookie(LOGIN_COOKIE, path="/ui")
        raise response

    async def logout(self, request: web.Request) -> web.Response:
        await self.auth.revoke(request)
        log.info("console.logout", remote=request.remote)
        response = web.HTTPFound("/ui/login")
        response.del_cookie(COOKIE, path="/ui")
        raise response

    # -- operator actions -------------------------------------------------------------

    async def _form(self, request: web.Request) -> dict[str, str]:
        form = await request.post()
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        for name, value in fields.items():
            if "\x00" in value:
                raise web.HTTPBadRequest(text=f"{name}: holds a NUL character")
        return fields

    async def retry_dead(self, request: web.Request) -> web.Response:
        key = (await self._form(request)).get("key", "")
        ok = bool(key) and await retry(self.host, key)
        ACTIONS.labels("dead_retry").inc()
        log.info("console.dead_retry", key=key, requeued=ok)
        raise web.HTTPFound(f"/ui/dead?{'retried' if ok else 'missing'}={quote(key)}")

    async def fact(self, request: web.Request) -> web.Response:
        form = await self._form(request)
        conversation, action = form.get("c", ""), form.get("action", "")
        try:
            fact_id = int(form.get("id", ""))
        except ValueError:
            raise web.HTTPBadRequest(text="id: not a number") from None
        if not 0 < fact_id <= MAX_ID:
            raise web.HTTPBadRequest(text=f"id: 1 to {MAX_ID}")
        store = self.host.store
        if action == "forget":
            ok = await store.forget_fact(conversation, fact_id)
        elif action == "edit":
            text = form.get("text", "").strip()
            if not text or len(text) > MAX_FACT:
                raise web.HTTPBadRequest(text=f"text: 1 to {MAX_FACT} characters")
            ok = await store.edit_fact(conversation, fact_id, text, tokens.count(text))
        else:
            raise web.HTTPBadRequest(text="action: edit or forget")
        ACTIONS.labels("fact").inc()
        log.info("console.fact", action=action, conversation=conversation, fact=fact_id, ok=ok)
        raise web.HTTPFound(f"/ui/conversation?c={quote(conversation)}")

    async def run_job(self, request: web.Request) -> web.Response:
        job_id = (await self._form(request)).get("job", "")
        job = next((j for j in self.host.jobs if j.id == job_id), None)
        if job is None:
            raise web.HTTPNotFound(text=f"no job {job_id!r}")
        now = now_utc()
        event = job.event(now, manual=f"{stamp(now)}-{uuid.uuid4().hex[:8]}")
        await self.host.inbox.accept([event], {manual_cursor(job.id): event.key})
        ACTIONS.labels("job_run").inc()
        log.info("console.job_run", job=job.id, key=event.key)
        raise web.HTTPFound(f"/ui/jobs?fired={quote(event.key)}")

    async def cancel_task(self, request: web.Request) -> web.Response:
        task_id = (await self._form(request)).get("task", "")[:100]
        _, ended = await self.host.tasks.cancel(task_id, OPERATOR)
        ACTIONS.labels("task_cancel").inc()
        log.info("console.task_cancel", task=task_id, cancelled=ended)
        which = "cancelled" if ended else "missing"  # gone, or it had ended already
        raise web.HTTPFound(f"/ui/tasks?{which}={quote(task_id)}")

    # -- the web chat -----------------------------------------------------------------

    def _web(self) -> WebAdapter:
        adapter = self.host.adapters.get("web")
        if not isinstance(adapter, WebAdapter):
            raise web.HTTPNotFound(text="platforms.web is not enabled")
        return adapter

    async def chat_send(self, request: web.Request) -> web.Response:
        adapter = self._web()
        try:
            body: Any = await request.json()
        except ValueError:
            return web.json_response({"error": "body: not JSON"}, status=400)
        if not isinstance(body, dict) or not all(
            isinstance(body.get(k), str) for k in ("chat", "id", "text")
        ):
            return web.json_response({"error": "body: chat, id and text strings"}, status=400)
        chat, message_id, text = body["chat"], body["id"], body["text"]
        try:
            event = adapter.event(chat, message_id, text)
            new = await adapter.say(chat, message_id, text)
        except WebChatError as exc:
            return web.json_response({"accepted": False, "error": str(exc)}, status=400)
        except RuntimeError:  # the adapter is stopping (or not started): try again later
            return web.json_response({"accepted": False, "error": "not running"}, status=503)
        if not new and await self.host.store.inbox_row(event.key) is None:
            # Not new, and not there: the inbox refused it (and logged event.unstorable).
            reason = unstorable(event) or "the inbox refused it"
            log.warning("console.chat_refused", key=event.key, reason=reason)
            refused = {"accepted": False, "error": f"not sent: {reason}"}
            return web.json_response(refused, status=422)
        return web.json_response({"accepted": True, "new": new})

    async def chat_log(self, request: web.Request) -> web.Response:
        chat = request.query.get("chat", "")
        if not chat or len(chat) > 64:
            return web.json_response({"error": "chat: 1-64 characters"}, status=400)
        adapter = self._web()
        lines = await self.host.store.chat_log(f"web:{chat}")
        answered = {event_of(line.key) for line in lines if line.role == "agent"}
        return web.json_response(
            {
                "lines": [
                    {"key": line.key, "role": line.role, "text": line.text, "at": line.at}
                    for line in lines
                ],
                "streaming": [
                    {"key": key, "text": text} for key, text in adapter.previews(chat, answered)
                ],
            }
        )
