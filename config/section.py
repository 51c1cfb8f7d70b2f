"""What every config section shares: the base model and the value types several use.

It sits below the section modules (``schema``, ``platforms``, ``llm``, ``jobs``) so each of
them can import it without importing the others.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo, field_validator


class Section(BaseModel):
    """Base for every config section: unknown keys are an error, values are immutable,
    numbers are numbers.

    ``extra="forbid"`` makes a typo fail loudly (with its key path) instead of being
    silently ignored; ``frozen`` lets the settings be shared by every task without copies.
    Numbers stay lax about strings (``${PORT}`` interpolates to ``"8080"``) but refuse
    booleans, which pydantic would read as 1 and 0 (``max_attempts: true`` was one
    attempt), and infinities and NaN, which no timeout, budget or backoff means.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name in _numeric_fields(cls):
            raise ValueError("should be a number, not a boolean")
        return value


@functools.cache
def _numeric_fields(model: type[BaseModel]) -> frozenset[str]:
    """The fields of ``model`` that take an int or a float and no bool."""
    return frozenset(
        name
        for name, field in model.model_fields.items()
        if (kinds := _types_in(field.annotation)) & {int, float} and bool not in kinds
    )


def _types_in(annotation: Any) -> set[Any]:
    """The plain types an annotation admits at its top level: ``int | None`` → int, None."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return set().union(*map(_types_in, args))
    if typing.get_origin(annotation) is typing.Annotated:
        return _types_in(args[0])
    return {annotation}


def _absolute(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError("must start with '/'")
    return value


#: A route on Tether's HTTP server (a webhook's ``path``): relative paths are refused here
#: because the router would never match them and the platform's posts would get 404s.
RoutePath = Annotated[str, AfterValidator(_absolute)]


def _patterns(value: list[str]) -> list[str]:
    for pattern in value:
        if pattern != "*" and ":" not in pattern:
            raise ValueError(f"{pattern!r} should be platform:id (wildcards allowed) or *")
    return value


#: Access patterns (``access.allow``, ``access.admins``, an agent's ``access.allow``):
#: ``platform:id`` with ``*`` wildcards, or ``*``.
Patterns = Annotated[list[str], AfterValidator(_patterns)]
