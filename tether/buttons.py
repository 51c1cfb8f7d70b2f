"""Buttons under a message: what ``ctx.reply(text, buttons=...)`` takes, checked at once.

A button either carries ``data`` (pressing it sends a ``callback`` event with that data
back to the bot, routed by ``@router.callback("prefix")``) or opens a ``url``. The
keyboard is rows of buttons; a flat list is one row. Every platform renders it its own
way (Telegram inline keyboard, Discord components, Feishu interactive card), so the
limits checked here are the strictest of the three, and a handler written for one
platform works on the others:

- at most 5 rows of at most 5 buttons (Discord's action rows);
- ``data``: 1-64 bytes of UTF-8 (Telegram's ``callback_data``; Discord's ``custom_id``
  allows 100 characters), unique within the keyboard (Discord refuses duplicates);
- ``text``: 1-80 characters (Discord's label);
- ``url``: ``http``, ``https`` or ``tg`` (Telegram opens only these), ≤ 512 characters.

A spec that breaks one is a :class:`ButtonError` from ``ctx.reply`` itself, naming the
button (``buttons[1][0]``) and the rule, not a 400 from the platform minutes later in
the outbox, where the handler can no longer do anything about it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from tether.errors import ButtonError

MAX_ROWS = 5
MAX_PER_ROW = 5
MAX_DATA_BYTES = 64
MAX_TEXT = 80
MAX_URL = 512
_URL_SCHEMES = frozenset({"http", "https", "tg"})


class Button(BaseModel):
    """One button: ``Button("Yes", data="vote:yes")`` or ``Button("Docs", url="https://…")``.

    Positional ``text`` reads like the platforms' own APIs (PTB's
    ``InlineKeyboardButton("Yes", callback_data=...)``). It is stored in the outbox row
    with its message, so a reply sent after a crash still has its buttons.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    text: str
    data: str | None = None
    url: str | None = None

    def __init__(
        self, text: str, *, data: str | None = None, url: str | None = None, **_newer: Any
    ) -> None:
        # ``**_newer``: pydantic calls this when reading stored rows too, and a row a
        # newer Tether wrote may hold fields this one does not know (extra="ignore").
        super().__init__(text=text, data=data, url=url)


#: What ``buttons=`` accepts: one button, a row, or rows.
ButtonsSpec = Button | Sequence[Button] | Sequence[Sequence[Button]]
Keyboard = list[list[Button]]


def keyboard(spec: ButtonsSpec | None) -> Keyboard:
    """``spec`` as rows of buttons, checked against every platform's limits.

    ``None`` or an empty list is no keyboard. Raises :class:`ButtonError`.
    """
    if spec is None:
        return []
    if isinstance(spec, Button):
        rows: list[list[Any]] = [[spec]]
    elif isinstance(spec, str | bytes) or not isinstance(spec, Sequence):
        raise ButtonError(f"buttons: expected Button, a list or a list of lists, got {spec!r}")
    elif all(isinstance(item, Button) for item in spec):
        rows = [list(spec)] if spec else []
    else:
        rows = []
        for n, row in enumerate(spec):
            if isinstance(row, Button | str | bytes):
                raise ButtonError(f"buttons[{n}]: mix of buttons and rows; use rows only")
            if not isinstance(row, Sequence):
                raise ButtonError(f"buttons[{n}]: expected a list of Button, got {row!r}")
            rows.append(list(row))
    rows = [row for row in rows if row]
    if len(rows) > MAX_ROWS:
        raise ButtonError(f"buttons: {len(rows)} rows; at most {MAX_ROWS} (Discord's limit)")
    seen: dict[str, str] = {}
    for r, row in enumerate(rows):
        if len(row) > MAX_PER_ROW:
            raise ButtonError(
                f"buttons[{r}]: {len(row)} buttons in a row; at most {MAX_PER_ROW} (Discord)"
            )
        for c, button in enumerate(row):
            where = f"buttons[{r}][{c}]"
            if not isinstance(button, Button):
                raise ButtonError(f"{where}: expected a Button, got {button!r}")
            _check(button, where)
            if button.data is not None:
                if button.data in seen:
                    raise ButtonError(
                        f"{where}: data {button.data!r} is used by {seen[button.data]} too;"
                        " each button needs its own (Discord refuses duplicates)"
                    )
                seen[button.data] = where
    return rows


def _check(button: Button, where: str) -> None:
    for name in ("text", "data", "url"):
        value = getattr(button, name)
        try:
            None if value is None else value.encode("utf-8")
        except UnicodeEncodeError:
            raise ButtonError(f"{where}: {name} is not valid text (a lone surrogate)") from None
    if not button.text.strip():
        raise ButtonError(f"{where}: text is empty")
    if len(button.text) > MAX_TEXT:
        raise ButtonError(f"{where}: text is {len(button.text)} characters; at most {MAX_TEXT}")
    if (button.data is None) == (button.url is None):
        raise ButtonError(f"{where}: give exactly one of data= (a callback) or url= (a link)")
    if button.data is not None:
        size = len(button.data.encode("utf-8"))
        if not 1 <= size <= MAX_DATA_BYTES:
            raise ButtonError(
                f"{where}: data is {size} bytes; 1 to {MAX_DATA_BYTES} allowed"
                " (Telegram's callback_data limit)"
            )
    if button.url is not None:
        scheme = urlsplit(button.url).scheme.lower()
        if scheme not in _URL_SCHEMES or len(button.url) > MAX_URL:
            raise ButtonError(
                f"{where}: url must be http(s):// or tg:// and at most {MAX_URL} characters,"
                f" got {button.url[:60]!r}"
            )
