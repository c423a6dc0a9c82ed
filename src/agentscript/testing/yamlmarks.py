"""YAML loading that remembers line numbers, so spec errors can name the line.

:func:`load_yaml` returns plain data in which every mapping is a :class:`Marked` dict (a real
``dict``) carrying ``line`` (1-based line of the mapping) and ``key_lines`` (line of each key),
and every list is a :class:`MarkedList` with ``line`` and ``item_lines``. Only the safe loader
is used: no tags, no object construction; the node tree is checked against
:func:`agentscript.reading.check_yaml_nodes` (alias bombs, recursive aliases, duplicate keys)
before anything is built, and a scalar Python cannot convert (an integer of more than 4,300
digits, a date such as ``2024-13-45``) is a spec error at its line, never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, SequenceNode

from agentscript.reading import check_yaml_nodes, unreadable_value
from agentscript.testing.errors import SpecError


class Marked(dict[str, Any]):
    """A mapping read from YAML, with the line of itself and of each key."""

    line: int = 0
    key_lines: dict[str, int]

    def line_of(self, key: str) -> int:
        lines: dict[str, int] = getattr(self, "key_lines", {})
        return lines.get(key, self.line)


class MarkedList(list[Any]):
    """A list read from YAML, with the line of itself and of each item."""

    line: int = 0
    item_lines: list[int]

    def line_of(self, index: int) -> int:
        lines = getattr(self, "item_lines", [])
        return lines[index] if index < len(lines) else self.line


# libyaml's parser when installed (about 10x faster on large specs), else the pure-Python one;
# both are the safe loader: no tags, no object construction.
_Base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[valid-type,misc]
    def construct_object(self, node: Node, deep: bool = False) -> Any:
        # A scalar Python cannot convert raises a bare ValueError: an integer longer than
        # sys.get_int_max_str_digits() (4,300 digits), a date such as 2024-13-45. It becomes
        # an error at the scalar's line, as a syntax error is.
        try:
            return super().construct_object(node, deep=deep)
        except ValueError as exc:
            problem = unreadable_value(node, exc)
            raise ConstructorError(None, None, problem, node.start_mark) from None


def _mapping(loader: _Loader, node: MappingNode) -> Marked:
    loader.flatten_mapping(node)
    result = Marked()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            key = str(key)
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_node.start_mark.line + 1
    return result


def _sequence(loader: _Loader, node: SequenceNode) -> MarkedList:
    result = MarkedList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _sequence)


def load_yaml(text: str, path: Path | None) -> Any:
    """Parse ``text`` within the YAML budgets of :mod:`agentscript.reading` (alias expansion,
    recursive aliases, duplicate keys); a syntax error or a budget exceeded becomes a
    :class:`SpecError` with its line."""
    loader = _Loader(text)  # a SafeLoader subclass: no tags, no objects
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        check_yaml_nodes(root)
        return loader.construct_document(root)
    except RecursionError:
        raise SpecError(path, None, "invalid YAML: the document is nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise SpecError(path, line, f"invalid YAML: {getattr(exc, 'problem', exc)}") from None
    finally:
        loader.dispose()


def line_of(data: Any, key: str | int | None = None) -> int | None:
    """The line of ``data`` (or of its key/item), when it was read from YAML."""
    if isinstance(data, Marked):
        return data.line_of(key) if isinstance(key, str) else data.line
    if isinstance(data, MarkedList):
        return data.line_of(key) if isinstance(key, int) else data.line
    return None
