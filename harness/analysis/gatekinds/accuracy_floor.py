"""Gate kind ``accuracy_floor``: per variant and task, the accuracy of the task's answer pipeline at least
its threshold less its tolerance (widened for a run smaller than its calibration); with the
false-alarm budget, an exact binomial non-inferiority test of the floor."""

from __future__ import annotations

from typing import Literal

from harness.analysis.budget import GateTest, floor_min_p, floor_p
from harness.analysis.gatekinds._common import (
    Budgeted,
    budget_fields,
    budget_verdict,
    result,
    task_score,
    truncation_note,
)
from harness.analysis.measurements import Measurements
from harness.analysis.stats import floor_margin
from harness.config.gates.registry import Place, gate
from harness.config.schema import VLLM_PIPELINE
from harness.records.measures import TaskScore
from harness.records.run_record import GateResult


@gate(scope="task", order=10, settings=("accuracy_threshold", "tolerance", "calibration_questions"),
      doc="accuracy >= accuracy_threshold - tolerance (widened by the sampling error of a run smaller than "
          "`calibration_questions`); with the false-alarm budget: fails only when an exact binomial test shows "
          "the accuracy below that floor at the config's budget (Holm; no widening: the test accounts for the "
          "run's size). A vLLM-form task keeps vLLM's point rule, outside the budget")
