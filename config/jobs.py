"""One ``jobs:`` entry (cron): when it fires, where it delivers, what it does.

The cron expression and time zone are checked by the scheduler's own parser
(:mod:`tether.cron`), imported inside the validators: one set of rules, and
``tether.cron`` imports nothing from ``tether.config``, so there is no cycle.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal, Self

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from tether.config.section import Section

_JOB_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


class ReflectConfig(Section):
    """``reflect:`` of a job: the built-in reflection run (see docs/agent.md, Reflection)."""

    #: Tokens the whole run may spend; it stops before a call that could cross it.
    budget_tokens: int = Field(default=20_000, ge=1)
    #: At most this many facts added or updated per conversation and run.
    per_conversation_facts: int = Field(default=5, ge=1)
    #: At most this many new turns of a conversation per run, oldest first; the rest
    #: wait for the next run (its cursor stops at the last turn read).
    max_turns: int = Field(default=200, ge=1)
    #: The configured model to ask (``llm.models``); default: the routed one.
    model: str | None = None
    #: Ask for the proposal as structured output (``response_format`` with its JSON
    #: schema); false for a server that refuses it (the schema is in the prompt anyway).
    structured: bool = True


class JobConfig(Section):
    """One ``jobs:`` entry: when it fires, where its messages go, what it does, and what
    happens to fires missed while Tether was down (see docs/cron.md)."""

    #: Part of every fire's event key (``cron:{id}:{time}``), so it must be stable.
    id: str
    #: Crontab: 5 fields (``minute hour day month weekday``, 0 and 7 are Sunday), 6 with
    #: seconds first, or a shortcut like ``@daily``; see :mod:`tether.cron`.
    cron: str
    #: IANA name; fire times follow its daylight-saving changes.
    timezone: str = "UTC"
    #: Delay each fire by a random 0..jitter seconds (the event key keeps the scheduled time).
    jitter: float | None = Field(default=None, ge=0)
    #: ``platform:chat[:thread]`` or a list; the first is the conversation the job runs in.
    deliver: list[str] = []
    #: Fires missed while down: ``latest`` runs the newest, ``all`` every one, ``skip`` none.
    catch_up: Literal["latest", "all", "skip"] = "latest"
    #: How late a missed fire may still run: seconds, or ``90s``, ``30m``, ``1h``, ``1d``.
    grace: float = Field(default=3600.0, ge=0)
    #: A fire while the previous one is unfinished: ``skip`` it, or ``queue`` it behind.
    overlap: Literal["skip", "queue"] = "skip"
    #: Exactly one action: a fixed message, a prompt for the agent, or ``module:function``.
    text: str | None = None
    prompt: str | None = None
    handler: str | None = None
    #: The built-in reflection: distil new turns of every conversation into facts.
    reflect: ReflectConfig | None = None

    @field_validator("id")
    @classmethod
    def _id_shape(cls, value: str) -> str:
        if not _JOB_ID.fullmatch(value):
            raise ValueError("must be 1-64 characters of A-Z, a-z, 0-9, _, . and -")
        return value

    @field_validator("cron")
    @classmethod
    def _cron_parses(cls, value: str) -> str:
        from tether.cron import trigger  # the scheduler's own parser: one set of rules

        with _plainly("cron"):
            trigger(value)
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from tether.cron import zone

        with _plainly("timezone"):
            zone(value)
        return value

    @field_validator("deliver", mode="before")
    @classmethod
    def _targets(cls, value: Any) -> Any:
        items = [value] if isinstance(value, str) else value
        if isinstance(items, list):
            for item in items:
                parts = item.split(":", 2) if isinstance(item, str) else []
                if len(parts) < 2 or not all(parts):
                    raise ValueError(f"expected platform:chat[:thread], got {item!r}")
        return items

    @field_validator("grace", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if not isinstance(value, str) or not value.strip():
            return value
        match = _DURATION.fullmatch(value.strip())
        if not match or not any(match.groups()):
            raise ValueError("expected seconds or a duration like 90s, 30m, 1h, 1d, 1h30m")
        days, hours, minutes, seconds = (int(group or 0) for group in match.groups())
        return ((days * 24 + hours) * 60 + minutes) * 60 + seconds

    @model_validator(mode="after")
    def _one_action(self) -> Self:
        names = ("text", "prompt", "handler", "reflect")
        actions = [name for name in names if getattr(self, name)]
        if len(actions) != 1:
            raise ValueError(
                "needs exactly one of text, prompt or handler (or the built-in reflect)"
                + (f" (got {' and '.join(actions)})" if actions else "")
            )
        if self.handler is not None:
            module, _, function = self.handler.partition(":")
            if not module or not function:
                raise ValueError(f"handler: {self.handler!r} should be 'package.module:function'")
        elif not self.deliver and self.reflect is None:
            raise ValueError(f"{actions[0]} needs deliver: the chat(s) to send to")
        return self


@contextmanager
def _plainly(key: str) -> Iterator[None]:
    """The parser's ValueError as the whole message: pydantic would prefix a plain
    ValueError with "Value error, ", which says nothing to someone fixing a crontab line."""
    try:
        yield
    except ValueError as exc:
        # The text goes in as context, not as the template: a line may contain braces.
        raise PydanticCustomError(f"bad_{key}", "{reason}", {"reason": str(exc)}) from None


def unique_ids(jobs: list[JobConfig]) -> list[JobConfig]:
    """``jobs`` unchanged, or a :class:`ValidationError` at ``jobs[i].id`` for a repeated id.

    Ids are part of every fire's event key, so two jobs with one id would share (and
    swallow) each other's fires. Raised with its own location, so the error names
    ``jobs[i].id`` itself rather than the whole list.
    """
    first: dict[str, int] = {}
    for index, job in enumerate(jobs):
        if job.id in first:
            detail = f"duplicate job id (jobs[{first[job.id]}].id has it too)"
            raise ValidationError.from_exception_data(
                "Settings",
                [
                    InitErrorDetails(
                        type=PydanticCustomError("duplicate_job_id", detail),
                        loc=(index, "id"),
                        input=job.id,
                    )
                ],
            )
        first[job.id] = index
    return jobs
