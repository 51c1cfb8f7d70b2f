"""A fake Telegram Bot API on 127.0.0.1, for driving the real python-telegram-bot client.

Point PTB at it with ``base_url=fake.base_url``. It keeps a queue of updates and confirms
them by the Bot API's rule: "an update is considered confirmed as soon as getUpdates is
called with an offset higher than its update_id" — at the call, and while that call's long
poll waits, for an update arriving with a lower id. It long-polls for up to the ``timeout``
it is given, records every call and every offset it saw, and can be told to fail the next
call of a method (429 with retry_after, a 400, a 409, or a dropped connection). Waiting is
on a condition, never on sleeps: ``await fake.wait_for(lambda: len(fake.sent) >= 3)``.

Update ids count up from 1000. After a week without updates Telegram picks the next id at
random; :meth:`FakeTelegram.restart_ids` is that moment, with the id the test picks (below
the ids before, or equal to one of them). The Bot API server itself (tdlib's) answers an
offset more than 10 above its newest id from the head of its queue instead; the fake keeps
to the documented rule, the one a client can rely on. Negative offsets are not modelled.

PTB 22 posts ``application/x-www-form-urlencoded`` (every value a string, nested values
JSON-encoded); other clients post JSON. Both are accepted.

``python -m tests.fakes.telegram_api --port N`` runs it standalone with the ``/_fake``
control routes the benchmark uses (load N updates, wait for N sends).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import re
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.web_request import FileField

from tests.fakes.telegram_text import Refused, Texts, rendered

TOKEN = "123456:TEST-token_abcdefghijklmnopqrstuvwxyz"
BOT_ID = 123456
USERNAME = "tether_test_bot"

# Fields PTB sends JSON-encoded inside form values; everything else stays a string
# (so a text of "42" is not turned into a number).
_JSON_FIELDS = frozenset(
    {
        "offset",
        "limit",
        "timeout",
        "chat_id",
        "message_thread_id",
        "reply_parameters",
        "allowed_updates",
        "drop_pending_updates",
        "reply_markup",
        "entities",
        "link_preview_options",
        "max_connections",
        "show_alert",
        "cache_time",
        "disable_notification",
    }
)
_MENTION = re.compile(r"@[A-Za-z0-9_]{3,}")


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    status: int = 200
    at: float = field(default_factory=time.monotonic)
    #: How the parameters came: a form, multipart, or one JSON body.
    content_type: str = ""


@dataclass
class Failure:
    status: int
    description: str
    parameters: dict[str, Any] | None = None  # Telegram's ResponseParameters
    drop: bool = False  # close the connection without answering


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


class FakeTelegram:
    def __init__(self, token: str = TOKEN, username: str = USERNAME) -> None:
        self.token = token
        self.bot_id = int(token.split(":", 1)[0])
        self.username = username
        self.pending: list[dict[str, Any]] = []  # unconfirmed updates, by update_id
        self.confirmed: list[int] = []
        self.offsets: list[int | None] = []  # every getUpdates offset, in order
        self.calls: list[Call] = []
        self.sent: list[dict[str, Any]] = []  # successful sendMessage params, in order
        #: The last menu setMyCommands set: (command, description) pairs.
        self.commands: list[tuple[str, str]] = []
        self.texts = Texts()  # what each message shows (parsed, after edits) and the edits
        #: answerCallbackQuery: query id → when it was answered (time.monotonic()).
        self.answered: dict[str, float] = {}
        #: answerCallbackQuery: query id → (toast text, show_alert).
        self.answers: dict[str, tuple[str, bool]] = {}
        self.webhook: dict[str, Any] | None = None
        #: Called with each getUpdates offset before it confirms anything (tests inspect
        #: the client's state at the moment it acknowledges a batch).
        self.on_poll: Callable[[int | None], None] | None = None
        #: While True, a getUpdates whose offset would confirm a pending update fails with
        #: 502 and confirms nothing: Telegram out of reach just after a batch was fetched.
        self.refuse_confirmations = False
        self._closing = False
        self._waiters = 0
        self._polls = 0  # getUpdates calls so far: a newer one ends an older one's wait
        self._tasks: set[asyncio.Task[None]] = set()
        self.failures: dict[str, deque[Failure]] = defaultdict(deque)
        self._update_ids = itertools.count(1000)
        self._message_ids = itertools.count(1)
        self._sent_ids = itertools.count(50_000)
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0
        # benchmark bookkeeping (see /_fake routes)
        self.first_batch_at: float | None = None
        self.last_sent_at: float | None = None

    # -- lifecycle ------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/bot"

    def app(self, control: bool = False) -> web.Application:
        app = web.Application()
        app.router.add_post("/bot{token}/{method}", self._handle)
        app.router.add_get("/bot{token}/{method}", self._handle)
        if control:
            app.router.add_post("/_fake/load", self._load)
            app.router.add_get("/_fake/wait", self._wait)
        return app

    async def start(self, port: int = 0, control: bool = False) -> FakeTelegram:
        # A client that goes away (a stopped or killed process) ends its long poll, as
        # its closed connection does on Telegram: a wait it left must not confirm later
        # updates by its offset.
        self._runner = web.AppRunner(self.app(control), access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        self._closing = True  # end pending long polls now instead of at their timeout
        async with self._changed:
            self._changed.notify_all()
        if self._runner:
            await self._runner.cleanup()
            self._runner = None

    # -- feeding --------------------------------------------------------------------

    def push(self, **fields: Any) -> dict[str, Any]:
        """Queue an update (``message=...``, ``callback_query=...``); returns it."""
        update = {"update_id": next(self._update_ids), **fields}
        self.push_raw(update)
        return update

    def push_raw(self, update: dict[str, Any]) -> None:
        """Queue any JSON object as an update, malformed ones included."""
        self.pending.append(update)
        self._notify()

    def restart_ids(self, next_id: int) -> None:
        """A week without updates went by: the next update_id is Telegram's random pick,
        here ``next_id``. Telegram keeps unconfirmed updates a day, so nothing is pending."""
        assert not self.pending, "ids restart only after a week without updates"
        self._update_ids = itertools.count(next_id)

    def message(
        self,
        chat_id: int,
        text: str | None = None,
        *,
        chat_type: str | None = None,
        user_id: int | None = None,
        is_bot: bool = False,
        thread_id: int | None = None,
        reply_to: dict[str, Any] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A Message object as Telegram sends it, with command and mention entities."""
        kind = chat_type or ("private" if chat_id > 0 else "supergroup")
        chat: dict[str, Any] = {"id": chat_id, "type": kind}
        chat.update({"first_name": "Ada"} if kind == "private" else {"title": "Group"})
        uid = user_id if user_id is not None else (chat_id if chat_id > 0 else 777)
        message: dict[str, Any] = {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": chat,
            "from": {"id": uid, "is_bot": is_bot, "first_name": "Ada", "username": f"u{uid}"},
        }
        if text is not None:
            message["text"] = text
            entities = []
            if text.startswith("/"):
                entities.append(
                    {"type": "bot_command", "offset": 0, "length": len(text.split()[0])}
                )
            for match in _MENTION.finditer(text):
                start = utf16(text[: match.start()])
                entities.append({"type": "mention", "offset": start, "length": utf16(match[0])})
            if entities:
                message["entities"] = entities
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        if reply_to is not None:
            message["reply_to_message"] = reply_to
        message.update(extra)
        return message

    def press(
        self, data: str, *, chat_id: int = 42, user_id: int | None = None, query_id: str = "cbq-1"
    ) -> dict[str, Any]:
        """Queue a press of an inline button carrying ``data`` on a bot message; returns
        the update (``push_raw`` it again to deliver the same press twice)."""
        uid = user_id if user_id is not None else chat_id
        return self.push(
            callback_query={
                "id": query_id,
                "from": {"id": uid, "is_bot": False, "first_name": "Ada"},
                "chat_instance": f"ci{chat_id}",
                "data": data,
                "message": self.bot_message(chat_id, "Pick one"),
            }
        )

    def bot_message(self, chat_id: int, text: str = "earlier answer") -> dict[str, Any]:
        """A message the bot sent earlier (to reply to)."""
        return {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "from": {"id": self.bot_id, "is_bot": True, "first_name": "Tether"},
            "text": text,
        }

    def fail_next(
        self,
        method: str,
        status: int,
        description: str,
        *,
        retry_after: int | None = None,
        migrate_to_chat_id: int | None = None,
    ) -> None:
        parameters: dict[str, Any] = {}
        if retry_after is not None:
            parameters["retry_after"] = retry_after
        if migrate_to_chat_id is not None:
            parameters["migrate_to_chat_id"] = migrate_to_chat_id
        self.failures[method].append(Failure(status, description, parameters or None))

    def drop_next(self, method: str) -> None:
        """Close the connection after reading the request: the client cannot tell if it worked."""
        self.failures[method].append(Failure(0, "", drop=True))

    # -- observing ------------------------------------------------------------------

    def calls_to(self, method: str) -> list[Call]:
        return [call for call in self.calls if call.method == method]

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until ``predicate()`` holds, re-checked after every call and update."""
        self._waiters += 1
        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(predicate), timeout)
        finally:
            self._waiters -= 1

    def _notify(self) -> None:
        if not self._waiters:  # nobody to wake (keeps the fake cheap under benchmark load)
            return

        async def notify() -> None:
            async with self._changed:
                self._changed.notify_all()

        task = asyncio.get_running_loop().create_task(notify())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the Bot API ----------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        method = request.match_info["method"]
        params = await _params(request)
        call = Call(method, params, content_type=request.content_type)
        self.calls.append(call)
        failures = self.failures.get(method)
        if failures:
            failure = failures.popleft()
            call.status = failure.status
            self._notify()
            if failure.drop:
                assert request.transport is not None
                request.transport.close()
                return web.Response()
            return _error(failure.status, failure.description, failure.parameters)
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            call.status = 404
            self._notify()
            return _error(404, "Not Found: method not found")
        try:
            result = await handler(params)
        except _ApiError as exc:
            call.status = exc.status
            self._notify()
            return _error(exc.status, exc.description)
        self._notify()
        return web.json_response({"ok": True, "result": result})

    async def _api_getMe(self, _params: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": "Tether",
            "username": self.username,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    async def _api_getUpdates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        if self.webhook is not None:
            raise _ApiError(
                409,
                "Conflict: can't use getUpdates method while webhook is active; "
                "use deleteWebhook to delete the webhook first",
            )
        offset = params.get("offset")
        limit = int(params.get("limit") or 100)
        timeout = float(params.get("timeout") or 0)
        self.offsets.append(offset)
        # As on Telegram, a getUpdates ends the one still waiting (the client that sent it
        # may be gone: a stopped process's long poll must not confirm what comes next).
        self._polls += 1
        mine = self._polls
        self._notify()
        if self.on_poll is not None:
            self.on_poll(offset)
        if self.refuse_confirmations and self._below(offset):
            raise _ApiError(502, "Bad Gateway")

        def available() -> list[dict[str, Any]]:
            self._confirm(offset)  # the call's offset holds for what arrives while it waits
            return self.pending[:limit]

        def done() -> bool:
            return self._polls != mine or self._closing or bool(available())

        if not available() and timeout > 0:
            self._waiters += 1
            try:
                async with self._changed:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait_for(done), timeout)
            finally:
                self._waiters -= 1
        if self._polls != mine:
            raise _ApiError(409, "Conflict: terminated by other getUpdates request")
        batch = available()
        if batch and self.first_batch_at is None:
            self.first_batch_at = time.perf_counter()
        return batch

    def _below(self, offset: int | None) -> list[dict[str, Any]]:
        """The pending updates a getUpdates with ``offset`` confirms."""
        if offset is None or offset <= 0:
            return []
        return [
            update
            for update in self.pending
            if isinstance(uid := update.get("update_id"), int) and uid < offset
        ]

    def _confirm(self, offset: int | None) -> None:
        below = self._below(offset)
        if below:
            self.confirmed.extend(update["update_id"] for update in below)
            gone = {id(update) for update in below}
            self.pending = [update for update in self.pending if id(update) not in gone]

    async def _api_sendMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        text = params.get("text")
        if not text:
            raise _ApiError(400, "Bad Request: message text is empty")
        try:  # MarkdownV2 is parsed (and refused) as Telegram does; 4096 counts the result
            shown = rendered(str(text), params.get("parse_mode"))
        except Refused as exc:
            raise _ApiError(400, f"Bad Request: can't parse entities: {exc}") from exc
        if not shown.strip():
            raise _ApiError(400, "Bad Request: message text is empty")
        if utf16(shown) > 4096:
            raise _ApiError(400, "Bad Request: message is too long")
        if "reply_markup" in params:
            _check_markup(params["reply_markup"])
        self.sent.append(params)
        self.last_sent_at = time.perf_counter()
        chat_id = params["chat_id"]
        numeric = isinstance(chat_id, int)
        message: dict[str, Any] = {
            "message_id": next(self._sent_ids),
            "date": int(time.time()),
            "chat": {
                "id": chat_id if numeric else -1001,
                "type": "private" if numeric and chat_id > 0 else "supergroup",
            },
            "from": {"id": self.bot_id, "is_bot": True, "first_name": "Tether"},
            "text": text,
        }
        if params.get("message_thread_id"):
            message["message_thread_id"] = params["message_thread_id"]
            message["is_topic_message"] = True
        markup = params.get("reply_markup")
        self.texts.posted(
            chat_id,
            message["message_id"],
            shown,
            json.loads(markup) if isinstance(markup, str) else markup,
        )
        return message

    async def _api_editMessageText(self, params: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.texts.edit(params)
        except Refused as exc:
            raise _ApiError(400, f"Bad Request: {exc}") from exc

    async def _api_deleteMessage(self, params: dict[str, Any]) -> bool:
        return self._refusing(self.texts.delete, params)

    async def _api_setMessageReaction(self, params: dict[str, Any]) -> bool:
        return self._refusing(self.texts.react, params)

    async def _api_pinChatMessage(self, params: dict[str, Any]) -> bool:
        return self.texts.pin(params, pinned=True)

    async def _api_unpinChatMessage(self, params: dict[str, Any]) -> bool:
        return self.texts.pin(params, pinned=False)

    @staticmethod
    def _refusing(call: Callable[[dict[str, Any]], bool], params: dict[str, Any]) -> bool:
        try:
            return call(params)
        except Refused as exc:
            raise _ApiError(400, f"Bad Request: {exc}") from exc

    async def _api_setWebhook(self, params: dict[str, Any]) -> bool:
        self.webhook = params
        return True

    async def _api_deleteWebhook(self, params: dict[str, Any]) -> bool:
        self.webhook = None
        if params.get("drop_pending_updates"):
            self.pending.clear()
        return True

    async def _api_setMyCommands(self, params: dict[str, Any]) -> bool:
        """The bot's command menu, checked as Telegram checks it (a bad entry is a 400)."""
        commands = params.get("commands")
        if isinstance(commands, str):
            commands = json.loads(commands)
        for entry in commands or []:
            if not re.fullmatch(r"[a-z0-9_]{1,32}", entry.get("command", "")):
                raise _ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
            if not 1 <= len(entry.get("description", "")) <= 256:
                raise _ApiError(400, "Bad Request: command description is invalid")
        self.commands = [(e["command"], e["description"]) for e in commands or []]
        return True

    async def _api_sendChatAction(self, _params: dict[str, Any]) -> bool:
        return True

    async def _api_answerCallbackQuery(self, params: dict[str, Any]) -> bool:
        """Each query can be answered once, as on Telegram (a second answer is a 400)."""
        query_id = str(params.get("callback_query_id"))
        if query_id in self.answered:
            raise _ApiError(400, "Bad Request: query is too old and response timeout expired")
        self.answered[query_id] = time.monotonic()
        self.answers[query_id] = (str(params.get("text") or ""), _flag(params.get("show_alert")))
        return True

    # -- benchmark control ----------------------------------------------------------

    async def _load(self, request: web.Request) -> web.Response:
        """Reset, then queue ``updates`` text messages spread round-robin over ``chats``."""
        spec = await request.json()
        self.pending.clear()
        self.sent.clear()
        self.calls.clear()
        self.offsets.clear()
        self.first_batch_at = self.last_sent_at = None
        for n in range(int(spec["updates"])):
            chat = 10_000 + n % int(spec["chats"])
            self.pending.append(
                {"update_id": next(self._update_ids), "message": self.message(chat, f"m{n}")}
            )
        self._notify()
        return web.json_response({"queued": len(self.pending)})

    async def _wait(self, request: web.Request) -> web.Response:
        """Answer once ``count`` messages were sent: when the first batch went out and the
        last message came in, on this process's clock (the same for every contestant)."""
        count = int(request.query["count"])
        status = 200
        try:
            await self.wait_for(
                lambda: len(self.sent) >= count, timeout=float(request.query.get("timeout", 300))
            )
        except TimeoutError:
            status = 504
        return web.json_response(
            {
                "sent": len(self.sent),
                "first_batch_at": self.first_batch_at,
                "last_sent_at": self.last_sent_at,
                "calls": len(self.calls),
                "statuses": sorted({(c.method, c.status) for c in self.calls}),
                "pending": len(self.pending),
            },
            status=status,
        )


