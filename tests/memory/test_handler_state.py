"""Handler state at the store, on every store: keys written by checkpoints, one row each,
read back by scope; a removed key is gone; an erased person's state goes with them."""

from __future__ import annotations

import pytest

from tests.support.config import event
from tether.memory.people import SqlErasure
from tether.memory.records import MemoryChanges
from tether.memory.state import ScopedData
from tether.memory.store import Store

CHAT, USER = "chat:telegram:77", "user:telegram:77"


async def commit(store: Store, key: str, *changes: tuple[str, str, str | None]) -> None:
    [row] = await store.accept([(event(key), "telegram:77")])
    assert row is not None
    await store.begin(row)
    await store.checkpoint(key, [], [], MemoryChanges("telegram:77", handler_state=list(changes)))


async def test_keys_are_written_by_checkpoints_and_read_by_scope(store: Store) -> None:
    assert await store.handler_state(CHAT) == {}
    await commit(store, "a", (CHAT, "step", '"asked_name"'), (USER, "name", '"Ann"'))
    await commit(store, "b", (CHAT, "count", "2"), (CHAT, "step", None))
    assert await store.handler_state(CHAT) == {"count": "2"}
    assert await store.handler_state(USER) == {"name": '"Ann"'}
    await commit(store, "c", (CHAT, "count", "3"))  # a key written again: its new value
    assert await store.handler_state(CHAT) == {"count": "3"}
    assert await store.handler_state("chat:telegram:78") == {}


async def test_an_erased_persons_state_and_their_chats_go(store: Store) -> None:
    if not isinstance(store, SqlErasure):
        pytest.skip("erasure is the SQL stores' (tether forget works on a file or a server)")
    await commit(store, "a", (CHAT, "step", '"x"'), (USER, "name", '"Ann"'))
    await commit(store, "b", ("user:telegram:88", "name", '"Bob"'))
    await store.erase_person(["telegram:88"])
    assert await store.handler_state("user:telegram:88") == {}
    assert await store.handler_state(USER) == {"name": '"Ann"'}


def test_only_the_keys_a_turn_changed_are_written() -> None:
    data = ScopedData(CHAT, {"a": "1", "b": '{"x": [1, 2]}', "c": '"keep"'})
    assert data.changed() == []  # read, not changed
    data.data["a"] = 2
    data.data["b"]["x"].append(3)  # changed inside
    del data.data["c"]
    data.data["d"] = {"nested": True}
    changed = {name: value for _, name, value in data.changed()}
    assert changed == {"a": "2", "b": '{"x": [1, 2, 3]}', "c": None, "d": '{"nested": true}'}


def test_a_value_that_is_not_json_is_named() -> None:
    data = ScopedData(CHAT, {})
    data.data["when"] = object()
    with pytest.raises(Exception, match=r"chat:telegram:77\['when'\]: not a JSON value"):
        data.changed()
    data.data["when"] = float("nan")
    with pytest.raises(Exception, match="not a JSON value"):
        data.changed()
