"""One person across chats and platforms: which identities are the same person, and the
one-time codes that link them.

An identity is ``platform:user`` (:func:`tether.keys.sender_name`). A person who sends
``/link`` in a DM gets a code; the same person sending ``/link CODE`` from another
platform (or another account) links that identity to the first. Linked identities
share what is about the person: their person-facts (:attr:`~tether.memory.records.Fact.owner`)
and the search scope of their DMs (:mod:`tether.memory.recall`). What is about a chat
stays with the chat, and nothing about one person ever reaches another's turn.

The rows are ``people(identity, person)``: each linked identity names its person, which
is the identity that issued the first code (a name only; it carries no data). An
identity without a row is a person of its own, so nothing is written for anyone who
never links. Linking moves the claimer, and whoever was linked with it, into the
issuer's person; unlinking takes one identity out (the rest stay linked, renamed after
one of them if the person was named after the one who left).

Codes are ``link_codes(code, identity, expires)``: one per identity at a time (a new
``/link`` replaces the old one), valid for :data:`CODE_TTL_S`, deleted by the claim
that uses them, in the claim's own transaction. Codes are issued and claimed in DMs
only (gateway/builtin/people.py): a code posted in a group could be claimed by anyone
who read it, and whoever claims a code gets the issuer's person-facts.

Both SQL stores share :class:`SqlPeople`; the in-memory store keeps dicts
(:class:`MemoryPeople`).
"""

from __future__ import annotations

import abc
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from tether.memory.sql.statements import FINISH, Statement

#: How long a link code can be claimed, seconds.
CODE_TTL_S = 600.0

#: What a claim came to: ``linked``; ``unknown`` (no such code, used or expired);
#: ``self`` (the code was issued by the identity claiming it).
Claimed = Literal["linked", "unknown", "self"]


@dataclass(frozen=True, slots=True)
class Link:
    """One identity of a person, for ``tether who``."""

    identity: str
    person: str
    linked: float


@dataclass(frozen=True, slots=True)
class Claim:
    outcome: Claimed
    #: The identity that issued the code (``linked`` only).
    issuer: str | None = None


class PeopleStore(Protocol):
    """Who is the same person (see the module)."""

    @abc.abstractmethod
    async def identities(self, identity: str) -> tuple[str, ...]:
        """``identity`` and every identity linked with it, ``identity`` first."""

    @abc.abstractmethod
    async def links(self, identity: str) -> list[Link]:
        """The rows of ``identity``'s person, oldest link first; empty when unlinked."""

    @abc.abstractmethod
    async def issue_link_code(self, identity: str, code: str, now: float | None = None) -> None:
        """Store ``code`` for ``identity`` (replacing its earlier one), claimable until
        :data:`CODE_TTL_S` from now."""

    @abc.abstractmethod
    async def claim_link_code(self, code: str, identity: str, now: float | None = None) -> Claim:
        """Link ``identity`` with the identity that issued ``code``, and spend it."""

    @abc.abstractmethod
    async def unlink(self, identity: str) -> bool:
        """Take ``identity`` out of its person; False if it was not linked."""


class _Sql(Protocol):
    def _write(self, phase: int, *statements: Statement) -> Awaitable[None]: ...

    async def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]: ...


_PERSON = "SELECT person FROM people WHERE identity = ?"
_MEMBERS = "SELECT identity, person, linked FROM people WHERE person = ? ORDER BY linked, identity"
_CODE = "SELECT identity FROM link_codes WHERE code = ? AND expires >= ?"
_CODE_SET = "INSERT INTO link_codes (code, identity, expires) VALUES (?, ?, ?)"
_CODES_OF = "DELETE FROM link_codes WHERE identity = ? OR expires < ?"
_CODE_SPENT = "DELETE FROM link_codes WHERE code = ?"
_HEAD = (
    "INSERT INTO people (identity, person, linked) VALUES (?, ?, ?)"
    " ON CONFLICT (identity) DO NOTHING"
)
_JOINED = (
    "INSERT INTO people (identity, person, linked) VALUES (?, ?, ?)"
    " ON CONFLICT (identity) DO UPDATE SET person = excluded.person, linked = excluded.linked"
)
_MOVED = "UPDATE people SET person = ? WHERE person = ?"
_LEFT = "DELETE FROM people WHERE identity = ?"


