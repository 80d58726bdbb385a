"""``evalrun diff RUN_A RUN_B``: what changed between two runs (or a run and a baseline).

Either side is a run folder (``results/<run id>/``, or its ``run.json``) or a baseline
file (``results/baselines/<config>.json``, :mod:`harness.records.baselines`). Every accuracy
figure is recomputed from the per-question data on disk (a run's samples JSONL, a
baseline's ``questions``), never copied from the record; acceptance figures come from
the record (its counters are per task, not per question). For each config, variant
and task present on both sides the diff gives:

* **accuracy** per answer pipeline: A and B with 95% Wilson intervals, the change
  B - A with its interval and p-value: paired over the question ids present on both
  sides with the same prompt hash (:func:`harness.analysis.stats.paired_comparison`: Wald
  interval of a paired difference, McNemar p, exact when fewer than 25 discordant
  pairs, and the exact one-sided p for "B worse"); unpaired when no question is
  shared (Newcombe's hybrid score interval and Fisher's exact two-sided p);
* **speculative decoding**: mean acceptance length, acceptance rate and per-position
  acceptance side by side, with their intervals when the record has them;
* **output match**: each in-run comparison's output-match rate in A and in B, the
  questions that newly mismatch in B and those that match again; and per variant the
  questions whose completion changed between A and B (token ids, or their hash for a
  baseline) with the first divergence;
* **flipped questions**: right in A and wrong in B (lost) and the reverse (gained),
  for the config's gate pipeline, with both completions;
* **gates**: the gates that fail in B (id, numbers, questions) and every verdict that
  changed.

:func:`diff_runs` returns the typed :class:`DiffResult` (its ``to_json()`` is the
``--json`` form); :mod:`harness.report.diff_render` renders it as Markdown (fit for a
pull-request comment), :mod:`harness.report.diff_cli` is the command; the sides are
read by :mod:`harness.report.diff_sides`; the intervals and tests are those of
:mod:`harness.analysis.stats`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from pydantic import BaseModel

from harness.analysis.scoring import first_divergence
from harness.analysis.stats import fisher_p_values, newcombe_interval, paired_comparison, wilson_interval
from harness.records.measures import Interval, NoiseRecord
from harness.records.run_record import GateResult
from harness.report.diff_sides import ConfigView, Side, SideHead, TaskView, load_side

__all__ = ["DiffResult", "differences", "diff_runs"]

#: A value of the JSON form: what the result's ``to_json()`` returns, nested.
Json = Union[None, bool, int, float, str, list["Json"], dict[str, "Json"]]


def _plain(x: object) -> Json:
    """The JSON form of a result value: a result type by its ``to_json()``, a record by
    ``model_dump(mode="json")``, another dataclass field by field, lists, tuples and dicts
    element by element.

    Raises:
        TypeError: a value with no JSON form (a bug in a result type's fields).
    """
    if isinstance(x, _Result):
        return x.to_json()
    if isinstance(x, BaseModel):
        return x.model_dump(mode="json")
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return _plain(dataclasses.asdict(x))
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    raise TypeError(f"no JSON form for a {type(x).__name__} in a diff result")


class _Result:
    """A part of the diff result: its JSON form holds its fields in declaration order,
    less the ones :meth:`_omitted` names."""

    def _omitted(self) -> tuple[str, ...]:
        return ()

    def to_json(self) -> dict[str, Json]:
        """The part as the ``--json`` form writes it."""
        skip = self._omitted()
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)  # type: ignore[arg-type]
                if f.name not in skip}


@dataclass
class AB(_Result):
    """One figure on both sides (A, B)."""

    a: Any
    b: Any


@dataclass
class AccuracyChange(_Result):
    """Accuracy of one task under one pipeline on both sides and its change B - A.

    Attributes:
        pipeline: the answer pipeline.
        a, b: accuracy (fraction; None when nothing was scored); ``*_correct`` /
            ``*_scored`` the counts, ``*_ci`` the 95% Wilson interval.
        prompt_changed: question ids on both sides whose prompt hash differs (not paired).
        paired: whether the change is paired (questions with the same id and prompt).
        n_paired: questions paired; ``paired_a`` / ``paired_b`` their accuracies (only
            when paired, and only then in the JSON form).
        change, change_ci: B - A and its 95% interval (paired Wald, else Newcombe).
        p_value, test: the test's two-sided p (McNemar when paired, else Fisher's exact).
        one_sided_p_value_b_worse: the one-sided p for "B worse than A".
        lost, gained: question ids right in A and wrong in B, and the reverse (paired only).
    """

    pipeline: str
    a: float | None
    a_correct: int
    a_scored: int
    a_ci: list[float] | None
    b: float | None
    b_correct: int
    b_scored: int
    b_ci: list[float] | None
    prompt_changed: list[str]
    paired: bool = False
    n_paired: int = 0
    paired_a: float | None = None
    paired_b: float | None = None
    change: float | None = None
    change_ci: list[float] | None = None
    p_value: float | None = None
    test: str = "none"
    one_sided_p_value_b_worse: float | None = None
    lost: list[str] = field(default_factory=list)
    gained: list[str] = field(default_factory=list)

    def _omitted(self) -> tuple[str, ...]:
        return () if self.paired else ("paired_a", "paired_b")


@dataclass
class Figure(_Result):
    """One acceptance figure on both sides, its change B - A and the sides' intervals."""

    a: float | None
    b: float | None
    change: float | None
    a_ci: Interval | None
    b_ci: Interval | None


