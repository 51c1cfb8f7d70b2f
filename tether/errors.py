"""Every error Tether raises that someone outside the gateway may catch, in one tree.

A handler raises :class:`Retryable` for transient trouble (a timeout, a 503) and
:class:`Fatal` when another attempt cannot help (a 400, bad input); the pipeline turns them
into ``retry_wait`` with backoff or a dead letter, and anything else counts as Retryable.
:class:`BudgetExceeded` (raised by ``ctx.llm``) is neither: the turn stops with its reply
and is checkpointed. The rest are what the framework raises at the person who wrote the
handler, the tool, the adapter or the config::

    Exception
    ├── Retryable                  try the event again later (retry_after: seconds)
    │   └── ModelBusy              no model can answer within llm.max_retry_after (llm/waits.py)
    ├── Fatal                      dead-letter the event with a snapshot
    │   ├── KeysRefused            every API key of a provider refused (gateway/llm/keys.py)
    │   ├── PathRefused            files=: a Path outside media.allow_paths, or not a regular
    │   │                          file (gateway/handler/local_files.py)
    │   └── Diverged               a resumed turn did other steps or waits than the run that
    │                              asked (gateway/handler/asking.py)
    ├── BudgetExceeded             ctx.llm: the next call would cross a token budget
    ├── WaitEnded                  ctx.ask ended without an answer (a handler may catch it)
    │   ├── WaitExpired            its timeout passed (also while the gateway was down)
    │   └── WaitCancelled          /cancel ended it
    ├── GatewayError               the gateway cannot start or reload as configured
    │   └── ToolClash              two tools with one name (gateway/tools/toolbox.py)
    ├── ConfigError                tether.yaml cannot be used; names the file and key path
    ├── JobError                   a jobs: entry that cannot run; names jobs[i]
    ├── ToolError                  a tool's result the model reads as a failure
    │   ├── ToolTimeout            the call was cancelled at its timeout: effect unknown
    │   └── TaskRefused            ctx.spawn / start_task: past a bound (gateway/tasks/)
    ├── DownloadError              ctx.download: the platform will not give the file
    │   ├── TooLarge               over the cap the caller gave
    │   └── URLRefused             files=: a URL to a non-public address, not allowed, or too
    │                              many redirects (adapters/url_guard.py)
    ├── SendError                  Adapter.send: how a platform call failed
    │   ├── SendRetryable          certainly not delivered: safe to retry
    │   ├── SendAmbiguous          may have been delivered (a timeout after the request)
    │   └── SendFatal              will never succeed as it is
    └── ValueError
        ├── ButtonError            a keyboard no platform would take (at ctx.reply)
        └── ActionUnsupported      ctx.edit/delete/react/pin/answer the platform lacks

Internal errors stay beside the code that raises and catches them (``KeyProblem`` and
``Unavailable`` in ``gateway/llm/``, ``Malformed`` in ``adapters/untrusted.py``,
``WritesFailing`` and ``DatabaseMoved`` in ``memory/``, ``YamlProblem`` in
``config/document.py``, ``BlobTooLarge`` in ``memory/blobs.py``, ``WebChatError`` in
``adapters/web.py``): nobody outside them catches those.

They live here, on the ground floor, so that every folder can raise them without
importing another's insides, and a bot author imports each from ``tether``.
"""

from __future__ import annotations


class Retryable(Exception):
    """Try the event again later; ``retry_after`` (seconds) overrides the computed backoff."""

    def __init__(self, message: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Fatal(Exception):
    """Do not try again: dead-letter the event with a snapshot."""


class BudgetExceeded(Exception):
    """A token budget would be crossed by the next LLM call, so it was not made.

    Not a failure to retry: the pipeline ends the task with :attr:`reply` (a clear
    message to the user) and checkpoints what the task did so far, its spend included.
    """

    def __init__(self, reply: str, *, budget: str, limit: int, spent: int, needed: int) -> None:
        super().__init__(reply)
        self.reply = reply
        self.budget = budget
        self.limit = limit
        self.spent = spent
        self.needed = needed


class Diverged(Fatal):
    """A resumed turn did not retrace the run that asked: another step or wait at some
    place, another question, or an end before the answered wait. Dead-lettered with its
    snapshot rather than given an answer meant for something else."""


class WaitEnded(Exception):
    """``ctx.ask`` ended without an answer. Uncaught, the turn ends there: its replies
    so far stay, and an expiry is told to the person."""

    def __init__(self, message: str, *, wait: str = "") -> None:
        super().__init__(message)
        self.wait = wait


class WaitExpired(WaitEnded):
    """No answer came before the question's timeout (the deadline may have passed while
    the gateway was down: it is seen at the next start)."""


class WaitCancelled(WaitEnded):
    """The person sent ``/cancel`` while the turn waited."""


class GatewayError(Exception):
    """The gateway cannot start as configured; the message says why, in one line.

    Raised by adapters' ``open`` and by the app's start; the CLI prints it without a
    traceback.
    """


class ConfigError(Exception):
    """A config file that cannot be used; the message names the file and the key path."""


class JobError(Exception):
    """A job that cannot run as configured; the message names ``jobs[i]``."""


class ToolError(Exception):
    """A result the model should read as a failure (invalid arguments, a server that is
    unavailable, a refusal) — returned to it as the tool's result, never raised to the
    person."""


class ToolTimeout(ToolError):
    """The call did not finish within its timeout and was cancelled. Whether its effect
    happened is unknown (it may have been cut off after doing its work), and the model is
    told so."""


class TaskRefused(ToolError):
    """A task was not started: it would pass one of ``agent.tasks``' bounds (tasks per
    conversation or gateway, sub-agent depth, deadline), or names no configured agent.
    The message says which, in words for the person; the model reads it as the
    ``start_task`` result."""


class DownloadError(Exception):
    """A file could not be fetched (gone, refused, unreachable, not downloadable)."""


class TooLarge(DownloadError):
    """A file over the cap the caller gave."""

    def __init__(self, size: int | None, cap: int) -> None:
        shown = f"{size} bytes" if size is not None else "more"
        super().__init__(f"the file is {shown}, over the download cap of {cap} bytes")
        self.size = size
        self.cap = cap


class SendError(Exception):
    """Base of the errors ``Adapter.send`` raises, so the outbox knows if a retry is safe."""


class SendRetryable(SendError):
    """Certainly not delivered (refused, rate-limited, connection failed): safe to retry."""

    def __init__(self, message: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class SendAmbiguous(SendError):
    """May or may not have been delivered (a timeout after the request went out)."""


class SendFatal(SendError):
    """Will never succeed as it is (chat not found, bot blocked, message invalid)."""


class ButtonError(ValueError):
    """A keyboard no platform would take, said with the button and the rule it breaks."""


class ActionUnsupported(ValueError):
    """``ctx.edit``/``delete``/``react``/``pin``/``answer`` asked of a platform (or an
    event) that has no such action, said when it is called, before anything is queued."""
