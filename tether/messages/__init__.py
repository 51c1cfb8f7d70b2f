"""Fixed messages: what Tether itself says, in the person's language (``messages:``).

``say(ctx.event, "unknown_command", command="x")`` is the whole API for the code that
speaks; ``catalogue.py`` says how the language and the text are chosen.
"""

from tether.messages.catalogue import (
    KEYS,
    LANGUAGES,
    SHIPPED,
    Catalogue,
    Language,
    current,
    language_of,
    placeholders,
    say,
    use,
    using,
)
from tether.messages.en import EN as EN_TEXTS

__all__ = [
    "EN_TEXTS",
    "KEYS",
    "LANGUAGES",
    "SHIPPED",
    "Catalogue",
    "Language",
    "current",
    "language_of",
    "placeholders",
    "say",
    "use",
    "using",
]