@dataclass
class PerPosition(_Result):
    """Per-position acceptance on both sides, with the sides' intervals."""

    a: list[float] | None
    b: list[float] | None
    a_ci: list[Interval | None] | None
    b_ci: list[Interval | None] | None


@dataclass
class AcceptanceChange(_Result):
    """The acceptance figures of one task on both sides (from the records)."""

    mean_acceptance_length: Figure
    acceptance_rate: Figure
    per_position_acceptance: PerPosition
    drafts: AB
    ci_reason: AB


@dataclass
class OutputChange(_Result):
    """A question whose completion changed between A and B: the first divergent
    token (``unit`` ``token``) or character (``character``, a baseline side keeps only
    the token ids' hash)."""

    question_id: str
    first_divergence: int | None
    unit: str

    def to_json(self) -> dict[str, Json]:
        if self.unit == "token":
            return {"question_id": self.question_id, "first_divergence": self.first_divergence, "unit": self.unit}
        return {"question_id": self.question_id, "unit": self.unit, "first_divergence": self.first_divergence}


@dataclass
class OutputsChanged(_Result):
    """Completions of one task compared between A and B (same variant)."""

    compared: int
    changed: int
    changes: list[OutputChange]


@dataclass
class Flipped(_Result):
    """A question right on one side and wrong on the other (``direction`` ``lost``:
    right in A), with both answers and completions."""

    question_id: str
    direction: str
    gold: str
    a_answer: str | None
    b_answer: str | None
    a_completion: str | None
    b_completion: str | None


_BOTH_SIDES = ("accuracy", "errors", "num_requests", "acceptance", "outputs", "flipped")


@dataclass
class TaskEntry(_Result):
    """One variant's task in the diff. ``in_a`` / ``in_b``: whether each side has it;
    the rest only when both do (and only then in the JSON form): accuracy per
    pipeline, failed requests and requests per side, acceptance (None when neither
    side drafted), changed outputs, flipped questions under ``pipeline``."""

    config: str
    variant: str
    task: str
    in_a: bool
    in_b: bool
    pipeline: str
    accuracy: dict[str, AccuracyChange] = field(default_factory=dict)
    errors: AB = field(default_factory=lambda: AB(0, 0))
    num_requests: AB = field(default_factory=lambda: AB(0, 0))
    acceptance: AcceptanceChange | None = None
    outputs: OutputsChanged = field(default_factory=lambda: OutputsChanged(0, 0, []))
    flipped: list[Flipped] = field(default_factory=list)

    def _omitted(self) -> tuple[str, ...]:
        return () if self.in_a and self.in_b else _BOTH_SIDES


@dataclass
class Mismatch(_Result):
    """A question that newly mismatches in B, with its first divergent token."""

    question_id: str
    first_divergence: int | None


