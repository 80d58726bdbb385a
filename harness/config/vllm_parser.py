"""vLLM's server argument parser as a table: every option string, alias and shorthand, and
the destination each one sets.

evalrun reads and rewrites a few settings in a config's ``server_args`` (the speculative
config, async scheduling, ``--port`` / ``--host``, parallel sizes, the tokenizer). Which
spellings set them is not typed into evalrun: it is read from vLLM's own parser
(``make_arg_parser(FlexibleArgumentParser())``, the parser of
``python -m vllm.entrypoints.openai.api_server``) by walking its actions
(:func:`table_from_parser`). Building that parser imports vLLM (about 12 s on 2 cores,
and the server may run under another interpreter), so the plan reads a snapshot of the
table generated from the installed parser by ``python -m harness.config.vllm_parser
--write`` (:data:`SNAPSHOT`; the plan names it and its vLLM version), and the pre-launch
check (:mod:`harness.engine.preflight`) parses every server command with the installed
vLLM's own parser and refuses a variant planned without speculation whose arguments
speculate there.

Items are resolved as vLLM's ``FlexibleArgumentParser.parse_args`` and argparse resolve
them: ``_`` -> ``-`` in a ``--`` flag's name up to the first ``.``; ``FLAG=value``; dotted
JSON sub-keys ``FLAG.key value`` on any ``-`` flag; then argparse's own option lookup
(exact, ``=``, unique prefixes when the parser allows abbreviations), done by an
``argparse.ArgumentParser`` rebuilt from the table, so Python's rules are Python's.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

#: The committed snapshot of vLLM's parser table (``python -m harness.config.vllm_parser --write``).
SNAPSHOT = Path(__file__).with_name("vllm_parser_snapshot.json")
#: Destination of the whole speculative config (a JSON object).
SPEC_DEST = "speculative_config"
#: Words in a flag that evalrun does not know which may name a speculative setting.
SPECULATIVE_WORDS = re.compile(r"spec|draft|mtp|eagle|ngram|medusa|dflash|dspark", re.IGNORECASE)


@dataclass(frozen=True)
class Action:
    """One action of the parser.

    Attributes:
        options: its option strings (``("--speculative-config", "-sc")``).
        dest: the namespace attribute it sets.
        nargs: argparse's ``nargs`` (``None`` one value, ``0`` none, ``"?"``, ``"+"``, ``"*"``, N).
        negative: the option strings that set False (``BooleanOptionalAction``'s ``--no-``).
        type: ``"int"`` when argparse converts the value with ``int``, else ``"str"``.
    """

    options: tuple[str, ...]
    dest: str
    nargs: Any = None
    negative: tuple[str, ...] = ()
    type: str = "str"


@dataclass(frozen=True)
class ParserTable:
    """The table of one vLLM release's server parser.

    Attributes:
        vllm_version: the release it was read from.
        source: ``"installed"`` (walked in this process) or ``"snapshot"`` (:data:`SNAPSHOT`).
        allow_abbrev: argparse's ``allow_abbrev`` of the parser (unique prefixes accepted).
        actions: every action.
        speculative_keys: destination -> key of the speculative config it sets (vLLM's
            ``EngineArgs.create_speculative_config``: ``spec_method`` -> ``method``);
            :data:`SPEC_DEST` maps to ``""`` (the whole object).
    """

    vllm_version: str
    source: str
    allow_abbrev: bool
    actions: tuple[Action, ...]
    speculative_keys: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)

    def describe(self) -> str:
        """Where the table comes from, for the plan: ``vLLM 0.32.0's parser (snapshot ...)``."""
        if self.source == "snapshot":
            return (f"a snapshot of vLLM {self.vllm_version}'s server parser ({SNAPSHOT.name}, "
                    "python -m harness.config.vllm_parser --write); the pre-launch check re-reads "
                    "every command with the installed vLLM's own parser")
        return f"vLLM {self.vllm_version}'s server parser ({self.source})"

    def options_of(self, dest: str) -> list[str]:
        """Every option string whose action sets ``dest``."""
        return [o for a in self.actions if a.dest == dest for o in a.options]

    def as_json(self) -> dict:
        """The table as the snapshot file stores it."""
        return {"vllm_version": self.vllm_version, "allow_abbrev": self.allow_abbrev,
                "speculative_keys": dict(self.speculative_keys),
                "actions": [{"options": list(a.options), "dest": a.dest, "nargs": a.nargs,
                             "negative": list(a.negative), "type": a.type} for a in self.actions]}

    @classmethod
    def from_json(cls, doc: dict, source: str) -> ParserTable:
        """The inverse of :meth:`as_json`."""
        acts = tuple(Action(tuple(a["options"]), a["dest"], a.get("nargs"), tuple(a.get("negative", ())),
                            a.get("type", "str")) for a in doc["actions"])
        return cls(doc["vllm_version"], source, bool(doc.get("allow_abbrev", True)), acts,
                   dict(doc.get("speculative_keys", {})))


def table_from_parser(parser: argparse.ArgumentParser, vllm_version: str,
                      speculative_keys: Mapping[str, str], source: str = "installed") -> ParserTable:
    """Walk ``parser``'s actions into a :class:`ParserTable`.

    Args:
        parser: vLLM's server parser (or any argparse parser, e.g. one a test extends).
        vllm_version: the release it belongs to.
        speculative_keys: destination -> speculative-config key (:func:`speculative_keys_of`).
    """
    acts = []
    for a in parser._actions:  # argparse keeps every action here, aliases included
        if not a.option_strings:
            continue
        boolean = isinstance(a, argparse.BooleanOptionalAction)
        neg = tuple(o for o in a.option_strings if boolean and o.startswith("--no-"))
        acts.append(Action(tuple(a.option_strings), a.dest, a.nargs, neg, "int" if a.type is int else "str"))
    keys = {SPEC_DEST: "", **{d: k for d, k in speculative_keys.items()}}
    return ParserTable(vllm_version, source, parser.allow_abbrev, tuple(acts), keys)


def speculative_keys_of(create_speculative_config: Any) -> dict[str, str]:
    """Destination -> speculative-config key, read from the source of vLLM's
    ``EngineArgs.create_speculative_config`` (its ``("--spec-method", "method",
    self.spec_method)`` triples).

    Raises:
        ValueError: no such triple in the source (vLLM changed how shorthands feed the
            speculative config; the snapshot must not silently lose them).
    """
    src = inspect.getsource(create_speculative_config)
    found = re.findall(r'\(\s*"--[\w-]+"\s*,\s*"(\w+)"\s*,\s*self\.(\w+)\s*,?\s*\)', src)
    if not found:
        raise ValueError("no (flag, key, self.dest) triples in EngineArgs.create_speculative_config")
    return {dest: key for key, dest in found}


def installed_table() -> ParserTable:
    """The table of the vLLM installed for this interpreter (imports vLLM: seconds).

    Raises:
        ImportError: vLLM is not importable.
    """
    import vllm
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:  # releases before the launchers package
        from vllm.entrypoints.openai.cli_args import make_arg_parser  # type: ignore[no-redef,import-not-found,unused-ignore]
    parser = make_arg_parser(FlexibleArgumentParser())
    return table_from_parser(parser, str(getattr(vllm, "__version__", "unknown")),
                             speculative_keys_of(EngineArgs.create_speculative_config))


@lru_cache(maxsize=1)
def snapshot_table() -> ParserTable:
    """The committed snapshot (:data:`SNAPSHOT`)."""
    return ParserTable.from_json(json.loads(SNAPSHOT.read_text(encoding="utf-8")), "snapshot")


#: A table put in place of the snapshot by :func:`use_table` (innermost last).
_IN_USE: list[ParserTable] = []


#: ``EVALRUN_SERVER_PARSER=installed``: plan with the installed vLLM's own parser (imports
#: vLLM in evalrun's process, about 12 s) instead of the snapshot.
PARSER_ENV = "EVALRUN_SERVER_PARSER"


@lru_cache(maxsize=1)
def _installed_once() -> ParserTable:
    try:
        return installed_table()
    except ImportError as e:
        raise RuntimeError(f"{PARSER_ENV}=installed, but vLLM's server parser cannot be imported here: {e}") from e


def current_table() -> ParserTable:
    """The table the plan reads ``server_args`` with: the one set by :func:`use_table`; else
    the installed vLLM's parser when :data:`PARSER_ENV` is ``installed``; else the snapshot
    (building vLLM's parser imports vLLM in evalrun's process; the pre-launch check uses the
    installed one either way).

    Raises:
        RuntimeError: :data:`PARSER_ENV` asks for the installed parser and vLLM is not importable.
    """
    if _IN_USE:
        return _IN_USE[-1]
    if os.environ.get(PARSER_ENV, "").strip().lower() == "installed":
        return _installed_once()
    return snapshot_table()


@contextmanager
def use_table(table: ParserTable) -> Iterator[ParserTable]:
    """Read ``server_args`` with ``table`` inside the ``with`` block (e.g.
    :func:`installed_table`, or a parser a test extends)."""
    _IN_USE.append(table)
    try:
        yield table
    finally:
        _IN_USE.pop()


# --------------------------------------------------------------------------- resolving items


@dataclass(frozen=True)
class Hit:
    """One flag of an argv resolved to a parser action.

    Attributes:
        start, stop: the argv slice it covers (the flag and its values).
        spelled: the items as written, joined by spaces.
        option: the option string argparse resolves it to.
        dest: the action's destination.
        value: the value text (None for a flag without values; the items joined by
            spaces for several).
        keys: dotted JSON sub-keys (``-sc.method`` -> ``("method",)``); a last key ending in
            ``+`` appends to a list.
        head: the flag as ``FlexibleArgumentParser`` groups dotted keys (its normalised name).
        negative: the flag sets False (``--no-async-scheduling``).
    """

    start: int
    stop: int
    spelled: str
    option: str
    dest: str
    value: str | None
    keys: tuple[str, ...] = ()
    head: str = ""
    negative: bool = False
    type: str = "str"


@dataclass(frozen=True)
class Unknown:
    """An item that looks like a flag but is not one of the table's, or is ambiguous."""

    index: int
    item: str
    why: str


@lru_cache(maxsize=8)
def _rebuilt(table: ParserTable) -> tuple[argparse.ArgumentParser, dict[str, Action]]:
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=table.allow_abbrev)
    by_option: dict[str, Action] = {}
    for a in table.actions:
        kind: dict[str, Any] = {"action": "store_const", "const": True} if a.nargs == 0 else {"nargs": a.nargs}
        p.add_argument(*a.options, dest=a.dest, **kind)
        for o in a.options:
            by_option[o] = a
    return p, by_option


