"""The console's pages that only read: overview, events and their timelines, dead
letters, approvals, tasks, conversations, search, jobs, and the shells of the live stream
and the web chat.

Everything shown comes from the store (and, for connection states, from the adapters),
read per request: the page is what is true now, whichever process wrote it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from tether.cron import zone
from tether.gateway.tools.approvals import audit_row
from tether.gateway.web.charts import bars
from tether.gateway.web.host import ConsoleHost
from tether.gateway.web.render import Renderer
from tether.gateway.web.retry import outcome
from tether.gateway.web.timeline import entries
from tether.memory.console import SERIES
from tether.memory.recall import Scope
from tether.memory.records import UNSENT_OUTBOX
from tether.scheduler.jobs import last_fire, now_utc

STATUSES = ("received", "running", "retry_wait", "waiting", "done", "dead")
#: How many approvals the page reads, and how many decided ones it shows.
APPROVALS, DECIDED = 200, 100
#: How many tasks the page reads for its ended ones.
TASKS = 200
#: How many turns a search shows; how long a query may be.
FOUND, QUERY = 50, 500
HOUR, MINUTE = 3600.0, 60.0


async def overview_data(host: ConsoleHost) -> dict[str, Any]:
    """The overview's numbers (the page, and ``/ui/api/overview`` for its refresh)."""
    store = host.store
    now = time.time()
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    today = await store.series(midnight, HOUR, 24)
    minute = await store.series(now - MINUTE, MINUTE, 1)
    counts = await store.counts()
    inbox, outbox = counts["inbox"], counts["outbox"]
    activity = await store.activity()
    platforms = [
        {
            "name": name,
            "connected": adapter.connected,
            "problem": adapter.problem,
            "received": activity.get(name, {}).get("received"),
            "sent": activity.get(name, {}).get("sent"),
        }
        for name, adapter in sorted(host.adapters.items())
    ]
    totals = {name: sum(today[name]) for name in SERIES}
    return {
        "platforms": platforms,
        "today": {**totals, "cost": round(totals["cost"], 6)},
        "last_minute": {"received": minute["received"][0], "replies": minute["replies"][0]},
        "backlog": sum(outbox.get(status, 0) for status in UNSENT_OUTBOX),
        "waiting": sum(inbox.get(status, 0) for status in ("received", "running", "retry_wait")),
        "dead": inbox.get("dead", 0),
        "inbox": inbox,
        "outbox": outbox,
    }