@dataclass
class ComparisonEntry(_Result):
    """One in-run comparison of side B beside side A's: output-match rates and counts
    (``[matched, compared]``), change B - A, questions newly mismatched and matching
    again (None when A lacks the comparison), the noise reference of each side."""

    config: str
    baseline: str
    candidate: str
    task: str
    a: float | None
    b: float | None
    a_counts: list[int | None]
    b_counts: list[int | None]
    change: float | None
    newly_mismatched: list[Mismatch] | None
    matching_again: list[str] | None
    noise_a: NoiseRecord | None
    noise_b: NoiseRecord | None


#: The gate fields the diff shows of a gate failing in B (JSON form of the record).
_GATE_FIELDS = ("id", "kind", "verdict", "observed", "op", "limit", "detail", "questions", "expected_failure")


@dataclass
class FailingGate(_Result):
    """A gate failing in B, and its verdict in A (None when A lacks it)."""

    gate: GateResult
    verdict_a: str | None

    def to_json(self) -> dict[str, Json]:
        d = self.gate.model_dump(mode="json")
        return {**{k: d.get(k) for k in _GATE_FIELDS}, "verdict_a": self.verdict_a}


@dataclass
class GateChange(_Result):
    """A gate whose verdict changed from A to B."""

    id: str
    verdict_a: str
    verdict_b: str
    observed_a: float | None
    observed_b: float | None
    limit_b: float | None
    detail_b: str


@dataclass
class GateChanges(_Result):
    """The gates failing in B, the verdicts that changed, the gates of one side only."""

    failing_in_b: list[FailingGate] = field(default_factory=list)
    #: gates of B whose declared expected failure applied and that did not fail the run
    #: (XFAIL, non-strict XPASS), with their verdict in A
    expected_in_b: list[FailingGate] = field(default_factory=list)
    changed: list[GateChange] = field(default_factory=list)
    only_in_a: list[str] = field(default_factory=list)
    only_in_b: list[str] = field(default_factory=list)

    def extend(self, other: GateChanges) -> None:
        """Append ``other``'s entries (another config's) to this one's."""
        for f in dataclasses.fields(self):
            getattr(self, f.name).extend(getattr(other, f.name))


@dataclass
class Difference(_Result):
    """A difference between the sides besides the build (:func:`differences`):
    ``kind`` ``prompts``, ``config`` or ``engine``; ``unpairs`` when it stops questions
    from being paired."""

    config: str
    kind: str
    where: str
    field: str
    a: Json  # a setting's value as the record holds it
    b: Json
    unpairs: bool = False


@dataclass
class DiffResult(_Result):
    """What changed from side A to side B (:func:`diff_runs`); ``to_json()`` is the
    ``evalrun diff --json`` form. Accuracies and changes are fractions; every
    ``change`` is B - A."""

    a: SideHead
    b: SideHead
    tasks: list[TaskEntry] = field(default_factory=list)
    comparisons: list[ComparisonEntry] = field(default_factory=list)
    gates: GateChanges = field(default_factory=GateChanges)
    configs_only_in_a: list[str] = field(default_factory=list)
    configs_only_in_b: list[str] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)

    def to_json(self) -> dict[str, Json]:
        out = super().to_json()
        out["a"], out["b"] = dataclasses.asdict(self.a), dataclasses.asdict(self.b)
        return out


# --------------------------------------------------------------------------- the diff


def _scored(t: TaskView, pipe: str) -> dict[str, bool]:
    return {q: bool(v.correct.get(pipe)) for q, v in t.questions.items()
            if v.error is None and pipe in v.correct}


