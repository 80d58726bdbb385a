"""Selecting configs of a model list by name, as ``pytest -k`` selects tests.

``evalrun --config LIST -k EXPR`` and the pytest plugin's test ids both use the
config's file stem (``Nemotron-3-Super-120B-A12B-BF16`` for
``configs/Nemotron-3-Super-120B-A12B-BF16.yaml``), the names vLLM's own GSM8K test
gives its parametrized items.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.config.model_list import load_configs, load_model_list, read_model_list
from harness.config.schema import ConfigError, ModelConfig

_TOKEN = re.compile(r"\s*(\(|\)|[\w:+\-.\[\]\\/]+)")


def _either(a: Callable[[str], bool], b: Callable[[str], bool]) -> Callable[[str], bool]:
    return lambda s: a(s) or b(s)


def _both(a: Callable[[str], bool], b: Callable[[str], bool]) -> Callable[[str], bool]:
    return lambda s: a(s) and b(s)


def compile_keyword(expr: str) -> Callable[[str], bool]:
    """Compile a ``-k`` expression into a predicate on names.

    Grammar and meaning as pytest's ``-k`` (docs "Using -k expr to select tests"):
    words joined by ``and``, ``or``, ``not`` and parentheses; a word matches a name
    containing it, case-insensitively.

    Raises:
        ConfigError: naming the expression and position when it cannot be parsed.
    """
    tokens: list[str] = []
    pos = 0
    text = expr.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ConfigError(f"-k {expr!r}: cannot read the expression at position {pos}: {text[pos:]!r}")
        tokens.append(m.group(1))
        pos = m.end()
    if not tokens:
        raise ConfigError("-k: empty expression")
    i = 0

    def peek() -> str | None:
        return tokens[i] if i < len(tokens) else None

    def take() -> str:
        nonlocal i
        i += 1
        return tokens[i - 1]

    def p_or() -> Callable[[str], bool]:
        left = p_and()
        while peek() == "or":
            take()
            right, l0 = p_and(), left
            left = _either(l0, right)
        return left

    def p_and() -> Callable[[str], bool]:
        left = p_not()
        while peek() == "and":
            take()
            right, l0 = p_not(), left
            left = _both(l0, right)
        return left

    def p_not() -> Callable[[str], bool]:
        if peek() == "not":
            take()
            inner = p_not()
            return lambda s: not inner(s)
        if peek() == "(":
            take()
            inner = p_or()
            if peek() != ")":
                raise ConfigError(f"-k {expr!r}: missing ')'")
            take()
            return inner
        word = peek()
        if word is None or word in ("and", "or", ")"):
            raise ConfigError(f"-k {expr!r}: expected a name, got {word or 'the end'}")
        take()
        w = word.lower()
        return lambda s: w in s.lower()

    pred = p_or()
    if i != len(tokens):
        raise ConfigError(f"-k {expr!r}: unexpected {tokens[i]!r}")
    return pred


def select_paths(paths: Sequence[Path], keyword: str | None = None, names: Sequence[str] | None = None) -> list[Path]:
    """The config files of a list whose stem matches ``keyword`` (``-k``) and, when
    ``names`` is given, is one of them exactly (``--select``).

    Raises:
        ConfigError: a ``--select`` name is not in the list (naming the available
            stems), or the expression is bad.
    """
    out = list(paths)
    if names:
        stems = {p.stem for p in out}
        missing = [n for n in names if n not in stems]
        if missing:
            raise ConfigError(f"--select {', '.join(missing)}: not in the list (configs: {', '.join(sorted(stems))})")
        out = [p for p in out if p.stem in names]
    if keyword:
        pred = compile_keyword(keyword)
        out = [p for p in out if pred(p.stem)]
    return out


def load_selected(list_path: str | Path, keyword: str | None = None,
                  names: Sequence[str] | None = None) -> list[ModelConfig]:
    """Read a model list, keep the configs selected by :func:`select_paths`, load them.

    Only selected configs are loaded, so a broken config elsewhere in the list does
    not stop a selected one.

    Raises:
        ConfigError: from :func:`read_model_list`, :func:`load_config` (all errors
            collected), or when nothing is selected (naming the list and the stems).
    """
    if not keyword and not names:
        return load_model_list(list_path)
    paths = read_model_list(list_path)
    chosen = select_paths(paths, keyword, names)
    if not chosen:
        raise ConfigError(
            f"{list_path}: no config selected by -k {keyword!r} (configs: {', '.join(p.stem for p in paths)})")
    return load_configs(chosen, list_path)
