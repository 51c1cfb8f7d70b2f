"""A provider's API keys as a pool, and a circuit breaker per model.

One rate-limited or revoked key must not stall every conversation, and one failing model
must not cost every event a timeout before its fallback answers. Both are in-process
state of one :class:`~tether.gateway.llm.client.LLM`: a reload builds a new LLM, so a revoked key
is tried again after a reload and never before.

- :class:`KeyPool`: calls go round-robin over the healthy keys. A 429 cools a key down for
  the provider's ``retry-after`` (else a backoff), never longer than
  ``llm.max_retry_after`` (:mod:`.waits`), and the call moves to the next key at once.
  401/402/403 is tried once more (a refusal can be a passing fault of the provider's auth)
  and takes the key out at the second in a row. When every key is cooling down the call
  raises :class:`~.waits.ModelBusy` with the earliest end of a cooldown. A pool whose
  every key is out, or whose provider asked for more than the bound, is a
  :meth:`KeyPool.problem`: an ops alert and a ``/readyz`` reason until it heals.
- :class:`Breaker`: after ``llm.circuit_breaker.failures`` consecutive failures a model is
  skipped for ``cooldown`` seconds, then one call probes it (half-open); its answer closes
  the breaker, its failure opens it again. Calls that find the probe in flight may wait
  for its verdict (:meth:`Breaker.probed`) instead of failing while the model may be back.

Keys appear in logs, metrics and ``tether status`` only by a masked id (``…`` and the
last 4 characters).
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog
from prometheus_client.parser import text_string_to_metric_families

from tether import metrics
from tether.backoff import equal_jitter
from tether.errors import Fatal
from tether.gateway.llm.waits import RETRY_AFTER_CAPPED, bounded
from tether.gateway.ops.alerts import Reading

if TYPE_CHECKING:
    from tether.config.schema import Settings

log = structlog.get_logger("tether.llm")

#: Backoff for a 429 without ``retry-after``: base and cap in seconds.
COOLDOWN_BASE = 1.0
COOLDOWN_CAP = 60.0

#: ``tether_llm_key_state`` values.
HEALTHY, COOLING, REVOKED = 0, 1, 2
STATE_NAMES = {HEALTHY: "healthy", COOLING: "cooling", REVOKED: "revoked"}

#: The keys a ``tether_llm_key_state`` series may read, newest last: a reload builds its
#: pool while the running one still serves (and closes it again if the reload fails), so
#: the series reads the newest live pool and falls back when that one closes.
_series: dict[tuple[str, str], list[Key]] = {}


def mask(key: str) -> str:
    """The id a key is shown by: its last 4 characters, never more than a quarter of it."""
    if not key:
        return "none"
    return "…" + key[-4:] if len(key) >= 16 else "…" + key[-max(1, len(key) // 4) :]


class KeysRefused(Fatal):
    """Every key of a model's provider was refused: a fallback on another provider may
    still answer; if none does, the event is dead (until a reload brings new keys)."""


class KeyProblem(Exception):
    """The key, not the model, failed a call (429, or 401/402/403): try the next key."""

    def __init__(self, status: int, retry_after: float | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.retry_after = retry_after


def key_ids(secrets: list[str]) -> list[str]:
    """The masked id of each key; numbered where two keys end alike."""
    ids: list[str] = []
    for index, secret in enumerate(secrets):
        key_id = mask(secret)
        ids.append(f"{key_id}#{index + 1}" if key_id in ids else key_id)
    return ids


@dataclass(slots=True)
class Key:
    secret: str = field(repr=False)  # never in a repr: tracebacks show locals
    id: str
    cooling_until: float = 0.0
    revoked: bool = False
    #: Consecutive 429s without ``retry-after``, for the backoff.
    limited: int = 0
    #: Its cooldown is the bound, not the provider's wish (which was longer).
    capped: bool = False
    #: Refusals (401/402/403) in a row: the second takes the key out.
    refusals: int = 0

    def current(self) -> int:
        """The state now: what ``tether_llm_key_state`` shows at each scrape."""
        return self.state(time.monotonic())

    def state(self, now: float) -> int:
        if self.revoked:
            return REVOKED
        return COOLING if now < self.cooling_until else HEALTHY


class KeyPool:
    """The keys of one provider, with their health."""

    def __init__(self, provider: str, secrets: list[str], bound: float = COOLDOWN_CAP) -> None:
        self.provider = provider
        #: ``llm.max_retry_after``: the longest a key cools down.
        self.bound = bound
        ids = key_ids(secrets)
        self.keys = [Key(secret, key_id) for secret, key_id in zip(secrets, ids, strict=True)]
        self._next = 0
        #: The longest wait the provider asked for beyond the bound, until a key answers.
        self.asked: float | None = None
        #: The status that refused the last key taken out.
        self.refused_with: int | None = None
        for key in self.keys:
            _series.setdefault((provider, key.id), []).append(key)
            metrics.LLM_KEY_STATE.labels(provider, key.id).set_function(key.current)

    def order(self) -> list[Key]:
        """The keys to try for one call: the healthy ones, starting after the one the
        previous call started with, so calls spread over the pool."""
        now = time.monotonic()
        start = self._next % len(self.keys)
        self._next += 1
        rotated = self.keys[start:] + self.keys[:start]
        return [key for key in rotated if key.state(now) == HEALTHY]

    def cool(self, key: Key, retry_after: float | None) -> float:
        """A 429 on ``key``: not used again for ``retry_after`` (else a backoff), and
        never longer than the bound; a provider asking for more is said out loud."""
        if retry_after is None:
            key.limited += 1
            seconds = equal_jitter(key.limited, COOLDOWN_BASE, min(COOLDOWN_CAP, self.bound))
            key.capped = False
        else:
            key.limited = 0
            seconds, key.capped = bounded(retry_after, self.bound)
        if key.capped:
            self.asked = max(self.asked or 0.0, retry_after or 0.0)
            RETRY_AFTER_CAPPED.labels(self.provider).inc()
            log.warning(
                "llm.retry_after_capped",
                provider=self.provider,
                key=key.id,
                asked_s=retry_after,
                bound_s=self.bound,
            )
        key.cooling_until = time.monotonic() + seconds
        log.warning("llm.key_cooling", provider=self.provider, key=key.id, seconds=seconds)
        return seconds

    def refuse(self, key: Key, status: int) -> bool:
        """401/402/403 on ``key``: True to try it once more (the first refusal in a row);
        at the second it is taken out until a reload builds a new pool."""
        key.refusals += 1
        if key.refusals < 2:
            log.warning("llm.key_refused", provider=self.provider, key=key.id, status=status)
            return True
        key.revoked = True
        self.refused_with = status
        last = all(k.revoked for k in self.keys)
        log.error("llm.key_revoked", provider=self.provider, key=key.id, status=status, last=last)
        return False

    def answered(self, key: Key) -> None:
        key.limited = key.refusals = 0
        key.capped = False
        self.asked = None  # the provider is back: its alert clears

    def wait(self) -> tuple[float, bool] | None:
        """Seconds until the earliest cooling key is healthy, and whether that is the
        bound rather than the provider's own estimate; None when every key is out."""
        now = time.monotonic()
        live = [k for k in self.keys if not k.revoked]
        if not live:
            return None
        first = min(live, key=lambda k: k.cooling_until)
        return max(first.cooling_until - now, 0.0), first.capped

    def problem(self) -> str | None:
        """What an operator must act on, for the alert and ``/readyz``: every key taken
        out, or the provider asking to wait longer than the bound; None while fine."""
        where = f"llm provider {self.provider!r}"
        if all(k.revoked for k in self.keys):
            status = f" (HTTP {self.refused_with})" if self.refused_with else ""
            return (
                f"{where}: every API key was refused{status}; set a working key at"
                f" llm.providers.{self.provider} and reload"
            )
        if self.asked is not None:
            return (
                f"{where} asked to wait {self.asked:g} s (HTTP 429 Retry-After), more than"
                f" llm.max_retry_after ({self.bound:g} s); its keys are tried again after that"
            )
        return None

    def reading(self) -> Reading:
        """The watchdog's check ``llm.{provider}``: tripped while :meth:`problem` holds."""
        problem = self.problem()
        detail = problem or f"llm provider {self.provider!r} answers again"
        return Reading(f"llm.{self.provider}", float(problem is not None), 0.0, detail)

    def forget(self) -> None:
        """Stop publishing this pool's keys: their series go back to the pool that was
        live before (a failed reload) or away (the last pool of those keys closed)."""
        for key in self.keys:
            where = (self.provider, key.id)
            live = [k for k in _series.get(where, []) if k is not key]
            if live:
                _series[where] = live
                metrics.LLM_KEY_STATE.labels(*where).set_function(live[-1].current)
            elif _series.pop(where, None) is not None:
                metrics.LLM_KEY_STATE.remove(*where)


