"""The judges of every declared gate kind, one module per family (the family modules of
:mod:`harness.config.gates` have the same names), bound by kind through
:func:`.common.judges`. Importing this package imports every family and checks that each
declared kind has its judge (:func:`.common.check_judged`): a kind without one is an
import error, never a skipped gate."""

from __future__ import annotations

from harness.analysis.judges import (
    acceptance,
    accuracy,
    baseline,
    engine,
    output_match,
    position,
    requests,
    sampled,
    shape,
)
from harness.analysis.judges.common import JUDGES, check_judged

check_judged()

__all__ = ["JUDGES", "acceptance", "accuracy", "baseline", "check_judged", "engine", "output_match", "position",
           "requests", "sampled", "shape"]
