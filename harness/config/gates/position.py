"""Gate family "acceptance per draft position": ``max_position_acceptance_drop`` (between
two speculative variants with the same speculative config) and
``baseline_position_acceptance_drop`` (against the stored baseline)."""

from __future__ import annotations

from typing import Literal

from harness.config.gates.registry import GateBase, GateKind, Place, gate

_SETTINGS = ("position_acceptance_rtol", "position_acceptance_alpha")


@gate(scope="comparison", order=50, reads_generation=True, settings=_SETTINGS,
      doc="between two speculative variants with the same speculative config (`spec_sync -> spec_async`, which "
          "must accept alike): per draft position i, the candidate's acceptance rate accepted_per_pos[i] / drafts "
          "is not both below `(1 - position_acceptance_rtol)` x the baseline's **and** significantly lower; a "
          "failure names the position and both rates (\"Per-position acceptance\" below)")
class MaxPositionAcceptanceDrop(GateBase):
    """Per draft position i, between two speculative variants with the same speculative
    config (they must accept alike): the candidate's acceptance rate accepted_per_pos[i] /
    drafts must not be below ``(1 - limit)`` times the baseline's while significantly
    lower (one-sided pooled two-proportion z test on the counts, Holm across the
    positions, at ``alpha``); a failure names the position and both rates. A position
    that rose beyond the band is reported beside, not failed. ``limit`` is the relative
    tolerance (vLLM's spec-decode tests: 0.05)."""

    kind: Literal[GateKind.MAX_POSITION_ACCEPTANCE_DROP] = GateKind.MAX_POSITION_ACCEPTANCE_DROP
    op: Literal["<="] = "<="
    limit: float
    alpha: float = 0.05

    @classmethod
    def plan(cls, at: Place) -> MaxPositionAcceptanceDrop | None:
        """Every gated task of a comparison of two variants with the same (non-null)
        speculative config (the same drafter must accept alike, position by position),
        when the settings give ``position_acceptance_rtol``."""
        comp, g = at.comp, at.settings
        spec_a = at.config.variants[comp.baseline].speculative_config
        spec_b = at.config.variants[comp.candidate].speculative_config
        if spec_a is None or spec_b is None or spec_a != spec_b or g.position_acceptance_rtol is None:
            return None
        return cls.at(
            at, limit=g.position_acceptance_rtol, alpha=g.position_acceptance_alpha,
            description=(f"per draft position: acceptance rate not below (1 - {g.position_acceptance_rtol:g}) "
                         f"x {comp.baseline}'s while significantly lower (one-sided two-proportion z test, "
                         f"Holm across positions, alpha {g.position_acceptance_alpha:g})"),
        )


@gate(scope="baseline_task", order=30, reads_generation=True, settings=_SETTINGS,
      doc="the same per-position rule for one speculative variant against its stored baseline")
class BaselinePositionAcceptanceDrop(GateBase):
    """:class:`MaxPositionAcceptanceDrop` of one speculative variant against its stored
    baseline (the baseline's drafts and per-position rates). ``baseline`` is filled with
    ``baseline:<run id>`` when judged."""

    kind: Literal[GateKind.BASELINE_POSITION_ACCEPTANCE_DROP] = GateKind.BASELINE_POSITION_ACCEPTANCE_DROP
    op: Literal["<="] = "<="
    limit: float
    alpha: float = 0.05

    @classmethod
    def plan(cls, at: Place) -> BaselinePositionAcceptanceDrop | None:
        """Every speculative variant and task whose settings give ``position_acceptance_rtol``."""
        g = at.settings
        if at.variant_spec.speculative_config is None or g.position_acceptance_rtol is None:
            return None
        return cls.at(
            at, limit=g.position_acceptance_rtol, alpha=g.position_acceptance_alpha,
            description=(f"per draft position: acceptance rate not below (1 - "
                         f"{g.position_acceptance_rtol:g}) x the stored baseline's while significantly "
                         f"lower (one-sided two-proportion z test, Holm across positions, alpha "
                         f"{g.position_acceptance_alpha:g})"),
        )