class Breaker:
    """A circuit breaker for one model: closed, open until ``reopen_at``, or probing."""

    def __init__(self, model: str, failures: int, cooldown: float) -> None:
        self.model = model
        self.threshold = failures
        self.cooldown = cooldown
        self.failures = 0
        self.open_until: float | None = None
        self.probing = False
        #: Set when the probe in flight ends, with a verdict or without one.
        self._probe_ended: asyncio.Event | None = None

    def allows(self) -> bool:
        """Whether a call may go to this model now; the first call after the cooldown is
        the probe, and other calls skip the model while it is in flight."""
        if self.open_until is None:
            return True
        if self.probing or time.monotonic() < self.open_until:
            return False
        self.probing = True
        self._probe_ended = asyncio.Event()
        log.info("llm.breaker_probe", model=self.model)
        return True

    async def probed(self) -> None:
        """Return once the probe in flight has ended (at once when none is): its answer
        closed the breaker, its failure opened it again, or it ended without a verdict."""
        if self.probing and self._probe_ended is not None:
            await self._probe_ended.wait()

    def _probe_over(self) -> None:
        self.probing = False
        if self._probe_ended is not None:
            self._probe_ended.set()
            self._probe_ended = None

    def wait(self) -> float:
        """Seconds until a probe may be made (0 when closed or due)."""
        if self.open_until is None:
            return 0.0
        return max(self.open_until - time.monotonic(), 0.0)

    def succeeded(self) -> None:
        if self.open_until is not None:
            log.info("llm.breaker_closed", model=self.model)
            metrics.LLM_BREAKER_OPEN.labels(self.model).set(0)
        self.failures, self.open_until = 0, None
        self._probe_over()

    def failed(self) -> None:
        self.failures += 1
        if self.probing or (self.open_until is None and self.failures >= self.threshold):
            self.open_until = time.monotonic() + self.cooldown
            self._probe_over()
            log.warning(
                "llm.breaker_open",
                model=self.model,
                failures=self.failures,
                cooldown=self.cooldown,
            )
            metrics.LLM_BREAKER_OPEN.labels(self.model).set(1)

    def released(self) -> None:
        """The probe ended without a verdict on the model (429, a refused key)."""
        self._probe_over()


