"""Simulated clean nights: false-fail rates too small to see in a handful of real repeats.

A night of a config is simulated from the behaviour real repeats measured
(:class:`harness.analysis.night_model.NightModel`) and judged by evalrun's own code: the
simulated samples and counters fill a :class:`~harness.analysis.measurements.Measurements`,
the comparisons are computed by :func:`harness.analysis.comparison.compare` (output match,
paired test, divergences judged by the reference's top log-probabilities; a baseline rerun
for noise simulated when a comparison asks for one), and the config's planned gates
(:func:`harness.config.gates.plan_gates`) are judged by
:func:`harness.analysis.gates.evaluate_gates`. The nights' verdicts are counted by
:func:`harness.analysis.false_alarms.false_alarm_rates`.

How one config is simulated:

* per task, its planned size (:func:`harness.tasks.task_size`) of questions drawn once from
  the measured questions (in a shuffled order, repeated as often as the size needs, so the
  task keeps the measured shares: the same list gets exactly the measured questions), and
  fixed for every night, as a real nightly asks the same questions every night. Each keeps
  its divergence rate ``p_q``; its alternative path gets, once, a divergence position
  (uniform over :data:`LENGTH` tokens), a gap drawn from the measured gaps and an answer
  change with the measured probability. Whether the modal path is right is the measured
  question's, or, with ``accuracy_from_config``, exactly ``round(threshold * n)`` right
  questions for a task with an ``accuracy_threshold`` (a list on other hardware claims its
  own accuracy; the fake's is not the H200 models');
* per night and variant, each question takes its alternative path with probability ``p_q``,
  independently (variants, runs and questions independent given ``p_q``: the noise of one
  forward does not carry to another request's);
* a speculative variant's request accepts each of its k draft positions, given the ones
  before it, with ``p_r = sigmoid(mu + u_q + v_night + e_r)`` (the acceptance model; ``u_q``
  fixed per question, ``v_night`` per night and variant, ``e_r`` per request), over the
  measured drafts per request; the task's counters are the requests' sums;
* a variant without speculative decoding carries ``top_logprobs`` (the reference's
  distribution: the token taken and the other candidate, ``gap`` nats apart, at the
  divergence position; a confident runner-up 6 nats below elsewhere).

Gate kinds that read what the simulation does not produce (:data:`NOT_SIMULATED`: the
engine's effective configuration, a traffic shape's proof, the stored baseline, the sampled
verdict) are left out: a clean build passes them whatever the numerics.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from harness.analysis.comparison import compare, rerun_needs
from harness.analysis.false_alarms import FalseAlarmRates, Night, false_alarm_rates
from harness.analysis.gatekinds.baseline_acceptance_length_drop import BaselineAcceptanceLengthDrop
from harness.analysis.gatekinds.baseline_accuracy_drop import BaselineAccuracyDrop
from harness.analysis.gatekinds.baseline_position_acceptance_drop import BaselinePositionAcceptanceDrop
from harness.analysis.gatekinds.baseline_readable import BaselineReadable
from harness.analysis.gatekinds.sampled_equivalence import SampledEquivalence
from harness.analysis.gatekinds.shape_proven import ShapeProven
from harness.analysis.gatekinds.variant_effective import VariantEffective
from harness.analysis.gates import evaluate_gates
from harness.analysis.measurements import ComparisonMeasurement, Measurements
from harness.analysis.night_model import DEFAULT_GAP, NightModel, QuestionBehaviour
from harness.analysis.scoring import PIPELINES, score_task
from harness.config.gates import Gate, plan_gates
from harness.config.schema import ModelConfig
from harness.records.measures import SpecDecodeCountersRecord, SpecDecodeRecord
from harness.records.run_record import ComparisonResult, GateResult
from harness.records.samples import Sample
from harness.tasks import task_size

__all__ = ["LENGTH", "NOT_SIMULATED", "SimQuestion", "simulate_config_night", "simulate_nights"]

#: completion length (tokens) of a simulated completion
LENGTH = 8
#: gate kinds a simulated night does not judge (module docstring)
NOT_SIMULATED = frozenset(k.KIND for k in (
    VariantEffective, ShapeProven, SampledEquivalence, BaselineReadable, BaselineAccuracyDrop,
    BaselineAcceptanceLengthDrop, BaselinePositionAcceptanceDrop))


@dataclass(frozen=True)
class SimQuestion:
    """One simulated question of a task, fixed over the nights (module docstring):
    ``divergence`` p_q, whether the modal path is ``right``, the alternative path's divergence
    position ``at``, ``gap`` (nats) and whether its answer ``changes``, and the question's
    acceptance effect ``u`` (logit scale)."""

    divergence: float
    right: bool
    at: int
    gap: float
    changes: bool
    u: float


def _questions(model: NightModel, n: int, accuracy: float | None, rng: random.Random) -> list[SimQuestion]:
    """``n`` simulated questions drawn from the model (module docstring): the measured
    questions in a shuffled order, repeated until ``n`` (each ``n // N`` or ``n // N + 1``
    times), so the task keeps the measured shares; with ``accuracy``, exactly
    ``round(accuracy * n)`` of them have a right modal path."""
    pool = list(model.questions)
    order: list[QuestionBehaviour] = []
    while len(order) < n:
        rng.shuffle(pool)
        order += pool[:n - len(order)]
    right = [q.right for q in order]
    if accuracy is not None:
        k = round(accuracy * n)
        right = [True] * k + [False] * (n - k)
        rng.shuffle(right)
    sd_q = model.acceptance.sd_question if model.acceptance else 0.0
    return [SimQuestion(q.divergence, r, rng.randrange(LENGTH), rng.choice(model.gaps) if model.gaps else DEFAULT_GAP,
                        rng.random() < model.answer_change, rng.gauss(0.0, sd_q))
            for q, r in zip(order, right)]


def _sample(config: str, variant: str, task: str, i: int, q: SimQuestion, alt: bool, reference: bool,
            counters: tuple[float, float, float, tuple[float, ...]] | None) -> Sample:
    """One simulated request's judged sample."""
    ids = tuple(range(10, 10 + LENGTH))
    if alt:
        ids = ids[:q.at] + tuple(1000 + q.at + j for j in range(LENGTH - q.at))
    right = q.right != (alt and q.changes)
    answer = "5" if right else "7"
    top = None
    if reference:
        top_lp = -math.log1p(math.exp(-q.gap))
        other = 10 + q.at if alt else 1000 + q.at
        top = tuple(((t, top_lp), (other, top_lp - q.gap)) if j == q.at else ((t, -0.01), (100 + j, -6.0))
                    for j, t in enumerate(ids))
    kw = {}
    if counters is not None:
        d, dt, a, pos = counters
        kw = {"spec_drafts": d, "spec_draft_tokens": dt, "spec_accepted_tokens": a, "spec_accepted_per_pos": pos}
    return Sample(config=config, variant=variant, task=task, question_id=f"{task}/sim/{i}", prompt_hash=f"{i:016x}",
                  gold="5", completion=f" {answer} #### {answer}", answers={p: answer for p in PIPELINES},
                  correct={p: right for p in PIPELINES}, token_ids=ids, finish_reason="stop", top_logprobs=top,
                  **kw)  # type: ignore[arg-type]


