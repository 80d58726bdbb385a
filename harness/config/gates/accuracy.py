"""Gate family "accuracy": ``accuracy_floor`` (per variant and task), ``max_accuracy_drop``
(per comparison, paired), ``baseline_accuracy_drop`` (against the stored baseline)."""

from __future__ import annotations

from typing import Literal

from harness.config.gates.registry import GateBase, GateKind, Place, gate
from harness.config.schema import VLLM_PIPELINE


@gate(scope="task", order=10, settings=("accuracy_threshold", "tolerance", "calibration_questions"),
      doc="accuracy >= accuracy_threshold - tolerance (widened by the sampling error of a run smaller than "
          "`calibration_questions`)")
class AccuracyFloor(GateBase):
    """``pipeline`` accuracy >= ``limit`` = accuracy_threshold - tolerance (fractions),
    widened by :func:`harness.analysis.stats.floor_margin` when the run has fewer
    scored questions than ``calibration_questions``.

    A task with ``vllm_rules`` (the vLLM form's) is judged as vLLM's test judges it: the
    pipeline is vLLM's rule (:data:`~harness.config.schema.VLLM_PIPELINE`), the accuracy
    counts every question (a failed request is a wrong answer) and the limit is the
    floating-point ``accuracy_threshold - tolerance``, not rounded (vLLM's ``measured >=
    expected - tol``)."""

    kind: Literal[GateKind.ACCURACY_FLOOR] = GateKind.ACCURACY_FLOOR
    op: Literal[">="] = ">="
    limit: float
    pipeline: str
    accuracy_threshold: float
    tolerance: float
    calibration_questions: int | None = None

    @classmethod
    def plan(cls, at: Place) -> AccuracyFloor | None:
        """Every variant and task whose settings give ``accuracy_threshold``."""
        g = at.settings
        if g.accuracy_threshold is None:
            return None
        if at.task is not None and at.config.tasks[at.task].vllm_rules:  # vLLM's verdict on vLLM's floor
            return cls.at(
                at, limit=g.accuracy_threshold - g.tolerance, pipeline=VLLM_PIPELINE,
                accuracy_threshold=g.accuracy_threshold, tolerance=g.tolerance,
                calibration_questions=g.calibration_questions,
                description=(f"vLLM's rule: {VLLM_PIPELINE} accuracy over every question (a failed request "
                             f"is wrong) >= accuracy_threshold - tolerance = {g.accuracy_threshold} - "
                             f"{g.tolerance}, in floating point"),
            )
        return cls.at(
            at, limit=round(g.accuracy_threshold - g.tolerance, 6),
            pipeline=g.accuracy_pipeline, accuracy_threshold=g.accuracy_threshold,
            tolerance=g.tolerance, calibration_questions=g.calibration_questions,
            description=(f"{g.accuracy_pipeline} accuracy >= accuracy_threshold - tolerance "
                         f"= {g.accuracy_threshold} - {g.tolerance}"),
        )


@gate(scope="comparison", order=10, settings=("max_accuracy_drop", "expected_discordance"),
      doc="baseline - candidate accuracy <= limit **and** the candidate is not significantly worse (one-sided "
          "exact McNemar p >= alpha); an improvement never fails")
class MaxAccuracyDrop(GateBase):
    """Paired ``pipeline`` accuracy drop baseline - candidate <= ``limit`` (fraction) and
    not significantly worse (one-sided exact McNemar p >= ``alpha``; with
    ``multiple_testing`` ``holm``, the Holm-adjusted p-value over the config's
    accuracy-drop gates that ask for it)."""

    kind: Literal[GateKind.MAX_ACCURACY_DROP] = GateKind.MAX_ACCURACY_DROP
    op: Literal["<="] = "<="
    limit: float
    pipeline: str
    alpha: float = 0.05
    multiple_testing: Literal["none", "holm"] = "none"

    @classmethod
    def plan(cls, at: Place) -> MaxAccuracyDrop | None:
        """Every gated task of a comparison with ``max_accuracy_drop``."""
        comp, g = at.comp, at.settings
        if comp.max_accuracy_drop is None:
            return None
        return cls.at(
            at, limit=comp.max_accuracy_drop, pipeline=g.accuracy_pipeline, alpha=comp.alpha,
            multiple_testing=g.multiple_testing,
            description=(f"paired {g.accuracy_pipeline} accuracy drop {comp.baseline} - {comp.candidate} "
                         f"<= {comp.max_accuracy_drop}, and not significantly worse "
                         f"(one-sided McNemar, alpha {comp.alpha}"
                         + (", Holm-corrected across the config's accuracy-drop gates)"
                            if g.multiple_testing == "holm" else ")")),
        )


@gate(scope="baseline_task", order=10, settings=("baseline_max_accuracy_drop", "baseline_alpha"),
      doc="accuracy drop since the stored baseline <= `baseline_max_accuracy_drop` **and** not significantly "
          "lower (one-sided, `baseline_alpha`; paired McNemar per question id and prompt, Fisher's exact test "
          "without per-question data); an improvement never fails")
class BaselineAccuracyDrop(GateBase):
    """``pipeline`` accuracy drop since the stored baseline <= ``limit`` and not
    significantly lower at ``alpha`` (paired McNemar, else Fisher's exact test).
    ``baseline`` is filled with ``baseline:<run id>`` when judged."""

    kind: Literal[GateKind.BASELINE_ACCURACY_DROP] = GateKind.BASELINE_ACCURACY_DROP
    op: Literal["<="] = "<="
    limit: float
    pipeline: str
    alpha: float = 0.05

    @classmethod
    def plan(cls, at: Place) -> BaselineAccuracyDrop | None:
        """Every variant and task whose settings give ``baseline_max_accuracy_drop``."""
        g = at.settings
        if g.baseline_max_accuracy_drop is None:
            return None
        return cls.at(
            at, limit=g.baseline_max_accuracy_drop, pipeline=g.accuracy_pipeline, alpha=g.baseline_alpha,
            description=(f"{g.accuracy_pipeline} accuracy drop since the stored baseline "
                         f"<= {g.baseline_max_accuracy_drop}, not significantly lower (alpha "
                         f"{g.baseline_alpha})"),
        )
