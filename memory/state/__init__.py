"""Handler state: what a handler keeps for a chat or a person between turns.

``await ctx.chat_data()`` and ``await ctx.user_data()`` (python-telegram-bot's
``context.chat_data`` and ``context.user_data``, aiogram's FSM data) are dicts of JSON
values that a handler reads and changes freely; the keys it changed are written in the
event's checkpoint transaction, with its replies and turns. So a turn that crashes
changes nothing, a re-run starts from what was committed, and a SIGKILL after the
checkpoint loses nothing.

- :mod:`.data`: the dict a turn sees and what it changed.
- :mod:`.store`: the ``handler_state(scope, name, value)`` rows and their reads.

Each key is its own row, so two turns of one person in two chats (which run at once:
lanes are per conversation) each write only the keys they changed; of a key both
changed, the later checkpoint wins.
"""

from tether.memory.state.data import ScopedData, chat_scope, user_scope
from tether.memory.state.store import MemoryState, SqlState, StateStore

__all__ = [
    "MemoryState",
    "ScopedData",
    "SqlState",
    "StateStore",
    "chat_scope",
    "user_scope",
]
