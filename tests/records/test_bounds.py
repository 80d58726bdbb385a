"""The bounds every record type checks (:mod:`harness.records.bounds`): shares in
[0, 1], counts between 0 and their totals, key by key for per-pipeline maps."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from harness.records.bounds import Bounded, bound_problems


class _Scores(Bounded, BaseModel):
    rate: float | None = None
    accuracy: dict[str, float | None] = {}
    interval: tuple[float, float] | None = None
    correct: dict[str, int] = {}
    scored: dict[str, int] = {}
    errors: int = 0
    total: int = 0

    _RATES = ("rate", "accuracy", "interval")
    _WITHIN = (("correct", "scored"), ("errors", "total"), ("scored", "total"))


def test_values_within_bounds_build():
    s = _Scores(rate=1.0, accuracy={"a": 0.0, "b": None}, interval=(0.0, 1.0), correct={"a": 2}, scored={"a": 3},
                errors=0, total=3)
    assert bound_problems(s, s._RATES, s._WITHIN) == []


@pytest.mark.parametrize("fields, said", [
    ({"rate": 1.5}, "rate 1.5 is not a share in [0, 1]"),
    ({"accuracy": {"a": -0.25}}, "accuracy -0.25 is not a share in [0, 1]"),
    ({"interval": (0.5, 1.25)}, "interval 1.25 is not a share in [0, 1]"),
    ({"correct": {"a": 4}, "scored": {"a": 3}, "total": 3}, "correct['a'] 4 is larger than scored['a'] 3"),
    ({"errors": -1}, "errors -1 is negative"),
    ({"errors": 2, "total": 1}, "errors 2 is larger than total 1"),
    ({"scored": {"a": 5}, "total": 4}, "scored['a'] 5 is larger than total 4"),
    ({"rate": float("nan")}, "finite number"),
])
def test_an_impossible_value_is_refused_naming_the_field(fields, said):
    with pytest.raises(ValidationError, match=said.replace("[", r"\[").replace("]", r"\]")):
        _Scores(**fields)


def test_unknown_fields_are_refused():
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        _Scores(colour="red")
