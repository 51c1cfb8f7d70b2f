"""Prometheus metrics: every pipeline transition moves one of these.

Kept in one module so that ``/metrics`` and a newcomer find them all in one place.
"""

from __future__ import annotations

import functools
from typing import TypeVar

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

M = TypeVar("M", bound=MetricWrapperBase)

EVENTS = Counter("tether_events_total", "Inbound events by transition", ["platform", "status"])
DUPLICATES = Counter(
    "tether_duplicates_total", "Inbound events dropped as duplicates", ["platform"]
)
RETRIES = Counter("tether_retries_total", "Handler attempts that will be retried", ["platform"])
DEAD = Counter("tether_dead_letters_total", "Events dead-lettered", ["platform"])
STEPS_CACHED = Counter("tether_steps_cached_total", "Memoized steps reused instead of re-run")
OUTBOX = Counter("tether_outbox_total", "Outbound messages by transition", ["platform", "status"])
THROTTLED = Counter(
    "tether_throttled_total", "Inbound events over a sender's rate limit", ["platform"]
)
LLM_TOKENS = Counter("tether_llm_tokens_total", "LLM tokens by model", ["model", "kind"])
LLM_COST = Counter("tether_llm_cost_total", "LLM cost by model, from configured prices", ["model"])
BUDGET_EXCEEDED = Counter(
    "tether_budget_exceeded_total", "LLM calls not made because of a budget", ["budget"]
)
LLM_KEY_STATE = Gauge(
    "tether_llm_key_state",
    "An API key's state by masked id: 0 healthy, 1 cooling down after a 429, 2 refused",
    ["provider", "key"],
)
LLM_BREAKER_OPEN = Gauge(
    "tether_llm_breaker_open", "1 while a model's circuit breaker sends calls elsewhere", ["model"]
)
PRUNED = Counter(
    "tether_pruned_rows_total", "Rows deleted (payloads: reduced) by retention", ["class"]
)
CRON_FIRES = Counter("tether_cron_fires_total", "Cron fires accepted", ["job"])
CRON_SKIPS = Counter("tether_cron_skips_total", "Cron fires skipped", ["job", "reason"])
CONNECTED = Gauge("tether_platform_connected", "1 while a platform is connected", ["platform"])
LANE_DEPTH = Gauge("tether_lane_queue_depth", "Events queued in conversation lanes")
LANE_LOCKS_LOST = Counter(
    "tether_lane_locks_lost_total",
    "Lane locks gone with their PostgreSQL session (those lanes were stopped and taken again)",
)
HANDLER_SECONDS = Histogram(
    "tether_handler_seconds",
    "Handler run time",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60),
)

# -- the watchdog (gateway/ops/watchdog.py): the gateway's own health ----------------------
LOOP_LAG = Gauge("tether_loop_lag_seconds", "How late the event loop woke a timer, last sample")
DISCONNECTED_SECONDS = Gauge(
    "tether_platform_disconnected_seconds",
    "How long a platform has been disconnected",
    ["platform"],
)
OUTBOX_OLDEST = Gauge(
    "tether_outbox_oldest_unsent_seconds", "How long the oldest unsent outbox row has waited"
)
DEAD_LAST_HOUR = Gauge("tether_dead_letters_last_hour", "Events dead-lettered in the last hour")
STORE_WRITE = Gauge("tether_store_write_seconds", "How long the watchdog's last store write took")
HANDLER_OVERRUNS = Counter(
    "tether_handler_overruns_total", "Handlers seen running past their timeout", ["route"]
)
ALERT_OPEN = Gauge("tether_alert_open", "1 while a watchdog check is tripped", ["check"])
TOOL_CALLS = Counter(
    "tether_tool_calls_total",
    "Tool calls by outcome: done, failed, cached (a re-run's stored result), unknown",
    ["tool", "outcome"],
)
WAITS = Counter(
    "tether_waits_total",
    "Durable waits (ctx.ask, approvals) by transition: opened, resolved, expired, cancelled",
    ["kind", "transition"],
)
APPROVALS = Counter(
    "tether_approvals_total",
    "Tool approvals by outcome: requested, approved, denied, expired, refused (a press by"
    " someone who may not approve)",
    ["tool", "outcome"],
)
TASKS = Counter(
    "tether_tasks_total",
    "Background tasks by transition: started, resumed, refused, done, failed, expired, cancelled",
    ["transition"],
)
PRESS_ACKS = Counter(
    "tether_button_acks_total",
    "Button presses acknowledged to the platform, by outcome",
    ["platform", "outcome"],
)

STREAM = Counter(
    "tether_stream_total",
    "Streamed replies: previews sent, edited, failed; finished by an outbox edit",
    ["platform", "status"],
)

MEDIA = Counter(
    "tether_media_files_total",
    "Files by transition: stored (a reply's), sent, downloaded, download_failed,"
    " to_model (an image the llm agent sent a model), unusable (told it cannot use it),"
    " refused (a files= path or URL outside media.allow_paths / to a private address)",
    ["platform", "transition"],
)


@functools.cache
def labelled(metric: M, *values: str) -> M:
    """``metric.labels(*values)``, remembered: the pipeline moves a few series per event,
    and prometheus_client checks and locks on every ``labels`` call."""
    return metric.labels(*values)