class AccuracyFloor(Budgeted):
    """``pipeline`` accuracy >= ``limit`` = accuracy_threshold - tolerance (fractions),
    widened by :func:`harness.analysis.stats.floor_margin` when the run has fewer
    scored questions than ``calibration_questions``.

    With ``budget`` (the config's ``false_alarm_budget``) the floor is a non-inferiority
    margin: the gate fails only when the exact one-sided binomial test of H0 "accuracy >=
    limit" (:func:`harness.analysis.budget.floor_p`) rejects at the config's budget, Holm
    over its tested gates. ``calibration_questions``' widening is not applied then: it was
    an allowance for the run's own sampling error, which the test already accounts for (its
    p-value is computed at the run's size), so both would count that error twice.

    A task with ``vllm_rules`` (the vLLM form's) is judged as vLLM's test judges it: the
    pipeline is vLLM's rule (:data:`~harness.config.schema.VLLM_PIPELINE`), the accuracy
    counts every question (a failed request is a wrong answer) and the limit is the
    floating-point ``accuracy_threshold - tolerance``, not rounded (vLLM's ``measured >=
    expected - tol``)."""

    kind: Literal["accuracy_floor"] = "accuracy_floor"
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
            # (never budgeted: vLLM's point rule, outside the false-alarm budget; the dry run
            # states its false-fail, harness.report.budget_plan)
            return cls.at(
                at, limit=g.accuracy_threshold - g.tolerance, pipeline=VLLM_PIPELINE,
                accuracy_threshold=g.accuracy_threshold, tolerance=g.tolerance,
                calibration_questions=g.calibration_questions,
                description=(f"vLLM's rule: {VLLM_PIPELINE} accuracy over every question (a failed request "
                             f"is wrong) >= accuracy_threshold - tolerance = {g.accuracy_threshold} - "
                             f"{g.tolerance}, in floating point"),
            )
        budget = at.config.false_alarm_budget
        if budget is not None:
            return cls.at(
                at, limit=round(g.accuracy_threshold - g.tolerance, 6), **budget_fields(at),
                pipeline=g.accuracy_pipeline, accuracy_threshold=g.accuracy_threshold,
                tolerance=g.tolerance, calibration_questions=g.calibration_questions,
                description=(f"{g.accuracy_pipeline} accuracy >= accuracy_threshold - tolerance "
                             f"= {g.accuracy_threshold} - {g.tolerance}: fails only when an exact binomial test "
                             f"shows it below (false_alarm_budget {budget:g}, Holm over the config's tested gates)"),
            )
        return cls.at(
            at, limit=round(g.accuracy_threshold - g.tolerance, 6),
            pipeline=g.accuracy_pipeline, accuracy_threshold=g.accuracy_threshold,
            tolerance=g.tolerance, calibration_questions=g.calibration_questions,
            description=(f"{g.accuracy_pipeline} accuracy >= accuracy_threshold - tolerance "
                         f"= {g.accuracy_threshold} - {g.tolerance}"),
        )

    def test(self, m: Measurements) -> GateTest | None:
        """The exact binomial test of "accuracy < limit" on the scored questions (None: no
        score, the pipeline not computed, or no question scored)."""
        sc = m.task(self.variant, self.task).score
        ps = sc.accuracy.get(self.pipeline) if sc is not None else None
        if ps is None or ps.accuracy is None or ps.scored < 1:
            return None
        return GateTest(floor_p(ps.correct, ps.scored, self.limit), floor_min_p(ps.scored, self.limit),
                        f"exact binomial test of accuracy < {self.limit:g}")

    def planned_min_p(self, n: int) -> float:
        """:func:`floor_min_p` at ``n`` questions and the floor: every answer wrong."""
        return floor_min_p(n, self.limit)

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """With ``budget``: :func:`budget_verdict` of :meth:`test` (no widening).
        Without: ``accuracy_floor``: accuracy >= threshold - tolerance - margin, where margin is
        :func:`harness.analysis.stats.floor_margin` when the gate gives
        ``calibration_questions`` larger than the run's scored questions, else 0. A pipeline
        that was not computed is NOT RUN; no successful request fails. A failing floor names
        the truncated share above :data:`TRUNCATION_NOTE_RATE`."""
        sc, none = task_score(self, m)
        if sc is None:
            return none  # type: ignore[return-value]
        ps = sc.accuracy.get(self.pipeline)
        if ps is None:
            return result(self, None, self.limit, None,
                           f"not run: answer pipeline {self.pipeline} was not computed "
                           f"(computed: {', '.join(sc.accuracy) or 'none'}; lm-eval's pipelines need "
                           "lm-eval, a dependency of evalrun, importable: see provenance.lm_eval.error)")
        if self.pipeline == VLLM_PIPELINE:
            return self._vllm_floor(sc.num_requests, ps.correct, sc.error_count, sc)
        if ps.accuracy is None:
            return result(self, None, self.limit, False, "no request succeeded: accuracy cannot be computed")
        t = self.test(m) if self.budget is not None else None
        if t is not None:
            return self._tested(ps.accuracy, ps.correct, ps.scored, t, adjusted_p, sc)
        margin = 0.0
        cal = self.calibration_questions
        if cal is not None and ps.scored < cal:
            margin = floor_margin(ps.scored, cal, self.accuracy_threshold)
        limit = round(self.limit - margin, 6)
        ok = ps.accuracy >= limit
        extra = (f" (floor {self.limit} widened by {margin:.4f} for {ps.scored} of {cal} calibration questions)"
                 if margin else "")
        return result(
            self, ps.accuracy, limit, ok,
            f"{self.pipeline} accuracy {ps.accuracy:.4f} ({ps.correct}/{ps.scored}) vs floor {limit:.4f}{extra}"
            + ("" if ok else truncation_note(sc, self.variant)),
        )

    def _tested(self, accuracy: float, correct: int, scored: int, t: GateTest, adjusted_p: float | None,
                sc: TaskScore) -> GateResult:
        """The verdict under the budget: :func:`budget_verdict` of the floor's exact test."""
        ok, how = budget_verdict(self, t, adjusted_p)
        cal = self.calibration_questions
        unwidened = (f" (calibration_questions {cal} not applied: the test accounts for the run's {scored} questions)"
                     if cal is not None and scored < cal else "")
        return result(
            self, accuracy, self.limit, ok,
            f"{self.pipeline} accuracy {accuracy:.4f} ({correct}/{scored}) vs floor {self.limit:.4f}{unwidened}; {how}"
            + ("" if ok else "; FAILED: the accuracy is shown below the floor" + truncation_note(sc, self.variant)),
        )

    def _vllm_floor(self, n: int, correct: int, errors: int, sc: TaskScore) -> GateResult:
        """vLLM's verdict (``test_gsm8k_correctness.py``): ``correct / n >= threshold - tolerance``
        in floating point, ``n`` every question asked (vLLM scores a failed request as a wrong
        answer); a floor widened only when the config writes ``calibration_questions``."""
        accuracy = correct / n if n else 0.0
        margin = 0.0
        cal = self.calibration_questions
        if cal is not None and n < cal:
            margin = floor_margin(n, cal, self.accuracy_threshold)
        limit = self.limit - margin
        ok = accuracy >= limit
        extra = (f" (floor {self.limit} widened by {margin:.4f} for {n} of {cal} calibration questions, "
                 "calibration_questions: evalrun's addition)" if margin else "")
        failed = f", {errors} failed request(s) counted wrong as vLLM counts them" if errors else ""
        return result(
            self, accuracy, limit, ok,
            f"vLLM's rule: {self.pipeline} accuracy {accuracy:.4f} ({correct}/{n}{failed}) vs floor "
            f"{self.accuracy_threshold} - {self.tolerance} = {limit!r}{extra}"
            + ("" if ok else truncation_note(sc, self.variant)),
        )