def _flag(value: Any) -> bool:
    """A boolean parameter as PTB posts it (JSON ``true`` or the string)."""
    return value is True or str(value).lower() == "true"


class _ApiError(Exception):
    def __init__(self, status: int, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.description = description


def _check_markup(markup: Any) -> None:
    """Telegram's rules for an inline keyboard: rows of buttons, each with text and one
    action; ``callback_data`` 1-64 bytes."""
    rows = markup.get("inline_keyboard") if isinstance(markup, dict) else None
    if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
        raise _ApiError(400, "Bad Request: can't parse reply keyboard markup JSON object")
    for button in (button for row in rows for button in row):
        if not isinstance(button, dict) or not button.get("text"):
            raise _ApiError(400, "Bad Request: text buttons are unallowed in the inline keyboard")
        actions = [name for name in ("callback_data", "url") if name in button]
        if len(actions) != 1:
            raise _ApiError(400, "Bad Request: inline keyboard button needs exactly one action")
        data = button.get("callback_data")
        if data is not None and not 1 <= len(str(data).encode()) <= 64:
            raise _ApiError(400, "Bad Request: BUTTON_DATA_INVALID")


def _error(status: int, description: str, parameters: dict[str, Any] | None = None) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return web.json_response(body, status=status)


async def _params(request: web.Request) -> dict[str, Any]:
    if request.content_type == "application/json":
        data = await request.json()
        return dict(data) if isinstance(data, dict) else {}
    form = await request.post()
    params: dict[str, Any] = {}
    for name, value in form.items():
        if isinstance(value, FileField):  # an uploaded file (multipart): its name and bytes
            params[name] = {
                "filename": value.filename,
                "content_type": value.content_type,
                "data": value.file.read(),
            }
            continue
        if not isinstance(value, str):
            continue
        if name in _JSON_FIELDS:
            try:
                params[name] = json.loads(value)
                continue
            except ValueError:
                pass  # e.g. chat_id="@channel"
        params[name] = value
    params.update({k: v for k, v in request.query.items() if k not in params})
    return params


async def _serve(port: int) -> None:
    fake = await FakeTelegram().start(port, control=True)
    print(json.dumps({"port": fake.port, "token": fake.token}), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    asyncio.run(_serve(parser.parse_args().port))
