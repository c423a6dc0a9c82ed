"""Reading outside input within budgets: the one place files and YAML are read.

Every file the runtime reads on a user's behalf (``.agent`` files, conversation files, Mantle
project files, ``agentscript.toml``) goes through :func:`read_file_bytes`: only a regular
file is opened (``/dev/zero``, a FIFO or a directory is a clear error, never a hang or an
endless read), and only up to ``max_bytes``. Every YAML document goes through
:func:`compose_yaml` (nodes, for readers that keep positions) or :func:`load_yaml` (plain
values): an alias bomb, a document that expands to more than ``max_nodes`` nodes, a
recursive alias, nesting beyond the parser's stack, and (for :func:`load_yaml`, and for
:func:`compose_yaml` unless the caller reports them itself) a duplicate mapping key are
errors with the line, raised as :class:`YamlLimitError` (a ``yaml.MarkedYAMLError``, so
callers that already report YAML syntax errors with their position report these the same way).
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor

from agentscript.limits import MAX_FILE_BYTES, MAX_YAML_NODES


class FileInputError(OSError):
    """A file that is not read: not a regular file, too large, or unreadable."""

    def __init__(self, path: str | Path, reason: str, errno: int | None = None) -> None:
        super().__init__(reason)
        self.path = str(path)
        self.reason = reason
        self.strerror = reason
        self.errno = errno  # the system's, when opening or reading failed (ENOENT: missing)


def read_file_bytes(path: str | Path, *, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` of them.

    Opened non-blocking and checked with ``fstat`` before reading, so a FIFO (which would
    block until a writer comes) or a device such as ``/dev/zero`` (which never ends) is
    refused without waiting. Raises :class:`FileInputError` (an ``OSError``).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise FileInputError(path, exc.strerror or str(exc), exc.errno) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise FileInputError(path, f"{kind}; only regular files are read")
        if info.st_size > max_bytes:
            raise FileInputError(path, _too_large(max_bytes))
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:  # st_size can lie (procfs, a file growing while read)
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise FileInputError(path, _too_large(max_bytes))
        return b"".join(chunks)
    except FileInputError:
        raise
    except OSError as exc:
        raise FileInputError(path, exc.strerror or str(exc)) from None
    finally:
        os.close(fd)


def read_file_text(
    path: str | Path, *, max_bytes: int = MAX_FILE_BYTES, encoding: str = "utf-8-sig"
) -> str:
    """:func:`read_file_bytes` decoded (UnicodeDecodeError when the bytes are not text)."""
    return read_file_bytes(path, max_bytes=max_bytes).decode(encoding)


def _too_large(max_bytes: int) -> str:
    return f"larger than the limit of {max_bytes} bytes (limits.MAX_FILE_BYTES)"


class YamlLimitError(yaml.MarkedYAMLError):
    """A YAML document over a budget or with a duplicate key; ``problem_mark`` says where."""

    def __init__(self, problem: str, node: yaml.Node) -> None:
        super().__init__(problem=problem, problem_mark=node.start_mark)


def compose_yaml(
    text: str, *, max_nodes: int = MAX_YAML_NODES, duplicate_keys: bool = True
) -> yaml.Node | None:
    """The node tree of one YAML document, within the budgets (``yaml.YAMLError`` if not).

    ``duplicate_keys=False`` leaves duplicate keys to a caller that reports them itself.
    """
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:
        raise yaml.YAMLError("the document is nested too deeply") from None
    if root is not None:
        check_yaml_nodes(root, max_nodes=max_nodes, duplicate_keys=duplicate_keys)
    return root


def check_yaml_nodes(
    root: yaml.Node, *, max_nodes: int = MAX_YAML_NODES, duplicate_keys: bool = True
) -> None:
    """The budgets of :func:`compose_yaml` on a node tree a reader composed itself (e.g. with
    libyaml's faster ``CSafeLoader``, or a loader that keeps line marks): raises
    :class:`YamlLimitError` on an alias bomb, a recursive alias or a duplicate key."""
    _check_expansion(root, max_nodes)
    if duplicate_keys:
        _check_duplicate_keys(root)


class JsonConstructor(SafeConstructor):
    """Safe types, with timestamps kept as the text written (``2026-02-10``): JSON has no
    dates, and state, traces and saved sessions must stay JSON."""

    def timestamp_text(self, node: yaml.Node) -> str:
        assert isinstance(node, yaml.ScalarNode)
        return str(self.construct_scalar(node))


# types-PyYAML types add_constructor for the loader classes only; the call is the documented API.
JsonConstructor.add_constructor(  # type: ignore[type-var]
    "tag:yaml.org,2002:timestamp", JsonConstructor.timestamp_text
)


def unreadable_value(node: yaml.Node, exc: ValueError) -> str:
    """Why PyYAML could not build ``node`` (it raised a bare ValueError), as a reader says it."""
    text = str(node.value) if isinstance(node, yaml.ScalarNode) else ""
    if node.tag == "tag:yaml.org,2002:int" and "digits" in str(exc):
        digits = sum(c.isdigit() for c in text)
        return (
            f"a number of {digits} digits is longer than Python reads "
            f"(sys.get_int_max_str_digits(): {sys.get_int_max_str_digits()}); "
            "quote it to make it a text"
        )
    kind = str(node.tag).rpartition(":")[2]
    shown = text if len(text) <= 40 else text[:40] + "..."
    return f"the {kind} {shown!r} cannot be read ({exc}); quote it to make it a text"


class _ValueConstructor(JsonConstructor):
    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # A value PyYAML's constructors fail on with a bare ValueError (an integer longer
        # than Python converts, ``!!int x``) becomes a YAML error at its place, which every
        # reader of load_yaml already words with its line, instead of a traceback.
        try:
            return super().construct_object(node, deep=deep)
        except ValueError as exc:
            problem = unreadable_value(node, exc)
            raise ConstructorError(None, None, problem, node.start_mark) from None


def load_yaml(text: str, *, max_nodes: int = MAX_YAML_NODES) -> Any:
    """The plain value of one YAML document (safe types, timestamps as text), within the
    budgets."""
    root = compose_yaml(text, max_nodes=max_nodes)
    if root is None:
        return None
    return _ValueConstructor().construct_document(root)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_expansion(root: yaml.Node, max_nodes: int) -> None:
    """Count the nodes the document stands for with aliases followed, without following
    them: each shared node's expanded size is computed once (iteratively, any depth)."""
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()
    has_alias = False
    pending: list[tuple[yaml.Node, bool]] = [(root, False)]
    while pending:
        node, children_done = pending.pop()
        key = id(node)
        if children_done:
            in_progress.discard(key)
            total = 1 + sum(sizes[id(child)] for child in _children(node))
            if total > max_nodes:
                if has_alias:
                    problem = (
                        f"the document expands to more than {max_nodes} nodes through its "
                        "aliases (limits.MAX_YAML_NODES); an alias bomb is refused"
                    )
                else:
                    problem = (
                        f"the document has more than {max_nodes} nodes "
                        "(limits.MAX_YAML_NODES); split it or make it smaller"
                    )
                raise YamlLimitError(problem, node)
            sizes[key] = total
            continue
        if key in sizes:
            has_alias = True  # a node reached a second time: an alias points at it
            continue
        if key in in_progress:
            raise YamlLimitError("an alias refers to the node that contains it", node)
        in_progress.add(key)
        pending.append((node, True))
        for child in _children(node):
            if id(child) in sizes:
                has_alias = True  # a node counted already: an alias points at it
            else:
                pending.append((child, False))


def _check_duplicate_keys(root: yaml.Node) -> None:
    """A key given twice in one mapping is an error at its second line (YAML loaders
    otherwise keep the last value silently: a second ``turns:`` dropped the first list)."""
    seen_nodes: set[int] = set()
    pending = [root]
    while pending:
        node = pending.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set[str] = set()
            for key_node, _ in node.value:
                if (
                    isinstance(key_node, yaml.ScalarNode)
                    and key_node.tag != "tag:yaml.org,2002:merge"
                ):
                    key = f"{key_node.tag}:{key_node.value}"
                    if key in keys:
                        raise YamlLimitError(f"duplicate key '{key_node.value}'", key_node)
                    keys.add(key)
        pending.extend(_children(node))