def _normalise(item: str) -> tuple[str, str | None, tuple[str, ...]]:
    """(flag name, inline value, dotted keys) as ``FlexibleArgumentParser`` sees ``item``."""
    key, eq, inline = item.partition("=")
    if key.startswith("--"):
        name, dot, rest = key[2:].partition(".")
        key = "--" + name.replace("_", "-") + dot + rest
    head, _, rest = key.partition(".")
    return head, inline if eq else None, tuple(rest.split(".")) if rest else ()


def _lookup(table: ParserTable, head: str) -> tuple[Action | None, str, str | None]:
    """(action, option string, why not found) by argparse's own lookup of ``head``."""
    parser, by_option = _rebuilt(table)
    try:
        found = parser._parse_optional(head)  # argparse's exact / prefix / ambiguity rules
    except SystemExit:
        return None, head, "ambiguous (several options start with it)"
    except argparse.ArgumentError as e:
        return None, head, str(e)
    if isinstance(found, list):  # Python >= 3.12.7: a list of (action, option, sep, arg)
        if len(found) > 1:
            return None, head, "ambiguous (" + ", ".join(t[1] for t in found) + ")"
        found = found[0] if found else None
    if not found or found[0] is None:
        return None, head, "not an option of this vLLM's server"
    option = found[1]
    return by_option.get(option), option, None


