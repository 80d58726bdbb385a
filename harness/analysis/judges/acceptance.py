"""Judges of the family "acceptance length" (:mod:`harness.config.gates.acceptance`): ``drafts_observed``,
``min_acceptance_length``, ``max_acceptance_length_drop``, ``baseline_acceptance_length_drop``."""

from __future__ import annotations

from harness.analysis.judges import common
from harness.analysis.judges.common import judges, no_stored, result, stored_task
from harness.analysis.measurements import Measurements
from harness.config import gates as G
from harness.records.measures import SpecDecodeRecord
from harness.records.run_record import GateResult


def _drafts(g: G.Gate, m: Measurements) -> SpecDecodeRecord | GateResult:
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


@judges(G.DraftsObserved)
def judge_drafts_observed(g: G.DraftsObserved, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """``drafts_observed``: a speculative variant reported at least one draft."""
    sm = _drafts(g, m)
    if isinstance(sm, GateResult):
        return sm
    # counters are integral counts (prometheus gives floats): report an integer
    return result(g, round(sm.drafts), g.limit, True, f"{sm.drafts:.0f} drafts, {sm.draft_tokens:.0f} draft tokens")



@judges(G.MinAcceptanceLength)
def judge_min_acceptance_length(g: G.MinAcceptanceLength, m: Measurements,
                                adjusted_p: float | None = None) -> GateResult:
    """``min_acceptance_length``: mean acceptance length >= limit; no drafts fails."""
    sm = _drafts(g, m)
    if isinstance(sm, GateResult):
        return sm
    mal = sm.mean_acceptance_length
    assert mal is not None, "a number when drafts > 0 (_drafts)"
    ok = mal >= g.limit
    return result(
        g, mal, g.limit, ok,
        f"mean acceptance length {mal:.3f} (1 + {sm.accepted_tokens:.0f}/{sm.drafts:.0f}) vs minimum {g.limit}",
    )



@judges(G.MaxAcceptanceLengthDrop)
def judge_max_acceptance_length_drop(g: G.MaxAcceptanceLengthDrop, m: Measurements,
                                     adjusted_p: float | None = None) -> GateResult:
    """``max_acceptance_length_drop``: baseline - candidate mean acceptance length <= limit
    (:func:`drop_verdict`, no significance test); missing on either side fails."""
    a, b = m.task(g.baseline, g.task).spec, m.task(g.variant, g.task).spec
    if a is None or b is None or a.mean_acceptance_length is None or b.mean_acceptance_length is None:
        return result(g, None, g.limit, False, "mean acceptance length missing on one side (no drafts?)")
    drop = a.mean_acceptance_length - b.mean_acceptance_length
    return result(
        g, drop, g.limit, common.drop_verdict(drop, g.limit).passed,
        f"mean acceptance length {g.baseline} {a.mean_acceptance_length:.3f} -> {g.variant} "
        f"{b.mean_acceptance_length:.3f}" + rise_note(drop, g.limit),
    )


def rise_note(drop: float, limit: float) -> str:
    """``"; note: ..."`` when the mean acceptance length ROSE by more than the gate's band
    (``-drop > limit``): reported beside the drop gate, never failing it (an improved
    drafter rises too), because a rise can be a bug as well (miscounted drafts or accepted
    tokens, a variant that should accept alike); else ``""``."""
    if -drop <= limit:
        return ""
    return (f"; note: mean acceptance length ROSE by {-drop:.3f} tokens, beyond the band +-{limit}: a rise can be a "
            "bug too (drafts or accepted tokens miscounted, or variants that should accept alike); not failed")



@judges(G.BaselineAcceptanceLengthDrop)
def judge_baseline_acceptance_length_drop(g: G.BaselineAcceptanceLengthDrop, m: Measurements,
                                          adjusted_p: float | None = None) -> GateResult:
    """``baseline_acceptance_length_drop``: stored - current mean acceptance length <=
    limit (:func:`drop_verdict`); a baseline without one is NOT RUN, none now fails."""
    bt, label = stored_task(g, m)
    if bt is None:
        return no_stored(g, label)
    base_mal = bt.spec_decode.mean_acceptance_length if bt.spec_decode else None
    sm = m.task(g.variant, g.task).spec
    if base_mal is None:
        return result(g, None, g.limit, None, "not run: the baseline has no mean acceptance length", baseline=label)
    if sm is None or sm.mean_acceptance_length is None:
        return result(g, None, g.limit, False, f"mean acceptance length missing now (baseline {base_mal:.3f})",
                       baseline=label)
    drop = base_mal - sm.mean_acceptance_length
    ok = common.drop_verdict(drop, g.limit).passed
    ci = bt.mean_acceptance_length_ci
    return result(
        g, drop, g.limit, ok,
        f"mean acceptance length baseline {base_mal:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
        + f" -> now {sm.mean_acceptance_length:.3f}: drop {drop:.3f} " + ("<=" if ok else ">") + f" {g.limit}"
        + rise_note(drop, g.limit),
        baseline=label,
    )
