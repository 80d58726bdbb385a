"""Gate family "the engine ran as asked": ``variant_effective``."""

from __future__ import annotations

from typing import Any, Literal

from harness.config.gates.registry import GateBase, GateKind, Place, gate


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

    kind: Literal[GateKind.VARIANT_EFFECTIVE] = GateKind.VARIANT_EFFECTIVE
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