class Pages:
    def __init__(self, host: ConsoleHost, render: Renderer) -> None:
        self.host = host
        self.render = render

    async def overview(self, request: web.Request) -> web.Response:
        data = await overview_data(self.host)
        now = time.time()
        start = (now // HOUR) * HOUR - 23 * HOUR
        day = await self.host.store.series(start, HOUR, 24)
        hour_start = (now // MINUTE) * MINUTE - 59 * MINUTE
        hour = await self.host.store.series(hour_start, MINUTE, 60)
        charts = [
            bars(day["received"], start, HOUR, "events received per hour, last 24 h"),
            bars(day["replies"], start, HOUR, "replies sent per hour, last 24 h"),
            bars(day["retried"], start, HOUR, "events retried per hour"),
            bars(day["dead"], start, HOUR, "events dead per hour"),
            bars(day["tokens"], start, HOUR, "LLM tokens per hour"),
            bars(day["cost"], start, HOUR, "LLM cost per hour"),
            bars(hour["received"], hour_start, MINUTE, "events received per minute, last hour"),
            bars(hour["replies"], hour_start, MINUTE, "replies sent per minute, last hour"),
        ]
        return self.render.page(request, "overview.html", data=data, charts=charts)

    async def overview_api(self, _request: web.Request) -> web.Response:
        return web.json_response(await overview_data(self.host))

    async def events(self, request: web.Request) -> web.Response:
        query = request.query
        key, conversation = query.get("key", "")[:200], query.get("conversation", "")[:200]
        status = query.get("status", "")
        if status not in STATUSES:
            status = ""
        found = await self.host.store.find_events(
            key=key, conversation=conversation, status=status, limit=100
        )
        return self.render.page(
            request,
            "events.html",
            events=found,
            key=key,
            conversation=conversation,
            chosen=status,
            statuses=STATUSES,
        )

    async def event(self, request: web.Request) -> web.Response:
        key = request.query.get("key", "")
        timeline = await self.host.store.timeline(key) if key else None
        if timeline is None:
            return self.render.page(request, "missing.html", what=f"event {key!r}", status=404)
        waits = await self.host.store.waits_of(key)
        drawn = entries(timeline, waits)
        return self.render.page(request, "event.html", t=timeline, entries=drawn)

    async def dead(self, request: web.Request) -> web.Response:
        letters = await self.host.store.dead_letters()
        retried = request.query.get("retried", "")[:500]
        return self.render.page(
            request,
            "dead.html",
            letters=list(reversed(letters))[:200],
            sends=await self.host.store.failed_sends(200),
            done=await outcome(self.host, retried) if retried else "",
            failed=request.query.get("missing", "")[:500],
        )

    async def approvals(self, request: web.Request) -> web.Response:
        """The open approvals, oldest first (every one, however old), and the newest
        decided ones: the same rows as ``tether approvals list``. Read-only: a decision
        is a press on the card, by someone ``agent.tools.approvals.approvers`` names."""
        store = self.host.store
        pending = [audit_row(w) for w in await store.open_waits() if w.kind == "approval"]
        recent = [audit_row(w) for w in await store.waits("approval", APPROVALS)]
        decided = [row for row in recent if row["outcome"] != "pending"][:DECIDED]
        return self.render.page(request, "approvals.html", pending=pending, decided=decided)

    async def tasks(self, request: web.Request) -> web.Response:
        """Every running task, oldest first, with a cancel button each (what ``tether
        tasks cancel`` does), and the newest ended ones."""
        store = self.host.store
        ended = [task for task in await store.tasks(limit=TASKS) if not task.open]
        return self.render.page(
            request,
            "tasks.html",
            running=await store.open_tasks(),
            ended=ended[:DECIDED],
            cancelled=request.query.get("cancelled", "")[:100],
            missing=request.query.get("missing", "")[:100],
        )

    async def conversations(self, request: web.Request) -> web.Response:
        found = await self.host.store.conversation_list(200)
        return self.render.page(request, "conversations.html", conversations=found)

    async def search(self, request: web.Request) -> web.Response:
        """Every conversation's history by words, the operator's scope (``tether
        search``): DMs included, ``c`` narrows it to one conversation."""
        query = request.query.get("q", "").strip()[:QUERY]
        conversation = request.query.get("c", "").strip()[:200]
        scope = Scope.operator(conversation or None)
        hits = await self.host.store.search(query, scope, FOUND) if query else []
        return self.render.page(
            request, "search.html", query=query, conversation=conversation, hits=hits
        )

    async def conversation(self, request: web.Request) -> web.Response:
        store = self.host.store
        name = request.query.get("c", "")
        if not name:
            raise web.HTTPFound("/ui/conversations")
        return self.render.page(
            request,
            "conversation.html",
            name=name,
            state=await store.conversation(name),
            facts=await store.facts_said(name),
            history=await store.history(name, 50),
            usage=await store.usage(name),
            default_persona=self.host.settings.agent.persona,
        )

    async def jobs(self, request: web.Request) -> web.Response:
        store = self.host.store
        now = now_utc()
        rows = []
        for job in self.host.jobs:
            tz = job.config.timezone
            upcoming = self.host.scheduler.next_fire(job.id) if self.host.scheduler else None
            upcoming = upcoming or job.schedule.next_after(now)
            last = await last_fire(store, job.id)
            rows.append(
                {
                    "id": job.id,
                    "cron": job.config.cron,
                    "timezone": tz,
                    "action": job.action,
                    "next": _local(upcoming, tz),
                    "last": _local(last.at, tz) + (" (manual)" if last.manual else ""),
                    "last_key": last.key,
                    "outcome": last.outcome,
                }
            )
        return self.render.page(
            request, "jobs.html", jobs=rows, fired=request.query.get("fired", "")
        )

    async def live(self, request: web.Request) -> web.Response:
        return self.render.page(request, "live.html")

    async def chat(self, request: web.Request) -> web.Response:
        if "web" not in self.host.adapters:
            return self.render.page(request, "missing.html", what="the web chat", status=404)
        return self.render.page(request, "chat.html")


def _local(moment: datetime | None, tz: str) -> str:
    if moment is None:
        return "-"
    return moment.astimezone(zone(tz)).strftime("%Y-%m-%d %H:%M:%S %Z")
