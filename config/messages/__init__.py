"""``messages:``: the language of Tether's fixed messages and the operator's own texts.

A room of its own, config/ holding 15 modules. Each language's texts are a model with one
optional field per key, so that a key Tether does not have is refused at its path
(``messages.zh.unknown_comand``), and a text whose placeholders differ from the shipped
one's is refused there too: ``{command}`` missing would drop what the person needs to
read, an extra ``{name}`` would fail when it is said.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, create_model, field_validator

from tether.config.section import Section
from tether.messages import EN_TEXTS, KEYS, Catalogue, placeholders


class _Texts(Section):
    @field_validator("*")
    @classmethod
    def _same_placeholders(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        key = info.field_name or ""
        try:
            found = placeholders(value)
        except ValueError as exc:
            raise ValueError(f"not a str.format text: {exc}") from None
        wanted = placeholders(EN_TEXTS[key])
        if found != wanted:
            names = ", ".join(f"{{{n}}}" for n in sorted(wanted)) or "none"
            raise ValueError(f"placeholders must be the shipped text's: {names}")
        return value


_fields: dict[str, Any] = {key: (str | None, Field(default=None, min_length=1)) for key in KEYS}
#: One language's texts: ``messages.en`` or ``messages.zh``.
Texts: type[_Texts] = create_model("Texts", __base__=_Texts, **_fields)


class MessagesConfig(Section):
    """``language``: ``auto`` (each chat's, from the platform's hint: Telegram's
    ``language_code``, Discord's ``locale``; ``zh*`` is Chinese, anything else English),
    or ``en``/``zh`` for every chat. ``en``/``zh``: texts that replace the shipped ones."""

    language: Literal["auto", "en", "zh"] = "auto"
    en: Texts = Texts()  # type: ignore[valid-type]
    zh: Texts = Texts()  # type: ignore[valid-type]

    def catalogue(self) -> Catalogue:
        """What the gateway says with (``tether.messages``)."""
        overrides = {
            name: {k: v for k, v in getattr(self, name).model_dump().items() if v is not None}
            for name in ("en", "zh")
        }
        return Catalogue(self.language, overrides)


__all__ = ["MessagesConfig"]
