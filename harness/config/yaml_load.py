"""YAML text -> composed node graph and Python data, at a cost bounded by what is written.

PyYAML composes an alias (``*name``) as a second reference to the anchored node, so
composing and constructing a document are linear in its text; every walk over the
node tree (line numbers, the loader's pitfall checks, pydantic's validation of the
data) expands each alias again. Nine levels of nine aliases ("billion laughs") are a
few hundred bytes that expand to 9^9 nodes. :func:`load_yaml` counts the nodes the
document has with every alias expanded, on the node graph and with memoisation (each
distinct node is sized once), and refuses a document whose aliases add more than
:data:`MAX_ALIAS_NODES` nodes to those written, or whose aliases refer to a node that
contains them (a recursive document, which no walk could finish).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

#: The most nodes aliases may add to a document: its node count with every alias
#: expanded, minus the nodes written. A config of evalrun or vLLM has a few hundred
#: nodes; 10,000 leaves room for any reuse of a variant or an ``env`` block by alias,
#: and walking that many takes milliseconds.
MAX_ALIAS_NODES = 10_000

#: Where a node sits in a document: its mapping keys (None for a key that is not a
#: scalar) and list indices from the top, e.g. ``("variants", "spec", "env", "X")``.
KeyPath = tuple[str | int | None, ...]


class YamlCostError(ValueError):
    """A document whose aliases expand beyond :data:`MAX_ALIAS_NODES`, refer to a node
    that contains them, or nest deeper than the parser can follow; the message names
    the file and line."""


@dataclass(frozen=True)
class LoadedYaml:
    """One YAML document as the loader reads it.

    Attributes:
        node: the composed node graph (None for an empty document); an alias is the
            anchored node itself.
        data: the constructed Python value (``yaml.safe_load``'s result).
        written_nodes: distinct nodes of the graph (what is written).
        expanded_nodes: nodes with every alias expanded (what a walk visits).
    """

    node: yaml.Node | None
    data: Any
    written_nodes: int
    expanded_nodes: int


class _AliasLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that notes each alias it composes: (anchor, node, mark)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.aliases: list[tuple[str, yaml.Node, yaml.Mark]] = []

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None:  # an undefined alias is the composer's own error
                self.aliases.append((str(event.anchor), node, event.start_mark))
        return super().compose_node(parent, index)


def _children(node: yaml.Node) -> Iterator[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            yield k
            yield v
    elif isinstance(node, yaml.SequenceNode):
        yield from node.value


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def expanded_sizes(root: yaml.Node, where: str) -> dict[int, int]:
    """Each distinct node's size with every alias expanded (itself and all it holds),
    keyed by ``id(node)``; one iterative depth-first pass, each node sized once.

    Raises:
        YamlCostError: a node holds itself through an alias (``where:<line>``).
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        if finished:
            on_path.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(c)] for c in _children(node))
            continue
        if id(node) in sizes:
            continue
        on_path.add(id(node))
        stack.append((node, True))
        for child in _children(node):
            if id(child) in on_path:
                raise YamlCostError(
                    f"{where}:{_line(child)}: an alias refers to the node anchored at line {_line(child)}, "
                    "which contains it (a recursive document cannot be read as a config)")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes


def load_yaml(text: str, where: str, limit: int = MAX_ALIAS_NODES) -> LoadedYaml:
    """Parse one YAML document with ``yaml.SafeLoader``, composing it once and
    refusing alias expansion beyond ``limit`` before anything walks it.

    Args:
        text: the document.
        where: the file name put in front of every message.
        limit: most nodes aliases may add (:data:`MAX_ALIAS_NODES`).

    Returns:
        :class:`LoadedYaml`.

    Raises:
        yaml.YAMLError: not valid YAML (PyYAML's own message, with its line).
        YamlCostError: aliases expand beyond ``limit`` (the file, the line of the
            alias that expands most, its size and the limit), a recursive alias, or
            nesting deeper than the parser can follow.
    """
    loader = _AliasLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return LoadedYaml(None, None, 0, 0)
        sizes = expanded_sizes(node, where)
        written, expanded = len(sizes), sizes[id(node)]
        if expanded - written > limit:
            anchor, big, mark = max(loader.aliases, key=lambda a: sizes[id(a[1])])
            raise YamlCostError(
                f"{where}:{mark.line + 1}: alias '*{anchor}' (anchored at line {_line(big)}) expands to "
                f"{sizes[id(big)]:,} nodes; with every alias expanded the document has {expanded:,} nodes, "
                f"{expanded - written:,} more than the {written:,} written, and evalrun refuses aliases that "
                f"add more than {limit:,} (reading it would take minutes and gigabytes)")
        data = loader.construct_document(node)
    except RecursionError:
        raise YamlCostError(f"{where}: nested deeper than the YAML parser can follow") from None
    finally:
        loader.dispose()
    return LoadedYaml(node, data, written, expanded)


def key_lines(node: yaml.Node, prefix: KeyPath = ()) -> dict[KeyPath, int]:
    """Every key path under ``node`` (its mapping keys and list items) mapped to its
    1-based line, for messages that name where a key is written."""
    lines: dict[KeyPath, int] = {}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            path = prefix + (k.value,)
            lines[path] = k.start_mark.line + 1
            lines.update(key_lines(v, path))
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            path = prefix + (i,)
            lines[path] = v.start_mark.line + 1
            lines.update(key_lines(v, path))
    return lines
