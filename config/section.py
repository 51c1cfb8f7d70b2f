"""What every config section shares: the base model and the value types several use.

It sits below the section modules (``schema``, ``platforms``, ``llm``, ``jobs``) so each of
them can import it without importing the others.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict


class Section(BaseModel):
    """Base for every config section: unknown keys are an error, values are immutable.

    ``extra="forbid"`` makes a typo fail loudly (with its key path) instead of being
    silently ignored; ``frozen`` lets the settings be shared by every task without copies.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)


def _absolute(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError("must start with '/'")
    return value


#: A route on Tether's HTTP server (a webhook's ``path``): relative paths are refused here
#: because the router would never match them and the platform's posts would get 404s.
RoutePath = Annotated[str, AfterValidator(_absolute)]
