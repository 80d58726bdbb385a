"""A table cell's text in every report: numbers with a fixed count of decimals, intervals."""

from __future__ import annotations

from collections.abc import Sequence


def fmt(x: object, digits: int = 3) -> str:
    """A value for a table: ``-`` for None, floats with ``digits`` decimals."""
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def ci_text(ci: Sequence[float] | None) -> str:
    """`` [low, high]`` with 3 decimals, ``""`` when there is no interval."""
    if not ci:
        return ""
    return f" [{ci[0]:.3f}, {ci[1]:.3f}]"
