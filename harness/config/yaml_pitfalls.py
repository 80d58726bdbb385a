"""YAML pitfalls the loader refuses on the composed node tree (:func:`check_yaml`): a key
written twice in one mapping, and an unquoted scalar that YAML 1.1 reads as something
other than the string the engine takes (``on``, ``1.0``, ``0755``, ``2024-01-01`` ...).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from harness.config.schema import ConfigError
from harness.config.yaml_load import KeyPath

_STR_TAG = "tag:yaml.org,2002:str"
_INT_TAG = "tag:yaml.org,2002:int"

#: Keys whose values are strings to the engine (shell arguments, environment
#: values, model ids): a plain YAML 1.1 scalar there that PyYAML would turn into a
#: bool, null, float, date or a re-based integer is an error (:func:`check_yaml`).
#: ``*`` matches any key (a variant name, an environment variable).
STRING_PATHS: tuple[tuple[str, ...], ...] = (
    ("model_name",), ("model",), ("name",),
    ("server_args",), ("variants", "*", "server_args"),
    ("env", "*"), ("variants", "*", "env", "*"),
)
#: Of those, where a plain decimal integer (``VLLM_CPU_KVCACHE_SPACE: 1``,
#: ``[--max-model-len, 4096]``) is accepted and kept as the text written: its text
#: and its value print the same.
_INT_OK_PATHS: tuple[tuple[str, ...], ...] = (
    ("server_args", "#"), ("variants", "*", "server_args", "#"),
    ("env", "*"), ("variants", "*", "env", "*"),
)


def _path_matches(path: KeyPath, patterns: tuple[tuple[str, ...], ...]) -> bool:
    """True when ``path`` (keys and list indices) fits a pattern; ``*`` = any key,
    ``#`` = any list index."""
    for pat in patterns:
        if len(pat) != len(path):
            continue
        if all(p == "*" and not isinstance(x, int) or p == "#" and isinstance(x, int) or p == x
               for p, x in zip(pat, path)):
            return True
    return False


def _quoted_hint(key: str | int | None, text: str) -> str:
    return f'{key}: "{text}"'


def check_yaml(node: yaml.Node | None, path: Path) -> None:
    """YAML pitfalls the loader refuses, found on the composed node tree.

    * A key written twice in one mapping (PyYAML keeps the last silently): the
      error names the key path and both lines.
    * In places that are strings to the engine (:data:`STRING_PATHS`: ``env``
      values, ``server_args`` and its list items, ``model_name`` / ``model`` /
      ``name``), an unquoted scalar that YAML 1.1 reads as something else: ``yes`` /
      ``no`` / ``on`` / ``off`` / ``true`` (bool), an empty value or ``~`` (null),
      ``1.0`` / ``1e3`` / ``.5`` (float), ``0755`` / ``0x1F`` / ``1_000`` /
      ``1:30`` (octal, hex, underscored or base-60 integer), ``2024-01-01`` (date).
      The error names the file, key path and line and shows the quoted form to
      write. A plain decimal integer (``1``, ``4096``) is accepted in ``env`` and
      in ``server_args`` list items: it reads back as the same text.

    Raises:
        ConfigError: on the first pitfall, ``"<file>:<line>: ..."``.
    """
    if node is None:
        return
    _walk_yaml(node, (), path)


def _check_string_shape(node: yaml.Node, path: KeyPath, file: Path) -> None:
    """Where the engine takes a string (:data:`STRING_PATHS`), a mapping is refused, and
    a list everywhere except as ``server_args`` itself (a list of arguments, whose items
    are scalars); the message names the file, line and key path."""
    if isinstance(node, yaml.ScalarNode):
        return
    arg_item = bool(path) and isinstance(path[-1], int) and path[-2:-1] == ("server_args",)
    if not (_path_matches(path, STRING_PATHS) or arg_item):
        return
    if isinstance(node, yaml.SequenceNode) and path[-1] == "server_args":
        return
    shape = "a mapping" if isinstance(node, yaml.MappingNode) else "a list"
    dotted = ".".join(str(x) for x in path)
    takes = ("one argument (a string or a plain integer) per list item" if arg_item
             else "a string or a plain integer" if "env" in path else "a string")
    raise ConfigError(
        f"{file}:{node.start_mark.line + 1}: key '{dotted}': {shape} is not a value the engine can take "
        f"here; write {takes}"
    )


def _walk_yaml(node: yaml.Node, prefix: KeyPath, file: Path) -> None:
    _check_string_shape(node, prefix, file)
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for k, v in node.value:
            kv = k.value if isinstance(k, yaml.ScalarNode) else None
            line = k.start_mark.line + 1
            if kv is not None and kv in seen:
                dotted = ".".join(str(x) for x in prefix + (kv,))
                raise ConfigError(
                    f"{file}:{line}: duplicate key '{dotted}': first written at line {seen[kv]}, "
                    f"again at line {line} (YAML would silently keep only the second); keep one"
                )
            if kv is not None:
                seen[kv] = line
            _walk_yaml(v, prefix + (kv,), file)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _walk_yaml(v, prefix + (i,), file)
    elif isinstance(node, yaml.ScalarNode):
        _check_string_scalar(node, prefix, file)


def _check_string_scalar(node: yaml.ScalarNode, path: KeyPath, file: Path) -> None:
    in_list = bool(path) and isinstance(path[-1], int)
    if not (_path_matches(path, STRING_PATHS) or (in_list and _path_matches(path[:-1], STRING_PATHS))):
        return
    if node.style is not None or node.tag == _STR_TAG:
        return  # quoted, or a plain scalar that is a string anyway
    text = node.value
    if node.tag == _INT_TAG and _path_matches(path, _INT_OK_PATHS):
        try:
            if str(int(text)) == text:
                return
        except ValueError:
            pass
    kind = {
        "tag:yaml.org,2002:bool": "a boolean",
        "tag:yaml.org,2002:null": "null (no value)",
        "tag:yaml.org,2002:float": "a float",
        "tag:yaml.org,2002:int": "an integer",
        "tag:yaml.org,2002:timestamp": "a date",
    }.get(node.tag, node.tag)
    key = path[-2] if in_list else path[-1]
    dotted = ".".join(str(x) for x in path)
    shown = f"- \"{text}\"" if in_list else _quoted_hint(key, text)
    value = "an empty value" if text in ("", "~") and kind.startswith("null") else f"unquoted {text!r}"
    raise ConfigError(
        f"{file}:{node.start_mark.line + 1}: key '{dotted}': {value} is read by YAML 1.1 as "
        f"{kind}, but the engine takes a string here; quote it: {shown}"
    )

