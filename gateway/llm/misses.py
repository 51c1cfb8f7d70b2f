"""What a call raises when none of its candidate models answered, and why that one.

:meth:`~tether.gateway.llm.client.LLM.answer` tries the candidates in order and hands
each miss here. The error it raises then decides what the pipeline does with the event:

- some candidate was only waiting (its keys cooling after 429s, its breaker open):
  :class:`~.waits.ModelBusy` with the earliest time one may answer. Waiting is not
  failing: the pipeline waits for it within ``llm.max_retry_after`` or tells the person
  at once (``llm.busy_notice``), and never dead-letters the event for it;
- otherwise some failed (5xx, timeouts, unreachable): a plain Retryable, with the
  pipeline's backoff and its attempts;
- otherwise every key of every candidate was refused: the first
  :class:`~.keys.KeysRefused` (Fatal: the event is kept as a dead letter for ``tether dead
  retry`` once the keys are fixed, and the pool's alert has told the operator).
"""

from __future__ import annotations

from tether.errors import Retryable
from tether.gateway.llm.keys import KeysRefused
from tether.gateway.llm.waits import ModelBusy


class Misses:
    """The candidates of one call that did not answer, in order."""

    def __init__(self, bound: float, notice: str) -> None:
        self.bound = bound
        self.notice = notice
        self.errors: list[str] = []
        #: (why, seconds until it may answer, whether that is only the bound)
        self.waits: list[tuple[str, float, bool]] = []
        self.refused: KeysRefused | None = None
        self._limited = False

    def skipped(self, model: str, seconds: float) -> None:
        """``model``'s breaker is open for ``seconds`` more (a cooldown is config: its own
        bound)."""
        self.waits.append((f"{model}: circuit breaker open", seconds, False))

    def add(self, exc: Exception) -> None:
        """A candidate's call raised ``exc``: Unavailable, KeysRefused or ModelBusy."""
        if isinstance(exc, ModelBusy):
            self._limited = True
            self.waits.append((str(exc), exc.retry_after or 0.0, exc.capped))
        elif isinstance(exc, KeysRefused):
            self.refused = self.refused or exc
        else:
            self.errors.append(str(exc))

    def error(self) -> Exception:
        if self.waits:
            _, seconds, capped = min(self.waits, key=lambda wait: wait[1])
            if not self._limited and not self.errors:
                reasons = "every circuit breaker is open"
            else:
                reasons = "; ".join([*self.errors, *(why for why, _, _ in self.waits)])
            return ModelBusy(
                f"no model answered: {reasons}",
                retry_after=seconds,
                capped=capped,
                bound=self.bound,
                notice=self.notice,
            )
        if self.errors:
            return Retryable("no model answered: " + "; ".join(self.errors))
        return self.refused or Retryable("no model to ask")
