"""Number grammar for answers in free text: one regular expression, one parser.

A *number token* is, in order:

* an optional sign (``-``, ``+`` or the Unicode minus ``\u2212``), counted only when
  it is not glued to a preceding letter or digit (so ``3-4`` is the two numbers 3
  and 4, not 3 and -4);
* an optional currency symbol (``$``, ``\u20ac``, ``\u00a3``, ``\u00a5``), optionally
  followed by one space;
* an integer part: either digits grouped by commas in threes (``1,000,000``) or a
  plain run of digits (``08``, ``5600``);
* an optional fractional part ``.digits`` (``18.00``);
* an optional percent sign, optionally after one space (``50 %``); it is dropped,
  the value is kept (GSM8K writes "50%" answers as ``#### 50``).

A token never starts right after a digit and never ends right before a digit or
before ``.``/``,`` followed by a digit: ``5,6000`` or ``1.2.3`` are not read as one
number, and a sentence-final ``72.`` or a list ``72, 73`` reads as 72. Only ASCII
digits count.

The value of a token is a :class:`decimal.Decimal`, so ``18.00 == 18`` and
``3.5 != 3`` hold exactly, without float rounding.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

MINUS_SIGNS = "-\u2212"
"""Characters read as a minus sign: ASCII hyphen-minus and U+2212 MINUS SIGN."""

NUMBER_RE = re.compile(
    r"""
    (?:(?<![0-9A-Za-z])(?P<sign>[-+\u2212]))?    # sign, not glued to a word or digit
    (?:(?P<currency>[$\u20ac\u00a3\u00a5])[ ]?)? # currency symbol
    (?<![0-9])                                   # never start inside a digit run
    (?P<int>[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)     # 1,000,000 or 1000000 or 08
    (?:\.(?P<frac>[0-9]+))?                      # .00
    (?![.,]?[0-9])                               # never stop inside a number
    (?:[ ]?(?P<percent>%))?                      # 50% (sign dropped, value kept)
    """,
    re.VERBOSE,
)
"""Compiled number grammar (see the module docstring); groups ``sign``, ``currency``,
``int``, ``frac``, ``percent``."""


def _value(m: re.Match[str]) -> Decimal:
    """Decimal value of a :data:`NUMBER_RE` match."""
    digits = m.group("int").replace(",", "")
    if m.group("frac"):
        digits += "." + m.group("frac")
    negative = (m.group("sign") or "") in tuple(MINUS_SIGNS)
    return -Decimal(digits) if negative else Decimal(digits)


def find_numbers(text: str) -> list[tuple[str, Decimal]]:
    """All number tokens of ``text``, left to right.

    Args:
        text: any string.

    Returns:
        ``[(span_text, value), ...]`` where ``span_text`` is the token exactly as
        written (e.g. ``"$29.00"``, ``"-3"``, ``"5,600"``) and ``value`` its
        :class:`~decimal.Decimal` value; ``[]`` when there is none.
    """
    return [(m.group(0), _value(m)) for m in NUMBER_RE.finditer(text)]


def parse_number(s: str | None) -> Decimal | None:
    """Value of the number at the start of ``s`` (after surrounding whitespace).

    Handles thousands separators (``"5,600"`` -> 5600), currency (``"$29.00"`` -> 29),
    a percent sign (``"50%"`` -> 50), trailing punctuation (``"72."``, ``"72,"``),
    decimals equal to integers (``"18.00"`` == 18), signs (``"-3"``, ``"+3"``,
    ``"\u22123"``), leading zeros (``"08"`` -> 8) and words after the number
    (``"72 clips"`` -> 72), all through the single grammar :data:`NUMBER_RE`.

    Args:
        s: text starting with a number, e.g. a GSM8K gold field or an extracted
            answer; ``None`` is accepted and gives ``None``.

    Returns:
        The exact :class:`~decimal.Decimal` value, or ``None`` when ``s`` does not
        start with a number (``"abc"``, ``""``, ``"1,00"``). Never raises.
    """
    if s is None:
        return None
    m = NUMBER_RE.match(s.strip())
    if m is None:
        return None
    try:
        return _value(m)
    except InvalidOperation:  # pragma: no cover - the grammar only admits valid digits
        return None