def _error_to_exit(parser: argparse.ArgumentParser) -> None:
    def err(message: str) -> None:
        raise SystemExit(message)
    parser.error = err  # type: ignore[assignment,method-assign]


def scan(argv: Sequence[str], table: ParserTable | None = None) -> tuple[list[Hit], list[Unknown]]:
    """Resolve every flag of ``argv`` with ``table`` (default :func:`current_table`).

    Values are consumed as argparse consumes them (``nargs``); an unknown flag consumes
    nothing (its value, if any, is left as a plain item).

    Returns:
        (the resolved flags in argv order, the items that look like flags but are not
        one of the table's or are ambiguous).
    """
    table = table or current_table()
    _error_to_exit(_rebuilt(table)[0])
    hits: list[Hit] = []
    unknown: list[Unknown] = []
    i = 0
    while i < len(argv):
        item = argv[i]
        if not item.startswith("-") or item in ("-", "--") or re.fullmatch(r"-\d+(\.\d*)?", item):
            i += 1
            continue
        if item.startswith("-O") and not item.startswith("--") and item != "-O":
            item = "--optimization-level=" + item[2:].removeprefix("=")  # vLLM's own -O3 rewrite
        head, inline, keys = _normalise(item)
        action, option, why = _lookup(table, head)
        if action is None:
            unknown.append(Unknown(i, item, why or "unknown"))
            i += 1
            continue
        stop, value = _values(argv, i, action, inline, keys)
        hits.append(Hit(i, stop, " ".join(argv[i:stop]), option, action.dest, value, keys, head,
                        option in action.negative, action.type))
        i = stop
    return hits, unknown


