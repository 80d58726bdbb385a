"""What the acceptance-length kinds share (``drafts_observed``, ``min_acceptance_length``,
``max_acceptance_length_drop``, ``baseline_acceptance_length_drop``): the speculative
metrics with at least one draft, and the note on a rise of the mean acceptance length."""

from __future__ import annotations

from harness.analysis.gatekinds._common import result
from harness.analysis.measurements import Measurements
from harness.config.gates.registry import GateBase
from harness.records.measures import SpecDecodeRecord
from harness.records.run_record import GateResult


def drafts(g: GateBase, m: Measurements) -> SpecDecodeRecord | GateResult:
    """The gate's speculative metrics with at least one draft (so its ratios are numbers),
    or the failing result."""
    tm = m.task(g.variant, g.task)
    sm = tm.spec
    if sm is None:
        err = tm.spec_error or "no speculative-decoding metrics"
        return result(g, None, g.limit, False, f"speculative metrics missing: {err}")
    if sm.drafts <= 0:
        return result(g, 0.0, g.limit, False, "no drafts observed: speculative decoding did not run")
    return sm


def rise_note(drop: float, limit: float) -> str:
    """``"; note: ..."`` when the mean acceptance length ROSE by more than the gate's band
    (``-drop > limit``): reported beside the drop gate, never failing it (an improved
    drafter rises too), because a rise can be a bug as well (miscounted drafts or accepted
    tokens, a variant that should accept alike); else ``""``."""
    if -drop <= limit:
        return ""
    return (f"; note: mean acceptance length ROSE by {-drop:.3f} tokens, beyond the band +-{limit}: a rise can be a "
            "bug too (drafts or accepted tokens miscounted, or variants that should accept alike); not failed")
