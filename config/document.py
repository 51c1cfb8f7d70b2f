"""YAML text → plain data, bounded: aliases, nesting and unreadable scalars fail as one line.

PyYAML's safe loader makes an alias a second reference to the anchored value, which is
free — until something walks the data: interpolation and validation visit every
reference, so 342 bytes of nested aliases (the "billion laughs") became 9^9 strings,
40 s and 1.8 GB before a single key was checked, even under an unknown key. Here the
composer weighs each alias as it meets it, before anything is built: the nodes it adds to
the walked document count against :data:`MAX_ALIAS_NODES`, an alias inside the
collection it names (a cycle, which would recurse forever) is refused, and nesting,
aliases included, stops at :data:`MAX_DEPTH`. Anchors and aliases within the bounds keep
working (``admins: *people``, ``<<: *defaults``).

Every failure is a :class:`YamlProblem` whose text is one line, ``line L, column C: …``,
and never quotes the offending line: the snippet PyYAML prints could hold a token.
"""

from __future__ import annotations

from typing import Any, Protocol

import yaml
from yaml.error import MarkedYAMLError
from yaml.nodes import MappingNode, Node, SequenceNode
from yaml.reader import ReaderError

#: Nodes that aliases may add to the document, all aliases together: generous for a
#: hand-written config, a millionth of a bomb's.
MAX_ALIAS_NODES = 10_000
#: Levels of nesting, aliases expanded; a config needs a handful.
MAX_DEPTH = 64
#: The largest integer a config may write: every integer key fits in 64 bits.
MAX_INT = 2**63 - 1


class YamlProblem(Exception):
    """Text that is not a usable YAML document; ``str()`` is one line saying where and what."""


def parse(text: str) -> Any:
    """The one YAML document in ``text`` as plain data (``None`` when empty)."""
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text)  # the reader refuses a forbidden character here
        return loader.get_single_data()
    except MarkedYAMLError as exc:
        raise YamlProblem(_describe(exc)) from None
    except ReaderError as exc:  # a character YAML does not allow (a NUL, a lone surrogate)
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - text.rfind("\n", 0, exc.position)
        raise YamlProblem(
            f"line {line}, column {column}: invalid YAML:"
            f" character #x{exc.character:04x} is not allowed"
        ) from None
    except yaml.YAMLError as exc:
        raise YamlProblem(f"invalid YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:  # a guard behind MAX_DEPTH, which should stop it first
        raise YamlProblem("invalid YAML: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader with the bounds above, and scalar errors reported where they are."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._depth = 0
        self._alias_nodes = 0
        #: id(node) → (nodes, height) of its expanded subtree; nodes live as long as this.
        self._weights: dict[int, tuple[int, int]] = {}

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            assert node is not None  # an alias names a node, or PyYAML raised
            self._weigh_alias(node, event)
            return node
        if self._depth >= MAX_DEPTH:
            raise _refused(event.start_mark, f"nested deeper than {MAX_DEPTH} levels")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def _weigh_alias(self, node: Node, event: yaml.AliasEvent) -> None:
        where = event.start_mark
        if node.end_mark is None:  # the anchored collection is still open: it contains itself
            raise _refused(where, f"alias *{event.anchor} refers to a collection it is inside")
        nodes, height = self._weigh(node)
        self._alias_nodes += nodes
        if self._alias_nodes > MAX_ALIAS_NODES:
            raise _refused(
                where,
                f"alias *{event.anchor} takes the document past {MAX_ALIAS_NODES:,} aliased"
                " values (aliases are bounded, so a few bytes cannot become gigabytes)",
            )
        if self._depth + height > MAX_DEPTH:
            raise _refused(where, f"alias *{event.anchor} nests deeper than {MAX_DEPTH} levels")

    def _weigh(self, node: Node) -> tuple[int, int]:
        """Nodes and height of ``node`` with every alias inside it expanded (memoized, so
        weighing costs what the written document costs, not what it expands to)."""
        known = self._weights.get(id(node))
        if known is not None:
            return known
        children: list[Node] = []
        if isinstance(node, SequenceNode):
            children = node.value
        elif isinstance(node, MappingNode):
            children = [part for pair in node.value for part in pair]
        weights = [self._weigh(child) for child in children]
        weight = (1 + sum(n for n, _ in weights), 1 + max((h for _, h in weights), default=0))
        self._weights[id(node)] = weight
        return weight

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            value = super().construct_object(node, deep)
        except (yaml.YAMLError, YamlProblem):
            raise
        except Exception:
            # ``!!float nope``, a 5,000-digit int, 2001-02-30, ``!!timestamp x``
            # (AttributeError): each is the file's mistake, reported without its value.
            kind = node.tag.rpartition(":")[2] or "value"
            raise _refused(node.start_mark, f"cannot read this value as a YAML {kind}") from None
        if type(value) is int and not -MAX_INT <= value <= MAX_INT:
            # No key wants it, and Python cannot even print one of 0x + 4,000 digits.
            raise _refused(node.start_mark, "a number larger than any setting takes (2^63)")
        return value


def _describe(exc: MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or exc.context or "invalid"
    if exc.context and exc.problem and exc.context_mark and exc.context_mark is not mark:
        problem += f" ({exc.context} at {_at(exc.context_mark)})"
    return f"{_at(mark)}: invalid YAML: {problem}" if mark else f"invalid YAML: {problem}"


class _Mark(Protocol):
    """Where PyYAML is in the text (its pure-Python and libyaml marks alike), 0-based."""

    line: int
    column: int


def _refused(mark: _Mark | None, problem: str) -> YamlProblem:
    return YamlProblem(f"{_at(mark)}: {problem}")


def _at(mark: _Mark | None) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
