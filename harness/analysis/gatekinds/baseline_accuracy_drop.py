"""Gate kind ``baseline_accuracy_drop``: per variant and task, the accuracy drop since the stored baseline
within its limit and not significant (paired McNemar, else Fisher's exact test)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from harness.analysis.budget import GateTest, paired_margin_p, paired_min_p
from harness.analysis.gatekinds import _common
from harness.analysis.gatekinds._common import Budgeted, budget_fields, budget_verdict, no_stored, result, stored_task
from harness.analysis.measurements import Measurements
from harness.analysis.scoring import correctness
from harness.analysis.stats import paired_comparison
from harness.config.gates.registry import Place, gate
from harness.records.baselines import BaselineTask
from harness.records.run_record import GateResult
from harness.records.samples import Sample


@gate(scope="baseline_task", order=10, settings=("baseline_max_accuracy_drop", "baseline_alpha"),
      doc="accuracy drop since the stored baseline <= `baseline_max_accuracy_drop` **and** not significantly "
          "lower (one-sided, `baseline_alpha`; paired McNemar per question id and prompt, Fisher's exact test "
          "without per-question data); an improvement never fails. With the false-alarm budget: fails only when "
          "the test shows the drop beyond the limit (margin) at the config's budget (Holm)")
class BaselineAccuracyDrop(Budgeted):
    """``pipeline`` accuracy drop since the stored baseline <= ``limit`` and not
    significantly lower at ``alpha`` (paired McNemar, else Fisher's exact test).
    ``baseline`` is filled with ``baseline:<run id>`` when judged."""

    kind: Literal["baseline_accuracy_drop"] = "baseline_accuracy_drop"
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
        budget = at.config.false_alarm_budget
        return cls.at(
            at, limit=g.baseline_max_accuracy_drop, pipeline=g.accuracy_pipeline, alpha=g.baseline_alpha,
            **budget_fields(at),
            description=(f"{g.accuracy_pipeline} accuracy drop since the stored baseline: fails only when the test "
                         f"shows it beyond the margin {g.baseline_max_accuracy_drop} (false_alarm_budget {budget:g}, "
                         "Holm over the config's tested gates)") if budget is not None else (
                f"{g.accuracy_pipeline} accuracy drop since the stored baseline "
                         f"<= {g.baseline_max_accuracy_drop}, not significantly lower (alpha "
                         f"{g.baseline_alpha})"),
        )

    def test(self, m: Measurements) -> GateTest | None:
        """The margin test against the stored baseline (None: nothing to compare)."""
        bt, _ = stored_task(self, m)
        cur = m.task(self.variant, self.task).samples
        c = _counts(self, bt, cur) if bt is not None and cur is not None else None
        return c.test if c is not None else None

    def planned_min_p(self, n: int) -> float:
        """:func:`paired_min_p` at ``n`` questions and the margin."""
        return paired_min_p(n, self.limit)

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """``baseline_accuracy_drop``: the accuracy drop since the stored baseline
        (:mod:`harness.records.baselines`) <= limit and not significantly lower
        (:func:`drop_verdict`; the test is :func:`_baseline_accuracy`'s)."""
        bt, label = stored_task(self, m)
        if bt is None:
            return no_stored(self, label)
        cur = m.task(self.variant, self.task).samples
        if cur is None:
            return result(self, None, self.limit, None, "not run: no samples", baseline=label)
        return _baseline_accuracy(self, bt, cur, label, adjusted_p)


@dataclass(frozen=True)
class _Counts:
    """The comparison with the stored baseline: accuracies, drop, the one-sided p-value (the
    margin test's when ``test``), how it was computed, the questions lost."""

    a_acc: float
    b_acc: float
    drop: float
    p: float
    how: str
    lost: tuple[str, ...]
    changed_prompt: int
    test: GateTest


def _counts(g: BaselineAccuracyDrop, bt: BaselineTask, cur: Sequence[Sample]) -> _Counts | None:
    """Accuracy against the stored baseline. With b = questions right in the baseline and
    wrong now, c = the reverse, over the question ids present in both with the same
    prompt hash, drop = (b - c)/n and the one-sided exact McNemar p = P(Binomial(b + c,
    1/2) >= b) (McNemar 1947); without paired data drop = p_base - p_now and p is
    Fisher's exact one-sided p of the 2x2 table [[correct_base, wrong_base],
    [correct_now, wrong_now]] (alternative: the baseline's odds of a right answer are
    greater; Fisher 1935, ``scipy.stats.fisher_exact``). The margin test (``test``): paired,
    :func:`paired_margin_p`; unpaired, Fisher's p when the observed drop exceeds the margin,
    else 1 (exact-or-conservative on an unchanged build). None: no scored question on one side."""
    from scipy import stats as _st

    pipe = g.pipeline
    base = bt.correctness(pipe)
    now_ok = [s for s in cur if s.ok]
    now_hash = {s.question_id: s.prompt_hash for s in now_ok}
    now = correctness(now_ok, pipe)
    same = {q for q in set(base) & set(now) if base[q][0] == now_hash[q]}
    changed_prompt = len((set(base) & set(now)) - same)
    if same:
        pc = paired_comparison({q: base[q][1] for q in same}, {q: now[q] for q in same})
        drop = pc.accuracy_a - pc.accuracy_b
        p = pc.one_sided_p_value
        how = (f"paired on {pc.n} questions: {len(pc.a_only)} right only in the baseline, "
               f"{len(pc.b_only)} right only now; one-sided exact McNemar p={p:.4g}")
        t = GateTest(paired_margin_p(len(pc.a_only), len(pc.b_only), pc.n, g.limit), paired_min_p(pc.n, g.limit),
                     f"exact paired test of drop > {g.limit:g}")
        return _Counts(pc.accuracy_a, pc.accuracy_b, drop, p, how, pc.a_only, changed_prompt, t)
    cb, nb = int(bt.correct.get(pipe) or 0), int(bt.scored.get(pipe) or 0)
    cn, nn = sum(now.values()), len(now)
    if nb == 0 or nn == 0:
        return None
    a_acc, b_acc = cb / nb, cn / nn
    drop = a_acc - b_acc
    p = float(_st.fisher_exact([[cb, nb - cb], [cn, nn - cn]], alternative="greater")[1])
    how = (f"unpaired (baseline has no per-question data for these prompts): {cb}/{nb} vs {cn}/{nn}; "
           f"one-sided Fisher exact p={p:.4g}")
    t = GateTest(p if drop > g.limit else 1.0, 0.0, f"Fisher exact test, drop beyond {g.limit:g}")
    return _Counts(a_acc, b_acc, drop, p, how, (), changed_prompt, t)


def _baseline_accuracy(g: BaselineAccuracyDrop, bt: BaselineTask, cur: Sequence[Sample],
                       label: str | None, adjusted_p: float | None = None) -> GateResult:
    """Accuracy against the stored baseline (:func:`_counts`): with ``budget``, the margin
    test's :func:`budget_verdict`; without, :func:`drop_verdict` of the drop and p."""
    c = _counts(g, bt, cur)
    if c is None:
        return result(g, None, g.limit, False,
                      "no scored question on one side: accuracy cannot be compared with the baseline",
                      baseline=label)
    pipe = g.pipeline
    detail = f"{pipe} accuracy baseline {c.a_acc:.4f} -> now {c.b_acc:.4f} (drop {c.drop:.4f}); {c.how}"
    if c.changed_prompt:
        detail += f"; {c.changed_prompt} question(s) have a different prompt than in the baseline and are not paired"
    if g.budget is not None:
        ok, how = budget_verdict(g, c.test, adjusted_p)
        detail += f"; margin {g.limit}: {how}" + ("" if ok else "; FAILED: the drop is beyond the margin")
        return result(g, c.drop, g.limit, ok, detail, c.lost if not ok else (), baseline=label)
    v = _common.drop_verdict(c.drop, g.limit, c.p, g.alpha, worse="significantly lower")
    return result(g, c.drop, g.limit, v.passed, detail + v.failure, c.lost if not v.passed else (), baseline=label)