def _counters(model: NightModel, q: SimQuestion, k: int, v_night: float, rng: random.Random
              ) -> tuple[float, float, float, tuple[float, ...]]:
    """One request's drafts, draft tokens, accepted tokens and accepted per position."""
    acc = model.acceptance
    assert acc is not None
    p = 1.0 / (1.0 + math.exp(-(acc.mu + q.u + v_night + rng.gauss(0.0, acc.sd_request))))
    drafts = max(1, round(acc.drafts_per_request))
    pos = [0] * k
    for _ in range(drafts):
        for i in range(k):
            if rng.random() >= p:
                break
            pos[i] += 1
    return float(drafts), float(drafts * k), float(sum(pos)), tuple(float(x) for x in pos)


def _task_samples(config: ModelConfig, model: NightModel, variant: str, task: str, qs: Sequence[SimQuestion],
                  rng: random.Random) -> tuple[list[Sample], SpecDecodeRecord | None]:
    """One night's samples of ``variant`` on ``task`` and its speculative figures."""
    sc = config.variants[variant].speculative_config
    k = (sc.num_speculative_tokens or 0) if sc is not None and model.acceptance is not None else 0
    v_night = rng.gauss(0.0, model.acceptance.sd_run) if k and model.acceptance else 0.0
    samples = []
    drafts = draft_tokens = accepted = 0.0
    per_pos = [0.0] * k
    for i, q in enumerate(qs):
        counters = _counters(model, q, k, v_night, rng) if k else None
        if counters is not None:
            drafts, draft_tokens, accepted = drafts + counters[0], draft_tokens + counters[1], accepted + counters[2]
            per_pos = [x + y for x, y in zip(per_pos, counters[3])]
        samples.append(_sample(config.name, variant, task, i, q, rng.random() < q.divergence, sc is None, counters))
    spec = None
    if k:
        spec = SpecDecodeRecord.from_counters(SpecDecodeCountersRecord(
            drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted, accepted_per_pos=tuple(per_pos)))
    return samples, spec


