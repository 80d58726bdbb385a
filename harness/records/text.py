"""Text made valid for the formats evalrun writes: one sanitiser for JUnit, HTML,
Markdown and JSON.

Text from outside evalrun (completions, server log tails, error messages) may hold
anything: terminal colour codes (``FORCE_COLOR`` is common in CI), NUL and other
control characters, lone UTF-16 surrogates (a JSON answer may carry ``"\\ud800"``,
which cannot be encoded as UTF-8), very long lines and markup.

* :func:`clean_text` (JUnit, HTML, Markdown): ANSI escape sequences are removed; every
  character XML 1.0 does not allow (``Char ::= #x9 | #xA | #xD | [#x20-#xD7FF] |
  [#xE000-#xFFFD] | [#x10000-#x10FFFF]``, W3C XML 1.0 section 2.2) becomes U+FFFD, so
  a reader sees that something was there. Markup is escaped by each writer (XML by
  ElementTree, HTML and Markdown cells by :func:`html.escape`), after this.
* :func:`clean_json` (``run.json``, samples): only lone surrogates become U+FFFD; JSON
  escapes control characters itself, so the evidence is kept as it came.
"""

from __future__ import annotations

import re

from harness.config.schema import JsonValue

__all__ = ["REPLACEMENT", "strip_ansi", "clean_text", "valid_unicode", "clean_json", "clip"]

REPLACEMENT = "\ufffd"

#: ECMA-48 escape sequences: CSI (``ESC [ ... final``), OSC (``ESC ] ... BEL|ST``), and
#: two-character escapes (``ESC @`` .. ``ESC _``).
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
#: Characters XML 1.0 forbids (surrogates included: alone they are not characters).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_SURROGATE = re.compile("[\ud800-\udfff]")



def strip_ansi(text: str) -> str:
    """``text`` without ANSI / ECMA-48 escape sequences (colours, cursor moves, titles)."""
    return _ANSI.sub("", text)


def clean_text(text: object) -> str:
    """``str(text)`` made valid for XML 1.0, HTML and Markdown: escape sequences removed,
    every other forbidden character (C0 controls but tab, newline and carriage return;
    lone surrogates; U+FFFE, U+FFFF) replaced with U+FFFD. Markup is not escaped here."""
    return _NOT_XML.sub(REPLACEMENT, strip_ansi("" if text is None else str(text)))


def valid_unicode(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD (encodable as UTF-8)."""
    return _SURROGATE.sub(REPLACEMENT, text)


def clean_json(obj: JsonValue) -> JsonValue:
    """A copy of a JSON value (dicts, lists, strings, numbers) whose strings, keys
    included, are :func:`valid_unicode`; other values unchanged."""
    if isinstance(obj, str):
        return valid_unicode(obj)
    if isinstance(obj, dict):
        return {clean_json(k) if isinstance(k, str) else k: clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(x) for x in obj]
    return obj


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, saying how many were dropped."""
    if len(text) <= limit:
        return text
    return text[:limit] + f" ... [{len(text) - limit} more characters]"
