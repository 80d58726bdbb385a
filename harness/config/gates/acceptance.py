"""Gate family "acceptance length": ``drafts_observed``, ``min_acceptance_length`` (per
speculative variant and task), ``max_acceptance_length_drop`` (between two speculative
variants), ``baseline_acceptance_length_drop`` (against the stored baseline)."""

from __future__ import annotations

from typing import Literal

from harness.config.gates.registry import GateBase, GateKind, Place, gate


def _speculative(at: Place) -> bool:
    return at.variant_spec.speculative_config is not None


@gate(scope="task", order=50, reads_generation=True, doc="a speculative variant reported drafts")
class DraftsObserved(GateBase):
    """A speculative variant reported at least ``limit`` (1) draft."""

    kind: Literal[GateKind.DRAFTS_OBSERVED] = GateKind.DRAFTS_OBSERVED
    op: Literal[">="] = ">="
    limit: int = 1

    @classmethod
    def plan(cls, at: Place) -> DraftsObserved | None:
        """Every speculative variant and task."""
        if not _speculative(at):
            return None
        return cls.at(at, description="a speculative variant must report drafts (no drafts observed = fail)")


@gate(scope="task", order=60, reads_generation=True, settings=("min_acceptance_length",),
      doc="mean acceptance length >= the minimum")
class MinAcceptanceLength(GateBase):
    """Mean acceptance length (1 + accepted tokens / drafts, tokens) >= ``limit``."""

    kind: Literal[GateKind.MIN_ACCEPTANCE_LENGTH] = GateKind.MIN_ACCEPTANCE_LENGTH
    op: Literal[">="] = ">="
    limit: float

    @classmethod
    def plan(cls, at: Place) -> MinAcceptanceLength | None:
        """Every speculative variant and task whose settings give ``min_acceptance_length``."""
        limit = at.settings.min_acceptance_length
        if not _speculative(at) or limit is None:
            return None
        return cls.at(at, limit=limit, description="mean acceptance length = 1 + accepted tokens / drafts")


@gate(scope="comparison", order=40, reads_generation=True, settings=("max_acceptance_length_drop",),
      doc="baseline - candidate mean acceptance length <= limit; a **rise** beyond the same band is reported "
          "beside it in the detail (not failed: a better drafter rises too, but a rise can be a bug, e.g. "
          "miscounted drafts)")
class MaxAcceptanceLengthDrop(GateBase):
    """Mean acceptance length baseline - candidate <= ``limit`` (tokens)."""

    kind: Literal[GateKind.MAX_ACCEPTANCE_LENGTH_DROP] = GateKind.MAX_ACCEPTANCE_LENGTH_DROP
    op: Literal["<="] = "<="
    limit: float

    @classmethod
    def plan(cls, at: Place) -> MaxAcceptanceLengthDrop | None:
        """Every gated task of a comparison of two speculative variants with ``max_acceptance_length_drop``."""
        comp = at.comp
        both = all(at.config.variants[v].speculative_config is not None for v in (comp.baseline, comp.candidate))
        if comp.max_acceptance_length_drop is None or not both:
            return None
        return cls.at(at, limit=comp.max_acceptance_length_drop,
                      description="drop of mean acceptance length from baseline to candidate (a rise beyond the "
                                  "same band is reported beside it)")


@gate(scope="baseline_task", order=20, reads_generation=True, settings=("baseline_max_acceptance_length_drop",),
      doc="mean acceptance length drop since the baseline <= `baseline_max_acceptance_length_drop`; a rise "
          "beyond the band is reported beside it")
class BaselineAcceptanceLengthDrop(GateBase):
    """Mean acceptance length drop since the stored baseline <= ``limit`` (tokens)."""

    kind: Literal[GateKind.BASELINE_ACCEPTANCE_LENGTH_DROP] = GateKind.BASELINE_ACCEPTANCE_LENGTH_DROP
    op: Literal["<="] = "<="
    limit: float

    @classmethod
    def plan(cls, at: Place) -> BaselineAcceptanceLengthDrop | None:
        """Every speculative variant and task whose settings give ``baseline_max_acceptance_length_drop``."""
        limit = at.settings.baseline_max_acceptance_length_drop
        if not _speculative(at) or limit is None:
            return None
        return cls.at(at, limit=limit,
                      description="mean acceptance length drop since the stored baseline (a rise beyond the same "
                                  "band is reported beside it)")