def _accuracy_change(ta: TaskView, tb: TaskView, pipe: str) -> AccuracyChange:
    ca, cb = _scored(ta, pipe), _scored(tb, pipe)
    ka, na, kb, nb = sum(ca.values()), len(ca), sum(cb.values()), len(cb)
    shared = set(ca) & set(cb)
    same = sorted(q for q in shared if ta.questions[q].prompt_hash == tb.questions[q].prompt_hash)
    out = AccuracyChange(
        pipeline=pipe, a=ka / na if na else None, a_correct=ka, a_scored=na,
        a_ci=list(wilson_interval(ka, na)) if na else None,
        b=kb / nb if nb else None, b_correct=kb, b_scored=nb, b_ci=list(wilson_interval(kb, nb)) if nb else None,
        prompt_changed=sorted(shared - set(same)),
    )
    if same:
        pc = paired_comparison({q: ca[q] for q in same}, {q: cb[q] for q in same})
        return dataclasses.replace(
            out, paired=True, n_paired=pc.n, paired_a=pc.accuracy_a, paired_b=pc.accuracy_b,
            change=pc.diff, change_ci=list(pc.diff_ci), p_value=pc.p_value, test=pc.test,
            one_sided_p_value_b_worse=pc.one_sided_p_value, lost=list(pc.a_only), gained=list(pc.b_only),
        )
    if ca and cb:
        p_two, p_worse = fisher_p_values(ka, na, kb, nb)
        return dataclasses.replace(
            out, change=kb / nb - ka / na, change_ci=list(newcombe_interval(ka, na, kb, nb)),
            p_value=p_two, test="fisher_exact", one_sided_p_value_b_worse=p_worse,
        )
    return out


def _first_char_divergence(a: str, b: str) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _outputs_changed(ta: TaskView, tb: TaskView) -> OutputsChanged:
    compared, changed = 0, []
    for q, a in ta.questions.items():
        b = tb.questions.get(q)
        if b is None or a.error or b.error or a.prompt_hash != b.prompt_hash:
            continue
        if a.token_hash is None or b.token_hash is None:
            continue
        compared += 1
        if a.token_hash == b.token_hash:
            continue
        if a.token_ids is not None and b.token_ids is not None:
            changed.append(OutputChange(q, first_divergence(a.token_ids, b.token_ids), "token"))
        else:
            changed.append(OutputChange(q, _first_char_divergence(a.completion or "", b.completion or ""),
                                        "character"))
    return OutputsChanged(compared=compared, changed=len(changed), changes=changed)


def _num(x: object) -> float | None:
    return float(x) if isinstance(x, (int, float)) else None


def _acceptance(ta: TaskView, tb: TaskView) -> AcceptanceChange | None:
    sa = ta.spec_decode.model_dump(mode="json") if ta.spec_decode is not None else {}
    sb = tb.spec_decode.model_dump(mode="json") if tb.spec_decode is not None else {}
    if not sa and not sb:
        return None

    def figure(key: str, a_ci: Interval | None, b_ci: Interval | None) -> Figure:
        a, b = _num(sa.get(key)), _num(sb.get(key))
        return Figure(a=a, b=b, change=(b - a) if a is not None and b is not None else None, a_ci=a_ci, b_ci=b_ci)

    return AcceptanceChange(
        mean_acceptance_length=figure("mean_acceptance_length", ta.mean_acceptance_length_ci,
                                      tb.mean_acceptance_length_ci),
        acceptance_rate=figure("acceptance_rate", ta.acceptance_rate_ci, tb.acceptance_rate_ci),
        per_position_acceptance=PerPosition(a=sa.get("per_position_acceptance"), b=sb.get("per_position_acceptance"),
                                            a_ci=ta.per_position_acceptance_ci, b_ci=tb.per_position_acceptance_ci),
        drafts=AB(sa.get("drafts"), sb.get("drafts")),
        ci_reason=AB(ta.acceptance_ci_reason, tb.acceptance_ci_reason),
    )


def _flipped(ta: TaskView, tb: TaskView, acc: AccuracyChange) -> list[Flipped]:
    out = []
    for direction, ids in (("lost", acc.lost), ("gained", acc.gained)):
        for q in ids:
            a, b = ta.questions[q], tb.questions[q]
            out.append(Flipped(question_id=q, direction=direction, gold=a.gold,
                               a_answer=a.answers.get(acc.pipeline), b_answer=b.answers.get(acc.pipeline),
                               a_completion=a.completion, b_completion=b.completion))
    return out


