"""Which fixed message a chat gets: the language, the shipped text, the operator's override.

Tether's own words (a refused access, an unknown command, the notice a failed turn gets)
are said from deep inside handlers and the pipeline, which know the event but not the
settings. So the pipeline puts the run's :class:`Catalogue` in a context variable as it
starts the run (as it binds the log), and :func:`say` reads it there: every task a run
starts sees its own gateway's catalogue, and a reload's from its next event on.
"""

from __future__ import annotations

import string
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

from tether.events import Event
from tether.messages.en import EN
from tether.messages.zh import ZH

Language = Literal["en", "zh"]
#: The shipped catalogues; English is the fallback of every other.
SHIPPED: Mapping[Language, Mapping[str, str]] = {"en": EN, "zh": ZH}
LANGUAGES: tuple[Language, ...] = ("en", "zh")
#: Every fixed message's key.
KEYS = frozenset(EN)


def placeholders(text: str) -> frozenset[str]:
    """The names ``text`` fills with ``str.format`` (``"/{command}"`` → ``{"command"}``).

    Raises ValueError for a brace ``str.format`` could not read (``"{oops"``)."""
    names = set()
    for _, name, _, _ in string.Formatter().parse(text):
        if name is not None:
            if not name.isidentifier():
                raise ValueError(f"{{{name}}} is not a placeholder name")
            names.add(name)
    return frozenset(names)


def language_of(hint: str | None) -> Language:
    """A platform's language hint as a catalogue: ``zh``, ``zh-hans``, ``zh_CN``, ``zh-TW``
    → ``zh``; anything else, or none, → ``en``."""
    return "zh" if hint and hint.strip().lower()[:2] == "zh" else "en"


@dataclass(frozen=True, slots=True)
class Catalogue:
    """``messages:`` as the gateway uses it: ``language`` (``auto``: each chat's own, from
    the platform's hint) and the operator's texts by language, over the shipped ones."""

    language: Language | Literal["auto"] = "auto"
    overrides: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def language_for(self, event: Event | None) -> Language:
        if self.language != "auto":
            return self.language
        return language_of(event.sender.language if event and event.sender else None)

    def text(self, language: Language, key: str, **values: Any) -> str:
        """The message ``key`` in ``language``, its placeholders filled from ``values``."""
        if key not in KEYS:
            raise KeyError(f"no fixed message {key!r}")
        own = self.overrides.get(language, {})
        template = own.get(key) or SHIPPED[language].get(key) or EN[key]
        return template.format(**values)

    def say(self, event: Event | None, key: str, **values: Any) -> str:
        """The message ``key`` in the language of ``event``'s chat."""
        return self.text(self.language_for(event), key, **values)

    def custom(self, event: Event | None, configured: str, key: str) -> str:
        """A notice the config also sets (``pipeline.dead_notice``, ``llm.busy_notice``):
        the operator's own text wins in every language; the default is said in the chat's."""
        return self.say(event, key) if configured == EN[key] else configured


_SHIPPED_ONLY = Catalogue()
_CURRENT: ContextVar[Catalogue | None] = ContextVar("tether_messages", default=None)


@contextmanager
def using(catalogue: Catalogue) -> Iterator[Catalogue]:
    """Within this block (and the tasks it starts), :func:`say` uses ``catalogue``."""
    token = _CURRENT.set(catalogue)
    try:
        yield catalogue
    finally:
        _CURRENT.reset(token)


def use(catalogue: Catalogue) -> None:
    """From now on in this task (a pipeline run's), :func:`say` uses ``catalogue``."""
    _CURRENT.set(catalogue)


def current() -> Catalogue:
    """The catalogue of the run this code is part of (the shipped one outside any run)."""
    return _CURRENT.get() or _SHIPPED_ONLY


def say(event: Event | None, key: str, **values: Any) -> str:
    """The fixed message ``key`` for ``event``'s chat, from the running gateway's catalogue."""
    return current().say(event, key, **values)