class SqlPeople:
    """:class:`PeopleStore` for a store with ``_write`` and ``_rows`` (both SQL stores)."""

    async def _person(self: _Sql, identity: str) -> str | None:
        rows = await self._rows(_PERSON, (identity,))
        return str(rows[0][0]) if rows else None

    async def identities(self: _Sql, identity: str) -> tuple[str, ...]:
        rows = await self._rows(
            "SELECT identity FROM people WHERE person = (SELECT person FROM people"
            " WHERE identity = ?) ORDER BY linked, identity",
            (identity,),
        )
        return (identity, *(str(row[0]) for row in rows if str(row[0]) != identity))

    async def links(self: _Sql, identity: str) -> list[Link]:
        person = await SqlPeople._person(self, identity)
        if person is None:
            return []
        rows = await self._rows(_MEMBERS, (person,))
        return [Link(str(i), str(p), float(t)) for i, p, t in rows]

    async def issue_link_code(
        self: _Sql, identity: str, code: str, now: float | None = None
    ) -> None:
        now = time.time() if now is None else now
        await self._write(
            FINISH, (_CODES_OF, (identity, now)), (_CODE_SET, (code, identity, now + CODE_TTL_S))
        )

    async def claim_link_code(
        self: _Sql, code: str, identity: str, now: float | None = None
    ) -> Claim:
        now = time.time() if now is None else now
        rows = await self._rows(_CODE, (code, now))
        if not rows:
            return Claim("unknown")
        issuer = str(rows[0][0])
        if issuer == identity:
            return Claim("self")
        person = await SqlPeople._person(self, issuer) or issuer
        before = await SqlPeople._person(self, identity)
        statements: list[Statement] = [(_CODE_SPENT, (code,)), (_HEAD, (issuer, person, now))]
        if before is not None and before != person:
            statements.append((_MOVED, (person, before)))
        statements.append((_JOINED, (identity, person, now)))
        await self._write(FINISH, *statements)
        return Claim("linked", issuer)

    async def unlink(self: _Sql, identity: str) -> bool:
        person = await SqlPeople._person(self, identity)
        if person is None:
            return False
        rows = await self._rows(_MEMBERS, (person,))
        rest = [str(row[0]) for row in rows if str(row[0]) != identity]
        statements: list[Statement] = [(_LEFT, (identity,))]
        if len(rest) == 1:  # a person of one needs no row
            statements.append((_LEFT, (rest[0],)))
        elif rest and person == identity:
            statements.append((_MOVED, (rest[0], person)))
        await self._write(FINISH, *statements)
        return True


class MemoryPeople:
    """:class:`PeopleStore` in dicts, for the in-memory store."""

    _people_rows: dict[str, Link]
    _link_codes: dict[str, tuple[str, float]]

    def _tables(self) -> tuple[dict[str, Link], dict[str, tuple[str, float]]]:
        if not hasattr(self, "_people_rows"):
            self._people_rows, self._link_codes = {}, {}
        return self._people_rows, self._link_codes

    async def identities(self, identity: str) -> tuple[str, ...]:
        return (
            identity,
            *(link.identity for link in await self.links(identity) if link.identity != identity),
        )

    async def links(self, identity: str) -> list[Link]:
        rows, _codes = self._tables()
        mine = rows.get(identity)
        if mine is None:
            return []
        members = [link for link in rows.values() if link.person == mine.person]
        return sorted(members, key=lambda link: (link.linked, link.identity))

    async def issue_link_code(self, identity: str, code: str, now: float | None = None) -> None:
        now = time.time() if now is None else now
        _rows, codes = self._tables()
        for old in [c for c, (who, until) in codes.items() if who == identity or until < now]:
            del codes[old]
        codes[code] = (identity, now + CODE_TTL_S)

    async def claim_link_code(self, code: str, identity: str, now: float | None = None) -> Claim:
        now = time.time() if now is None else now
        rows, codes = self._tables()
        found = codes.get(code)
        if found is None or found[1] < now:
            return Claim("unknown")
        issuer = found[0]
        if issuer == identity:
            return Claim("self")
        del codes[code]
        person = rows[issuer].person if issuer in rows else issuer
        rows.setdefault(issuer, Link(issuer, person, now))
        before = rows[identity].person if identity in rows else None
        if before is not None and before != person:
            for who, link in list(rows.items()):
                if link.person == before:
                    rows[who] = Link(who, person, link.linked)
        rows[identity] = Link(identity, person, now)
        return Claim("linked", issuer)

    async def unlink(self, identity: str) -> bool:
        rows, _codes = self._tables()
        mine = rows.pop(identity, None)
        if mine is None:
            return False
        rest = sorted(
            (link for link in rows.values() if link.person == mine.person),
            key=lambda link: (link.linked, link.identity),
        )
        if len(rest) == 1:
            del rows[rest[0].identity]
        elif rest and mine.person == identity:
            for link in rest:
                rows[link.identity] = Link(link.identity, rest[0].identity, link.linked)
        return True