def diff_runs(a: str | Path | Side, b: str | Path | Side) -> DiffResult:
    """Compare side B against side A.

    Args:
        a, b: paths (see :func:`harness.report.diff_sides.load_side`) or loaded sides.

    Returns:
        the :class:`DiffResult`: per config, variant and task of either side a
        :class:`TaskEntry`, per in-run comparison of B a :class:`ComparisonEntry`, the
        gate changes, the configs of one side only and the :func:`differences`.

    Raises:
        DiffError: from :func:`load_side`.
    """
    sa = a if isinstance(a, Side) else load_side(a)
    sb = b if isinstance(b, Side) else load_side(b)
    out = DiffResult(
        a=sa.head(), b=sb.head(),
        configs_only_in_a=sorted(set(sa.configs) - set(sb.configs)),
        configs_only_in_b=sorted(set(sb.configs) - set(sa.configs)),
        differences=differences(sa, sb),
    )
    for cname in [c for c in sa.configs if c in sb.configs]:
        ca, cb = sa.configs[cname], sb.configs[cname]
        pipe = cb.pipeline or ca.pipeline or "flexible-numeric"
        out.tasks += _task_entries(cname, ca, cb, pipe)
        out.comparisons += _comparison_entries(cname, ca, cb)
        out.gates.extend(_gate_changes(ca.gates, cb.gates))
    for cname in out.configs_only_in_b:  # a gate that fails B is named, whether or not A ran its config
        out.gates.extend(_gate_changes({}, sb.configs[cname].gates))
    return out


def _task_entries(cname: str, ca: ConfigView, cb: ConfigView, pipe: str) -> list[TaskEntry]:
    """One entry per variant and task of either side (see :func:`diff_runs`)."""
    out = []
    vnames = list(ca.variants) + [v for v in cb.variants if v not in ca.variants]
    for vname in vnames:
        va, vb = ca.variants.get(vname), cb.variants.get(vname)
        tasks_a, tasks_b = (va.tasks if va else {}), (vb.tasks if vb else {})
        for tname in list(tasks_a) + [t for t in tasks_b if t not in tasks_a]:
            ta, tb = tasks_a.get(tname), tasks_b.get(tname)
            entry = TaskEntry(config=cname, variant=vname, task=tname, in_a=ta is not None, in_b=tb is not None,
                              pipeline=pipe)
            if ta is not None and tb is not None:
                entry.accuracy = {p: _accuracy_change(ta, tb, p) for p in _pipelines(ta, tb)}
                entry.errors = AB(*(sum(1 for q in t.questions.values() if q.error) for t in (ta, tb)))
                entry.num_requests = AB(len(ta.questions), len(tb.questions))
                entry.acceptance = _acceptance(ta, tb)
                entry.outputs = _outputs_changed(ta, tb)
                entry.flipped = _flipped(ta, tb, entry.accuracy.get(pipe) or _accuracy_change(ta, tb, pipe))
            out.append(entry)
    return out


def _pipelines(ta: TaskView, tb: TaskView) -> list[str]:
    """The answer pipelines of a task on either side, as each side's record lists them
    (:attr:`TaskView.pipelines`): A's, then those only B has."""
    return list(ta.pipelines) + [p for p in tb.pipelines if p not in ta.pipelines]


def _comparison_entries(cname: str, ca: ConfigView, cb: ConfigView) -> list[ComparisonEntry]:
    """One entry per in-run comparison of side B, beside side A's (see :func:`diff_runs`)."""
    out = []
    comps_a = {(x.baseline, x.candidate, x.task): x for x in ca.comparisons}
    for x in cb.comparisons:
        key = (x.baseline, x.candidate, x.task)
        y = comps_a.get(key)
        ra, rb = (y.output_match_rate if y else None), x.output_match_rate
        ma, mb = (y.mismatched if y else {}), x.mismatched
        out.append(ComparisonEntry(
            config=cname, baseline=key[0], candidate=key[1], task=key[2],
            a=ra, b=rb, a_counts=[y.matched if y else None, y.compared if y else None],
            b_counts=[x.matched, x.compared],
            change=(rb - ra) if ra is not None and rb is not None else None,
            newly_mismatched=[Mismatch(q, mb[q]) for q in mb if q not in ma] if y else None,
            matching_again=sorted(q for q in ma if q not in mb) if y else None,
            noise_a=y.noise if y else None, noise_b=x.noise,
        ))
    return out


