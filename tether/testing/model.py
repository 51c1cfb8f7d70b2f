"""A scripted model: an OpenAI-compatible chat completions server on 127.0.0.1.

The gateway's real client (the ``openai`` SDK) talks to it over HTTP, as it talks to a
provider, so a test exercises the same routing, budgets, memoized steps, tool loop and
streaming a deployment runs. It records every request (body and headers) and answers
from its script: ``FakeModel.scripted("Hello", asks_for(tool_call("add", {"a": 1})),
"It is 1.")`` answers the first request with text, the second with a tool call, and
every later one with the last answer; or ``reply=`` decides from each request's body.
Each answer carries a usage block (tiktoken's count of the prompt; the completion capped
at ``max_tokens``, as a real server would), and is streamed as server-sent events when
the request asks (:mod:`.stream`).

It also serves ``/v1/embeddings`` (:mod:`.embeddings`: a vector per word, summed, with
``concepts`` saying which different words mean the same), recording those requests
apart (``embedding_requests``; ``embedded``: every text it embedded, in order), and the
same failures apply to them.

It can be told to fail: a status for the next N requests, for every request to one
model or with one API key, or for requests a predicate picks (e.g. summary calls); or
to hang until the server closes (to exercise timeouts). With ``streams=False`` it answers
a streaming request with one JSON completion, as some local servers and proxies do.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tether.memory import tokens
from tether.testing import embeddings
from tether.testing.stream import Pacing, stream

Body = dict[str, Any]
#: What a script's answer is: a text, or a message such as :func:`asks_for`'s.
Answer = str | Body
#: The key the fake provider is configured with (a secret: it must never be logged).
API_KEY = "sk-fake-0123456789abcdef"


@dataclass
class Request:
    body: Body
    headers: dict[str, str]
    status: int = 200

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def api_key(self) -> str:
        """The key the request was made with (from its ``Authorization: Bearer``)."""
        return self.headers.get("Authorization", "").removeprefix("Bearer ")

    @property
    def messages(self) -> list[dict[str, str]]:
        return list(self.body.get("messages", []))

    @property
    def tools(self) -> list[str]:
        """The names of the tools the request offered the model."""
        return [tool["function"]["name"] for tool in self.body.get("tools") or []]

    @property
    def tool_results(self) -> list[dict[str, str]]:
        """The ``tool`` messages in the request (results of earlier calls), in order."""
        return [m for m in self.messages if m.get("role") == "tool"]

    @property
    def system(self) -> str:
        first = self.messages[0] if self.messages else {}
        return first.get("content", "") if first.get("role") == "system" else ""


@dataclass
class _Failure:
    status: int
    when: Callable[[Body, str], bool]  # (body, api key)
    times: int | None  # None: until healed
    retry_after: str | None = None


@dataclass
class FakeModel:
    """``reply(body) -> text`` decides the answers (or ``-> message``: a dict such as
    ``{"tool_calls": [...]}``, see :func:`tool_call`); ``usage`` overrides the token counts.

    Used as an async context manager it serves while the block runs::

        async with FakeModel.scripted("Hello!") as model:
            ...  # model.section() is the llm: config that points at it
    """

    reply: Callable[[Body], Answer] = field(default=lambda body: "ok")
    usage: tuple[int, int] | None = None
    requests: list[Request] = field(default_factory=list)
    url: str = ""
    #: How streamed answers are cut and held (.stream); None: all at once.
    pacing: Pacing | None = None
    #: False: a request asking for a stream gets one JSON completion instead.
    streams: bool = True
    #: Words embedded as another word (``{"automobile": "car"}``): near without sharing one.
    concepts: dict[str, str] = field(default_factory=dict)
    #: ``/v1/embeddings`` requests, apart from the chat completions in ``requests``.
    embedding_requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._failures: deque[_Failure] = deque()
        self._hang: set[str] = set()
        self._holds: list[tuple[Callable[[Body], bool], asyncio.Event | None]] = []
        self._closing = asyncio.Event()
        self._changed = asyncio.Condition()
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None

    @classmethod
    def scripted(cls, *answers: Answer) -> FakeModel:
        """A model answering the n-th request with the n-th answer (the last repeats)."""
        return cls(reply=scripted(*answers))

    async def __aenter__(self) -> FakeModel:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- scripting ----------------------------------------------------------------

    def fail(
        self,
        status: int,
        *,
        times: int | None = 1,
        model: str | None = None,
        when: Callable[[Body], bool] | None = None,
        retry_after: str | None = None,
        key: str | None = None,
    ) -> None:
        """Answer ``status`` to matching requests, ``times`` times (None: until heal);
        ``key`` matches requests made with that API key."""

        def matches(body: Body, api_key: str) -> bool:
            return (
                (model is None or body.get("model") == model)
                and (key is None or api_key == key)
                and (when is None or when(body))
            )

        self._failures.append(_Failure(status, matches, times, retry_after))

    def hang(self, model: str) -> None:
        """Requests for ``model`` get no answer (until the server closes)."""
        self._hang.add(model)

    def hold(self, when: Callable[[Body], bool], until: asyncio.Event | None = None) -> None:
        """Requests ``when`` picks get no answer until ``until`` is set, then the usual
        one; without it, none until the server closes: a test can kill the caller while
        it waits, or let it go, at a moment it chose."""
        self._holds.append((when, until))

    def heal(self) -> None:
        self._failures.clear()
        self._hang.clear()
        self._holds.clear()

    @property
    def calls(self) -> int:
        return len(self.requests)

    @property
    def embedded(self) -> list[str]:
        """Every text the answered ``/v1/embeddings`` requests asked for, in order."""
        out: list[str] = []
        for request in self.embedding_requests:
            if request.status == 200:
                given = request.body.get("input", [])
                out += [given] if isinstance(given, str) else [str(text) for text in given]
        return out

    def answered(self) -> list[Request]:
        return [r for r in self.requests if r.status == 200]

    async def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[Request]:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.requests) >= count)
        return list(self.requests)

    def section(self, *, timeout: float = 30, **model: Any) -> dict[str, Any]:
        """The ``llm:`` config for this server: one model ``main`` (``model`` adds keys
        to it, e.g. ``vision=True``), the default."""
        return {
            "providers": {"fake": {"base_url": self.url, "api_key": API_KEY, "timeout": timeout}},
            "models": {"main": {"provider": "fake", "model": "main-model", **model}},
            "default": "main",
        }

    # -- server -------------------------------------------------------------------

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_post("/v1/embeddings", self._embeddings)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/v1"
        return self.url

    async def close(self) -> None:
        self._closing.set()
        if self._runner:
            await self._runner.cleanup()

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body: Body = await request.json()
        record = Request(body, dict(request.headers))
        failure = self._failure_for(body, record.api_key)
        if failure is not None:
            record.status = failure.status
        async with self._changed:
            self.requests.append(record)
            self._changed.notify_all()
        held = [until for when, until in self._holds if when(body)]
        if body.get("model") in self._hang or None in held:
            await self._closing.wait()
            raise web.HTTPServiceUnavailable()
        for until in held:
            if until is not None:
                await until.wait()
        if failure is not None:
            headers = {"retry-after": failure.retry_after} if failure.retry_after else {}
            return web.json_response(
                {"error": {"message": f"scripted {failure.status}", "type": "fake"}},
                status=failure.status,
                headers=headers,
            )
        answer = self.reply(body)
        message = answer if isinstance(answer, dict) else {"content": answer}
        text = str(message.get("content") or "")
        if self.usage is not None:
            prompt, completion = self.usage
        else:
            prompt = tokens.count_messages(body["messages"])
            completion = tokens.count(text)
        limit = body.get("max_tokens")
        if limit is not None:
            completion = min(completion, int(limit))
        if body.get("stream") and self.streams:  # server-sent chunks, held as pacing says
            ident = f"chatcmpl-{next(self._ids)}"
            return await stream(request, body, message, (prompt, completion), self.pacing, ident)
        return web.json_response(
            {
                "id": f"chatcmpl-{next(self._ids)}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text, **message},
                        "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            }
        )

    async def _embeddings(self, request: web.Request) -> web.Response:
        body: Body = await request.json()
        record = Request(body, dict(request.headers))
        failure = self._failure_for(body, record.api_key)
        record.status = failure.status if failure is not None else 200
        async with self._changed:
            self.embedding_requests.append(record)
            self._changed.notify_all()
        if failure is not None:
            error = {"message": f"scripted {failure.status}", "type": "fake"}
            return web.json_response({"error": error}, status=failure.status)
        given = body.get("input", [])
        texts = [given] if isinstance(given, str) else [str(text) for text in given]
        as_text = body.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(texts):
            values = embeddings.vector(text, self.concepts)
            shown: Any = embeddings.as_base64(values) if as_text else values
            data.append({"object": "embedding", "index": index, "embedding": shown})
        used = sum(tokens.count(text) for text in texts)
        usage = {"prompt_tokens": used, "total_tokens": used}
        return web.json_response(
            {"object": "list", "data": data, "model": body.get("model"), "usage": usage}
        )

    async def wait_for_embedded(self, count: int, timeout: float = 10.0) -> list[str]:
        """Until the fake has embedded ``count`` texts in all."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.embedded) >= count)
        return self.embedded

    def _failure_for(self, body: Body, api_key: str) -> _Failure | None:
        for failure in list(self._failures):
            if failure.when(body, api_key):
                if failure.times is not None:
                    failure.times -= 1
                    if failure.times <= 0:
                        self._failures.remove(failure)
                return failure
        return None


def scripted(*answers: Answer) -> Callable[[Body], Answer]:
    """A ``reply`` answering the n-th request with the n-th answer (the last repeats)."""
    if not answers:
        raise ValueError("a script needs at least one answer")
    seen = [0]

    def reply(body: Body) -> Answer:
        seen[0] += 1
        return answers[min(seen[0], len(answers)) - 1]

    return reply


def tool_call(name: str, arguments: str | dict[str, Any] = "{}", *, id: str = "") -> Body:
    """One scripted ``tool_calls`` entry; ``arguments`` as the API sends it (a JSON string,
    malformed on purpose if a test wants), a dict is encoded."""
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return {
        "id": id or f"call_{name}_{zlib.crc32(arguments.encode()) % 10_000}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def asks_for(*calls: Body, content: str | None = None) -> Body:
    """A scripted answer asking for ``calls`` (what ``reply`` returns to use tools)."""
    return {"content": content, "tool_calls": list(calls)}
