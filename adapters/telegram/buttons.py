"""Buttons as Telegram draws them: an inline keyboard under the message.

A press comes back as a ``callback_query`` update (:mod:`.normalize` makes it a
``callback`` event keyed by its update, like any update) and is answered with
``answerCallbackQuery`` right after the inbox commit (:mod:`.chores`), so the button's
spinner stops within Telegram's few seconds whatever the handler then takes.
"""

from __future__ import annotations

from typing import Any

from tether.buttons import Keyboard


def inline_keyboard(rows: Keyboard) -> dict[str, Any]:
    """``reply_markup`` for sendMessage: ``callback_data`` buttons and ``url`` buttons."""
    return {
        "inline_keyboard": [
            [
                {"text": button.text, "url": button.url}
                if button.url is not None
                else {"text": button.text, "callback_data": button.data}
                for button in row
            ]
            for row in rows
        ]
    }