def live_keys(settings: Settings, timeout: float = 2.0) -> list[dict[str, str]]:
    """Every configured key by masked id, with its state in the running gateway, read from
    its ``/metrics`` (``tether status`` is another process; the pool lives in the
    gateway). ``unknown`` when the gateway does not answer or serves no HTTP."""
    if settings.llm is None:
        return []
    states: dict[tuple[str, str], str] = {}
    http = settings.http
    if http.enabled:
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(http.host, http.host)
        host = f"[{host}]" if ":" in host else host
        try:
            with urllib.request.urlopen(f"http://{host}:{http.port}/metrics", timeout=timeout) as r:
                text = r.read().decode()
        except (OSError, ValueError):
            text = ""
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "tether_llm_key_state":
                    where = (sample.labels["provider"], sample.labels["key"])
                    states[where] = STATE_NAMES.get(int(sample.value), "unknown")
    return [
        {"provider": provider, "key": key_id, "state": states.get((provider, key_id), "unknown")}
        for provider, cfg in settings.llm.providers.items()
        for key_id in key_ids(cfg.keys())
    ]


def key_lines(keys: list[dict[str, str]]) -> list[str]:
    """``tether status`` lines: one per key."""
    return [f"llm key    {k['provider'] + ' ' + k['key']:<24} {k['state']}" for k in keys]
