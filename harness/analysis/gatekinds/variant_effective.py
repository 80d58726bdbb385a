"""Gate kind ``variant_effective``: per variant, the engine ran as asked (or the difference is declared
expected) and its model runner is known, the one asked for and its peers'."""

from __future__ import annotations

from typing import Any, Literal

from harness.analysis.gatekinds._common import result
from harness.analysis.measurements import Measurements
from harness.config.gates.registry import GateBase, Place, gate
from harness.records.run_record import GateResult


@gate(scope="variant", order=10, settings=("expected_effective", "engine_facts", "model_runner", "allow_mixed_runners"),
      doc="the engine ran as asked (or the difference is declared expected), its model runner is known, is the one "
          "asked for (`model_runner`), and is the runner of every variant it is compared with (unless the "
          "comparison sets `allow_mixed_runners: true`)")
class VariantEffective(GateBase):
    """The engine's effective configuration matches what the variant asked for;
    ``expected_effective`` lists settings a platform is known to override (declared
    in the config), which then pass with a note. Facts that cannot be read fail it,
    unless ``engine_facts`` is ``not_reported`` (the config declares the engine cannot
    report them): then it is NOT RUN."""

    kind: Literal["variant_effective"] = "variant_effective"
    op: Literal["=="] = "=="
    expected_effective: dict[str, Any] | None = None
    engine_facts: Literal["required", "not_reported"] = "required"
    #: ``v1`` / ``v2`` when the variant asks for a model runner, else None.
    model_runner: Literal["v1", "v2"] | None = None
    #: the variants it is compared with that must have run the same model runner (a
    #: comparison with ``allow_mixed_runners`` leaves its pair out).
    same_runner_as: tuple[str, ...] = ()

    @classmethod
    def plan(cls, at: Place) -> VariantEffective:
        """Every variant; its peers are the variants of its comparisons without ``allow_mixed_runners``."""
        vname, v = at.variant, at.variant_spec
        peers = [x for comp in at.config.comparisons if not comp.allow_mixed_runners
                 for x in ((comp.candidate,) if comp.baseline == vname else (comp.baseline,)
                           if comp.candidate == vname else ())]
        return cls.at(at, expected_effective=v.expected_effective, engine_facts=v.engine_facts,
                      model_runner=v.model_runner, same_runner_as=tuple(dict.fromkeys(peers)),
                      description="the engine's effective configuration matches what the variant asked for")

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """``variant_effective``: every requested setting took effect, or every mismatch is
        declared expected on this platform (``expected_effective``), and the model runner
        passes :func:`runner_check`. Facts that could not be read fail it (the check that
        the variant ran as asked must not vanish), unless the variant declares
        ``engine_facts: not_reported``: then NOT RUN."""
        vm = m.variant(self.variant)
        eff = vm.effectiveness
        if eff is None:
            why = vm.engine_facts_error or "the effective configuration was not read"
            if self.engine_facts == "not_reported":
                return result(self, None, None, None, f"not run: the config declares that the engine cannot "
                               f"report its effective configuration (engine_facts: not_reported); {why}")
            return result(self, None, None, False, f"cannot tell whether the variant ran as asked: {why}")
        runner_fail, runner_note = runner_check(self, m)
        if runner_fail:
            return result(self, 0.0, None, False, runner_fail)
        if eff.effective:
            return result(self, 1.0, None, True, "every requested setting is effective" + runner_note)
        mism = ", ".join(
            f"{k}: requested {v['requested']}, effective {v['effective']}" for k, v in eff.mismatches.items()
        )
        if eff.expected_on_platform:
            return result(self, 0.0, None, True, f"not effective, declared expected on this platform ({mism})"
                           + runner_note)
        return result(self, 0.0, None, False, f"variant did not run as asked: {mism}")


def runner_check(g: VariantEffective, m: Measurements) -> tuple[str, str]:
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
