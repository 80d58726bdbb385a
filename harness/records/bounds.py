"""Bounds of a recorded value: shares in [0, 1] and counts within their totals, checked
by one validator every record type inherits (:class:`Bounded`)."""

from __future__ import annotations

from typing import ClassVar, cast

from pydantic import BaseModel, ConfigDict, model_validator


def _values(x: object) -> list[float]:
    """The numbers of a field's value: itself, a mapping's values, an interval's ends."""
    if isinstance(x, dict):
        return [v for item in x.values() for v in _values(item)]
    if isinstance(x, (tuple, list)):
        return [v for item in x for v in _values(item)]
    return [] if x is None else [cast(float, x)]


def bound_problems(obj: BaseModel, rates: tuple[str, ...] = (),
                   within: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """What makes a measured value impossible: a share outside [0, 1], or a count below 0
    or above its total.

    Args:
        obj: the record.
        rates: fields that are shares (a number, a mapping of numbers or intervals; None
            allowed).
        within: ``(count, total)`` field pairs: ``0 <= count <= total``; either may be a
            mapping (pipeline -> count), compared key by key, or a number every value of
            the other is compared with.

    Returns:
        One message per problem, naming the field and the numbers (empty when none).
    """
    out = []
    for name in rates:
        bad = [v for v in _values(getattr(obj, name)) if not 0.0 <= v <= 1.0]
        if bad:
            out.append(f"{name} {bad[0]!r} is not a share in [0, 1]")
    for count, total in within:
        c, t = getattr(obj, count), getattr(obj, total)
        pairs = ([(k, v, t.get(k) if isinstance(t, dict) else t) for k, v in c.items()] if isinstance(c, dict)
                 else [(k, c, v) for k, v in t.items()] if isinstance(t, dict) else [(None, c, t)])
        for key, cv, tv in pairs:
            at = f"[{key!r}]" if key is not None else ""
            if cv is not None and cv < 0:
                out.append(f"{count}{at if isinstance(c, dict) else ''} {cv!r} is negative")
            elif cv is not None and tv is not None and cv > tv:
                out.append(f"{count}{at if isinstance(c, dict) else ''} {cv!r} is larger than "
                           f"{total}{at if isinstance(t, dict) else ''} {tv!r}")
    return out


class Bounded(BaseModel):
    """Base of every record type (measures, run record, baselines): unknown fields are
    errors (a foreign or newer file is refused), no number is NaN or infinite, and the
    shares (``_RATES``) and counts bounded by totals (``_WITHIN``) a subclass names are
    checked (:func:`bound_problems`) wherever the type is built or read.

    A subclass module declares ``class _Model(Bounded, BaseModel)`` (BaseModel named
    directly, so linters see a pydantic model) and adds its own ``model_config``.

    Raises:
        pydantic.ValidationError: a non-finite number, a share outside [0, 1], a count
            below 0 or above its total (the message names the field and the numbers).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    _RATES: ClassVar[tuple[str, ...]] = ()
    _WITHIN: ClassVar[tuple[tuple[str, str], ...]] = ()

    @model_validator(mode="after")
    def _within_bounds(self) -> Bounded:
        problems = bound_problems(self, self._RATES, self._WITHIN)
        if problems:
            raise ValueError("; ".join(problems))
        return self