def simulate_config_night(config: ModelConfig, gates: Sequence[Gate], model: NightModel,
                          questions: dict[str, list[SimQuestion]], rng: random.Random) -> Night:
    """One simulated night of ``config``: ``{config name: its gates' results}``.

    Args:
        config: the config (variants, tasks, comparisons).
        gates: the gates to judge (its planned gates less :data:`NOT_SIMULATED`).
        model: the measured behaviour.
        questions: task -> its simulated questions (fixed over nights).
        rng: the night's generator.
    """
    m = Measurements()
    for tname, qs in questions.items():
        for v in config.variants:
            samples, spec = _task_samples(config, model, v, tname, qs, rng)
            tm = m.task_record(v, tname)
            tm.samples, tm.score, tm.spec = samples, score_task(samples), spec
    reruns: dict[tuple[str, str], tuple[Sample, ...]] = {}
    comps = compare(config, m, reruns)
    _store(m, comps)
    asked = rerun_needs(config, m, reruns)
    if asked:
        for v, tasks in asked.items():
            for tname in tasks:
                reruns[(v, tname)] = tuple(_task_samples(config, model, v, tname, questions[tname], rng)[0])
        _store(m, compare(config, m, reruns, asked))
    return {config.name: evaluate_gates(gates, m)}


def _store(m: Measurements, comps: Sequence[ComparisonResult]) -> None:
    """Put :func:`compare`'s results into ``m`` as the runner's record would hold them."""
    for c in comps:
        m.comparisons[(c.baseline, c.candidate, c.task)] = ComparisonMeasurement(
            match=c, answers=c.answer_agreement, noise=c.noise, divergences=c.divergence)


def simulate_nights(configs: Sequence[ModelConfig], model: NightModel, nights: int, seed: int = 0,
                    accuracy_from_config: bool = False) -> FalseAlarmRates:
    """The false-fail rates of ``nights`` simulated clean nights of the list ``configs``.

    Args:
        configs: the list's configs.
        model: the behaviour measured by real repeats (:func:`harness.analysis.night_model.fit_night_model`).
        nights: how many nights (>= 1).
        seed: the simulation's seed (the same seed, model and configs give the same rates).
        accuracy_from_config: draw whether each modal path is right with the task's
            ``accuracy_threshold`` (where it has one) instead of the measured question's.

    Returns:
        :class:`FalseAlarmRates` over the simulated nights.

    Raises:
        ValueError: ``nights < 1``.
    """
    if nights < 1:
        raise ValueError(f"simulate_nights: nights must be >= 1, got {nights}")
    rng = random.Random(seed)
    setup = []
    for c in configs:
        gates = [g for g in plan_gates(c) if g.kind not in NOT_SIMULATED]
        qs = {t: _questions(model, task_size(spec), c.gates_for(t).accuracy_threshold if accuracy_from_config
                            else None, rng)
              for t, spec in c.tasks.items()}
        setup.append((c, gates, qs))
    out = []
    for _ in range(nights):
        night: dict[str, Sequence[GateResult]] = {}
        for c, gates, qs in setup:
            night.update(simulate_config_night(c, gates, model, qs, rng))
        out.append(night)
    return false_alarm_rates(out)
