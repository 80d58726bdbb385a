"""Judges of the family "the engine ran as asked" (:mod:`harness.config.gates.engine`): ``variant_effective``."""

from __future__ import annotations

from harness.analysis.judges.common import judges, result
from harness.analysis.measurements import Measurements
from harness.config import gates as G
from harness.records.run_record import GateResult


@judges(G.VariantEffective)
def judge_variant_effective(g: G.VariantEffective, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """``variant_effective``: every requested setting took effect, or every mismatch is
    declared expected on this platform (``expected_effective``), and the model runner
    passes :func:`runner_check`. Facts that could not be read fail it (the check that
    the variant ran as asked must not vanish), unless the variant declares
    ``engine_facts: not_reported``: then NOT RUN."""
    vm = m.variant(g.variant)
    eff = vm.effectiveness
    if eff is None:
        why = vm.engine_facts_error or "the effective configuration was not read"
        if g.engine_facts == "not_reported":
            return result(g, None, None, None, f"not run: the config declares that the engine cannot "
                           f"report its effective configuration (engine_facts: not_reported); {why}")
        return result(g, None, None, False, f"cannot tell whether the variant ran as asked: {why}")
    runner_fail, runner_note = runner_check(g, m)
    if runner_fail:
        return result(g, 0.0, None, False, runner_fail)
    if eff.effective:
        return result(g, 1.0, None, True, "every requested setting is effective" + runner_note)
    mism = ", ".join(
        f"{k}: requested {v['requested']}, effective {v['effective']}" for k, v in eff.mismatches.items()
    )
    if eff.expected_on_platform:
        return result(g, 0.0, None, True, f"not effective, declared expected on this platform ({mism})"
                       + runner_note)
    return result(g, 0.0, None, False, f"variant did not run as asked: {mism}")


def runner_check(g: G.VariantEffective, m: Measurements) -> tuple[str, str]:
    """``(failure, note)`` of the model-runner part of ``variant_effective``.

    Fails (a non-empty ``failure``) when the variant's runner is ``unknown`` (fails
    closed like any unreadable engine fact), differs from its ``model_runner``, or
    differs from the runner of a variant it is compared with (``same_runner_as``; a
    comparison with ``allow_mixed_runners`` is not listed there). ``note`` names the
    runner for the passing detail. Nothing is checked when runner facts were not
    collected (``m.runners_collected`` false).
    """
    if not m.runners_collected:
        return "", ""
    f = m.variant(g.variant).runner
    if f is None or f.runner == "unknown":
        return ((f"model runner unknown: {f.detail if f else 'not recorded'} (a variant whose runner is not "
                "known cannot be compared with another; load evalrun's plugin in the server's environment)"), "")
    if g.model_runner is not None and f.runner != g.model_runner:
        return ((f"model runner: requested {g.model_runner} (VLLM_USE_V2_MODEL_RUNNER), the engine ran "
                f"{f.runner} ({f.source}: {f.detail})"), "")
    peers = [(peer, m.variant(peer).runner) for peer in g.same_runner_as]
    bad = [(peer, pf) for peer, pf in peers if pf is not None and pf.runner not in ("unknown", f.runner)]
    if bad:
        others = "; ".join(f"{peer} ran {pf.runner} ({pf.source}: {pf.detail})" for peer, pf in bad)
        return ((f"model runners differ between compared variants: {g.variant} ran {f.runner} ({f.source}: "
                f"{f.detail}); {others}: their differences are two code paths, not speculative decoding "
                "(set allow_mixed_runners: true on the comparison to accept it)"), "")
    return "", f"; model runner {f.runner} ({f.source})"