def _values(argv: Sequence[str], i: int, action: Action, inline: str | None,
            keys: tuple[str, ...]) -> tuple[int, str | None]:
    """(end of the flag's slice, its value) by ``nargs`` (a dotted key always takes one)."""
    if inline is not None:
        return i + 1, inline
    if keys:  # FlexibleArgumentParser takes the next item as a dotted key's value
        return (i + 2, argv[i + 1]) if i + 1 < len(argv) else (i + 1, None)

    def is_value(x: str) -> bool:
        return not x.startswith("-") or bool(re.fullmatch(r"-\d+(\.\d*)?", x)) or " " in x

    n = action.nargs
    if n == 0:
        return i + 1, None
    if n is None or n == "?" and i + 1 < len(argv) and is_value(argv[i + 1]):
        return (i + 2, argv[i + 1]) if i + 1 < len(argv) else (i + 1, None)
    if n == "?":
        return i + 1, None
    count = n if isinstance(n, int) else None
    j = i + 1
    while j < len(argv) and is_value(argv[j]) and (count is None or j - i - 1 < count):
        j += 1
    return j, " ".join(argv[i + 1:j]) if j > i + 1 else None


def speculative_doubts(argv: Sequence[str], table: ParserTable | None = None) -> list[str]:
    """Items of ``argv`` that may change speculation but that evalrun cannot read: an unknown
    or ambiguous flag whose name mentions a speculative word (:data:`SPECULATIVE_WORDS`), and
    vLLM's ``--config FILE`` (the parser pulls flags from that YAML file)."""
    table = table or current_table()
    hits, unknown = scan(argv, table)
    out = [f"{u.item} ({u.why})" for u in unknown if SPECULATIVE_WORDS.search(u.item)]
    out += [f"{h.spelled} (vLLM reads more server flags from that YAML file)" for h in hits if h.dest == "config"]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m harness.config.vllm_parser [--write]``: print (or write to
    :data:`SNAPSHOT`) the installed vLLM's parser table."""
    args = list(sys.argv[1:] if argv is None else argv)
    doc = json.dumps(installed_table().as_json(), indent=1, sort_keys=True) + "\n"
    if "--write" in args:
        SNAPSHOT.write_text(doc, encoding="utf-8")
        print(f"wrote {SNAPSHOT}")
    else:
        print(doc, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
