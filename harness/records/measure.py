"""The base of every measured type: frozen, bounded, fields by keyword or by position.

Every measured noun (:mod:`harness.records.measures`, :mod:`harness.records.engine_measures`)
derives from :class:`Measure`; the run record stores them as they are.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from harness.records.bounds import Bounded

#: A two-sided interval ``[low, high]`` (fractions or tokens, as the field says).
Interval = tuple[float, float]


class Measure(Bounded, BaseModel):
    """Base of every measured type: frozen, unknown fields are errors (a foreign or newer
    file is refused), no number is NaN or infinite, fields by keyword or positionally in
    declaration order. A subclass names its shares (``_RATES``) and its counts bounded by
    totals (``_WITHIN``): a value outside them is refused wherever the type is built or
    read (:class:`harness.records.bounds.Bounded`).

    Raises:
        TypeError: more positional arguments than fields, or a field given twice.
        pydantic.ValidationError: a non-finite number, a share outside [0, 1], a count
            above its total.
    """

    model_config = ConfigDict(frozen=True)

    def __init__(self, *args: object, **data: object) -> None:
        if args:
            names = list(type(self).model_fields)
            if len(args) > len(names):
                raise TypeError(f"{type(self).__name__} takes at most {len(names)} positional arguments")
            for name, value in zip(names, args):
                if name in data:
                    raise TypeError(f"{type(self).__name__}: {name!r} given twice")
                data[name] = value
        super().__init__(**data)
