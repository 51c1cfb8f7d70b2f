"""A provider's API keys as a pool, and a circuit breaker per model.

One rate-limited or revoked key must not stall every conversation, and one failing model
must not cost every event a timeout before its fallback answers. Both are in-process
state of one :class:`~tether.gateway.llm.client.LLM`: a reload builds a new LLM, so a revoked key
is tried again after a reload and never before.

- :class:`KeyPool`: calls go round-robin over the healthy keys. A 429 cools a key down for
  the provider's ``retry-after`` (else a backoff) and the call moves to the next key at
  once; 401/402/403 takes the key out. When every key is cooling down the event is retried
  durably (``retry_wait``) at the earliest end of a cooldown.
- :class:`Breaker`: after ``llm.circuit_breaker.failures`` consecutive failures a model is
  skipped for ``cooldown`` seconds, then one call probes it (half-open); its answer closes
  the breaker, its failure opens it again.

Keys appear in logs, metrics and ``tether status`` only by a masked id (``…`` and the
last 4 characters).
"""

from __future__ import annotations

import time
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from prometheus_client.parser import text_string_to_metric_families

from tether import metrics
from tether.backoff import equal_jitter
from tether.errors import Fatal

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


def retry_after(response: Any) -> float | None:
    """The provider's wait in seconds: ``retry-after-ms`` (OpenAI) or ``retry-after``."""
    try:
        millis = response.headers.get("retry-after-ms")
        if millis is not None:
            return float(millis) / 1000
        value = response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, ValueError):
        return None


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

    def current(self) -> int:
        """The state now: what ``tether_llm_key_state`` shows at each scrape."""
        return self.state(time.monotonic())

    def state(self, now: float) -> int:
        if self.revoked:
            return REVOKED
        return COOLING if now < self.cooling_until else HEALTHY


class KeyPool:
    """The keys of one provider, with their health."""

    def __init__(self, provider: str, secrets: list[str]) -> None:
        self.provider = provider
        ids = key_ids(secrets)
        self.keys = [Key(secret, key_id) for secret, key_id in zip(secrets, ids, strict=True)]
        self._next = 0
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
        """A 429 on ``key``: not used again for ``retry_after`` (else a backoff)."""
        if retry_after is None:
            key.limited += 1
            retry_after = equal_jitter(key.limited, COOLDOWN_BASE, COOLDOWN_CAP)
        else:
            key.limited = 0
        key.cooling_until = time.monotonic() + max(retry_after, 0.0)
        log.warning("llm.key_cooling", provider=self.provider, key=key.id, seconds=retry_after)
        return retry_after

    def revoke(self, key: Key, status: int) -> None:
        """401/402/403: the key is refused until a reload builds a new pool."""
        key.revoked = True
        log.error("llm.key_revoked", provider=self.provider, key=key.id, status=status)

    def answered(self, key: Key) -> None:
        key.limited = 0

    def wait(self) -> float | None:
        """Seconds until the earliest cooling key is healthy; None when every key is out."""
        now = time.monotonic()
        ends = [k.cooling_until - now for k in self.keys if not k.revoked]
        return max(min(ends), 0.0) if ends else None

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

    def allows(self) -> bool:
        """Whether a call may go to this model now; the first call after the cooldown is
        the probe, and other calls skip the model while it is in flight."""
        if self.open_until is None:
            return True
        if self.probing or time.monotonic() < self.open_until:
            return False
        self.probing = True
        log.info("llm.breaker_probe", model=self.model)
        return True

    def wait(self) -> float:
        """Seconds until a probe may be made (0 when closed or due)."""
        if self.open_until is None:
            return 0.0
        return max(self.open_until - time.monotonic(), 0.0)

    def succeeded(self) -> None:
        if self.open_until is not None:
            log.info("llm.breaker_closed", model=self.model)
            metrics.LLM_BREAKER_OPEN.labels(self.model).set(0)
        self.failures, self.open_until, self.probing = 0, None, False

    def failed(self) -> None:
        self.failures += 1
        if self.probing or (self.open_until is None and self.failures >= self.threshold):
            self.open_until = time.monotonic() + self.cooldown
            self.probing = False
            log.warning(
                "llm.breaker_open",
                model=self.model,
                failures=self.failures,
                cooldown=self.cooldown,
            )
            metrics.LLM_BREAKER_OPEN.labels(self.model).set(1)

    def released(self) -> None:
        """The probe ended without a verdict on the model (429, a refused key)."""
        self.probing = False


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