def _gate_changes(ga: Mapping[str, GateResult], gb: Mapping[str, GateResult]) -> GateChanges:
    """The gates failing in B, the verdicts that changed, and the gates of one side only."""
    out = GateChanges()
    for gid, g in gb.items():
        if g.fails_run:
            out.failing_in_b.append(FailingGate(g, ga[gid].verdict if gid in ga else None))
        elif g.verdict in ("XFAIL", "XPASS"):
            out.expected_in_b.append(FailingGate(g, ga[gid].verdict if gid in ga else None))
        if gid in ga and ga[gid].verdict != g.verdict:
            out.changed.append(GateChange(id=gid, verdict_a=ga[gid].verdict, verdict_b=g.verdict,
                                          observed_a=ga[gid].observed, observed_b=g.observed,
                                          limit_b=g.limit, detail_b=g.detail))
    if ga:  # a baseline side has no gates: nothing is "only in B" then
        out.only_in_b += [gid for gid in gb if gid not in ga]
    out.only_in_a += [gid for gid in ga if gid not in gb]
    return out


#: Task settings that change the prompt or the completion (few-shot count, data
#: kind, question count, budget, sampling): a difference makes the runs not like for like.
_PROMPT_KEYS = ("kind", "num_fewshot", "num_questions", "max_tokens", "temperature", "seed")
#: Engine facts (``/server_info``) compared between the two runs.
_ENGINE_KEYS = ("vllm_version", "platform", "dtype", "async_scheduling", "speculative_method",
                "num_speculative_tokens", "max_model_len", "enable_prefix_caching")


def differences(sa: Side, sb: Side) -> list[Difference]:
    """What differs between the two sides besides the build under test.

    Compared per config present on both sides: the config file's SHA-256; per task
    the settings that shape prompts and completions (:data:`_PROMPT_KEYS`), the data
    hash, the stop strings and the prompts themselves (questions with the same id
    and a different prompt hash); per variant the engine facts (:data:`_ENGINE_KEYS`).
    A side that lacks an item (a baseline file has no task settings) is not compared
    on it.

    Returns:
        one :class:`Difference` each; ``unpairs`` is True for a difference that stops
        questions from being paired (their prompts differ), in which case the accuracy
        change of that task is unpaired for those questions.
    """
    out: list[Difference] = []
    for cname in [c for c in sa.configs if c in sb.configs]:
        ca, cb = sa.configs[cname], sb.configs[cname]

        def add(kind: str, where: str, setting: str, a: Json, b: Json, unpairs: bool = False) -> None:
            out.append(Difference(cname, kind, where, setting, a, b, unpairs))  # noqa: B023 - called in this iteration only

        if ca.sha256 and cb.sha256 and ca.sha256 != cb.sha256:
            add("config", "config file", "sha256", ca.sha256[:12], cb.sha256[:12])
        ta, tb = ca.task_specs or {}, cb.task_specs or {}
        for t in [t for t in ta if t in tb]:
            for k in _PROMPT_KEYS:
                if ta[t].get(k) != tb[t].get(k):
                    add("prompts", f"task {t}", k, ta[t].get(k), tb[t].get(k), k in ("kind", "num_fewshot"))
        da, db = ca.datasets, cb.datasets
        for t in [t for t in da if t in db]:
            if da[t].sha256 != db[t].sha256:
                add("prompts", f"task {t}", "data hash (questions and few-shot items)",
                    (da[t].sha256 or "")[:12], (db[t].sha256 or "")[:12], True)
            if da[t].stop != db[t].stop:
                add("prompts", f"task {t}", "stop strings", list(da[t].stop), list(db[t].stop))
        for v in [v for v in ca.variants if v in cb.variants]:
            ea, eb = ca.variants[v].engine, cb.variants[v].engine
            if ea is not None and eb is not None:
                for k in _ENGINE_KEYS:
                    if getattr(ea, k) != getattr(eb, k):
                        add("engine", f"variant {v}", k, getattr(ea, k), getattr(eb, k))
            for t in [t for t in ca.variants[v].tasks if t in cb.variants[v].tasks]:
                qa = ca.variants[v].tasks[t].questions
                qb = cb.variants[v].tasks[t].questions
                shared = [q for q in qa if q in qb]
                changed = [q for q in shared if qa[q].prompt_hash != qb[q].prompt_hash]
                if changed:
                    add("prompts", f"variant {v} task {t}", "prompt text",
                        f"{len(changed)} of {len(shared)} shared questions have another prompt",
                        ", ".join(changed[:5]) + (" ..." if len(changed) > 5 else ""), True)
    return out
