"""harness.tasks.numbers: the number parser and finder the GSM8K pipelines share.

Expected values are written by hand.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from harness.tasks.numbers import find_numbers, parse_number


def test_millions_with_separators():
    assert parse_number("1,000,000") == Decimal(1000000)
    assert parse_number("1,000,000") == 1_000_000


@pytest.mark.parametrize(
    "text, expected",
    [
        ("5,600", Decimal(5600)),
        ("$29.00", Decimal(29)),
        ("50%", Decimal(50)),
        ("50 %", Decimal(50)),
        ("72.", Decimal(72)),
        ("72,", Decimal(72)),
        ("18.00", Decimal(18)),
        ("-3", Decimal(-3)),
        ("+3", Decimal(3)),
        ("\u22123", Decimal(-3)),  # U+2212 MINUS SIGN
        ("-$4", Decimal(-4)),
        ("08", Decimal(8)),
        ("72 clips", Decimal(72)),
        ("  42  ", Decimal(42)),
        ("0.25", Decimal("0.25")),
        ("$1,000.50", Decimal("1000.5")),
    ],
)
def test_parse_number(text, expected):
    assert parse_number(text) == expected


@pytest.mark.parametrize("text", ["", "   ", "abc", "clips 72", "1,00", None, "#### 5"])
def test_parse_number_none(text):
    assert parse_number(text) is None


def test_find_numbers_boundaries():
    # a hyphen between digits is a range, not a minus sign
    assert [v for _, v in find_numbers("3-4 days")] == [Decimal(3), Decimal(4)]
    assert [t for t, _ in find_numbers("It was (-5) then $7.")] == ["-5", "$7"]
    assert find_numbers("nothing here") == []
