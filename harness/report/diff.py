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

Output: Markdown (to the terminal, or ``--output FILE``; fit for a pull-request
comment) or ``--json``. :func:`diff_runs` returns the JSON form.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from harness.report.summary import fmt
from harness.records.atomic import write_atomic
from harness.records.baselines import BaselineDoc, BaselineTask, token_ids_hash
from harness.records.measures import EngineFactsRecord, SpecDecodeRecord
from harness.records.run_record import DatasetRef, GateResult, NoiseRecord, RunRecord, TaskResult, outcome_word
from harness.records.samples import Sample, read_jsonl
from harness.analysis.stats import paired_comparison, wilson_interval
from harness.tasks.gsm8k import PIPELINES
import difflib
from harness.config.loader import PROJECT_ROOT
from harness.records.baselines import BASELINE_SCHEMAS, BaselineError, load_baseline
from harness.records.run_record import RunRecordError, load_run
from harness.analysis.scoring import first_divergence

__all__ = ["DiffError", "resolve_side", "differences", "load_side", "diff_runs", "render_diff_markdown",
           "newcombe_interval", "cli_main"]


class DiffError(ValueError):
    """A side of the diff cannot be read; the message names the path."""


# --------------------------------------------------------------------------- loading


def resolve_side(path: str | Path, results_dir: str | Path | None = None) -> Path:
    """A diff side as a path: as given when it exists, else a run id, i.e. the folder
    ``<results_dir>/<id>`` (default ``results/`` of the project).

    Raises:
        DiffError: neither exists; names both places and the nearest run ids.
    """


    p = Path(path)
    if p.exists():
        return p
    rdir = Path(results_dir) if results_dir is not None else PROJECT_ROOT / "results"
    if len(p.parts) == 1 and (rdir / p).exists():
        return rdir / p
    runs = sorted(x.name for x in rdir.glob("*") if (x / "run.json").is_file()) if rdir.is_dir() else []
    near = difflib.get_close_matches(str(path), runs, n=3, cutoff=0.5)
    raise DiffError(
        f"{p}: no such run folder, run.json or baseline file, and no run id {str(path)!r} in {rdir}"
        + (f"; nearest run ids: {', '.join(near)}" if near
           else (f"; latest runs: {', '.join(runs[-3:])}" if runs else ""))
    )


@dataclass(frozen=True)
class QuestionView:
    """One question of one task on one side, as the diff compares it: the prompt's
    hash, gold answer, verdict and answer per pipeline, completion, token ids (None on a
    baseline side, which keeps only their hash), the token ids' hash, and the error."""

    prompt_hash: str | None
    gold: Any
    correct: dict[str, Any]
    answers: dict[str, Any]
    completion: str | None
    token_ids: list[int] | None
    token_hash: str | None
    error: str | None


@dataclass(frozen=True)
class TaskView:
    """One task of one variant on one side: its questions by id and the record's
    acceptance figures (:class:`~harness.records.measures.SpecDecodeRecord`) with their
    intervals; ``record_counts`` is a baseline's stored ``correct`` / ``scored``."""

    questions: dict[str, QuestionView]
    spec_decode: SpecDecodeRecord | None
    mean_acceptance_length_ci: Any
    acceptance_rate_ci: Any
    per_position_acceptance_ci: Any
    acceptance_ci_reason: str | None
    record_counts: dict[str, Any] | None = None


@dataclass(frozen=True)
class VariantView:
    """One variant on one side: the engine's facts, its tasks, its error."""

    engine: EngineFactsRecord | None
    tasks: dict[str, TaskView]
    error: str | None


@dataclass(frozen=True)
class ComparisonView:
    """One in-run comparison on one side: output match, the mismatched question ids
    with their first divergence (None on a baseline side) and the noise reference."""

    baseline: str
    candidate: str
    task: str
    output_match_rate: float | None
    compared: int | None  # None: a baseline stored without counts
    matched: int | None
    mismatched: dict[str, int | None]
    noise: NoiseRecord | None


@dataclass(frozen=True)
class ConfigView:
    """One config on one side: gate pipeline, variants, comparisons, gates by id, the
    config file's SHA-256, the task settings and the data references by task name
    (a baseline side has no gates, settings or data references)."""

    pipeline: str | None
    variants: dict[str, VariantView]
    comparisons: list[ComparisonView]
    gates: dict[str, GateResult]
    sha256: str | None
    task_specs: dict[str, dict[str, Any]] | None
    datasets: dict[str, DatasetRef]


@dataclass(frozen=True)
class Side:
    """One side of a diff (:func:`load_side`): where it came from (``kind`` ``run`` or
    ``baseline``), its id, verdict, status and outcome, and its configs by name."""

    path: str
    kind: str
    id: str
    passed: bool | None
    status: str
    outcome: str
    configs: dict[str, ConfigView]

    def head(self) -> dict[str, Any]:
        """``{"path", "kind", "id", "passed", "status", "outcome"}`` for the diff's JSON form."""
        return {"path": self.path, "kind": self.kind, "id": self.id, "passed": self.passed,
                "status": self.status, "outcome": self.outcome}


def load_side(path: str | Path, results_dir: str | Path | None = None) -> Side:
    """Read one side: a run (:func:`harness.records.run_record.load_run` and its samples)
    or a baseline (:func:`harness.records.baselines.load_baseline`), as the typed
    :class:`Side` view.

    Raises:
        DiffError: the path does not exist, is not a run record or baseline, or a
            samples file named by the record cannot be read.
    """

    p = resolve_side(path, results_dir)
    if p.is_file():
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise DiffError(f"{p}: not a JSON run record or baseline: {e}") from e
        if isinstance(doc, dict) and doc.get("schema") in BASELINE_SCHEMAS:
            try:
                return _side_from_baseline(load_baseline(p), p)
            except BaselineError as e:
                raise DiffError(str(e)) from e
    try:
        rec = load_run(p)
    except RunRecordError as e:
        raise DiffError(str(e)) from e
    return _side_from_run(rec, rec.path or p)


def _dump(x: Any) -> Any:
    return None if x is None else x.model_dump(mode="json")


def _task_view(t: TaskResult | BaselineTask, questions: dict[str, QuestionView],
               record_counts: dict[str, Any] | None = None) -> TaskView:
    return TaskView(questions=questions, spec_decode=t.spec_decode,
                    mean_acceptance_length_ci=t.mean_acceptance_length_ci, acceptance_rate_ci=t.acceptance_rate_ci,
                    per_position_acceptance_ci=t.per_position_acceptance_ci,
                    acceptance_ci_reason=getattr(t, "acceptance_ci_reason", None), record_counts=record_counts)


def _question(s: Sample) -> QuestionView:
    return QuestionView(prompt_hash=s.prompt_hash, gold=s.gold, correct=dict(s.correct), answers=dict(s.answers),
                        completion=s.completion, token_ids=list(s.token_ids) if s.token_ids is not None else None,
                        token_hash=token_ids_hash(s.token_ids), error=s.error)


def _side_from_run(rec: RunRecord, run_dir: Path) -> Side:
    configs = {}
    for c in rec.configs:
        variants = {}
        for vname, v in c.variants.items():
            tasks = {}
            for tname, t in v.tasks.items():
                spath = run_dir / t.samples
                try:
                    samples = read_jsonl(spath)
                except (OSError, ValueError) as e:
                    raise DiffError(f"{spath}: cannot read samples: {e}") from e
                tasks[tname] = _task_view(t, {s.question_id: _question(s) for s in samples})
            variants[vname] = VariantView(engine=v.engine, tasks=tasks, error=v.error)
        comps = [ComparisonView(baseline=comp.baseline, candidate=comp.candidate, task=comp.task,
                                output_match_rate=comp.output_match_rate, compared=comp.compared, matched=comp.matched,
                                mismatched={mm.question_id: mm.first_divergence for mm in comp.mismatches},
                                noise=comp.noise)
                 for comp in c.comparisons]
        configs[c.name] = ConfigView(
            pipeline=c.pipeline, variants=variants, comparisons=comps, gates={g.id: g for g in c.gates},
            sha256=c.sha256, task_specs=c.tasks or None,
            datasets={tid.split("/", 1)[1]: d for tid, d in rec.provenance.datasets.items()
                      if tid.split("/", 1)[0] == c.name})
    return Side(path=str(run_dir), kind="run", id=rec.run_id, passed=rec.passed, status=rec.status,
                outcome=rec.outcome, configs=configs)


def _side_from_baseline(doc: BaselineDoc, path: Path) -> Side:
    variants = {}
    for vname, v in doc.variants.items():
        tasks = {}
        for tname, t in v.tasks.items():
            qs = {qid: QuestionView(prompt_hash=q.prompt_hash, gold=q.gold, correct=dict(q.correct),
                                    answers=dict(q.answers), completion=q.completion, token_ids=None,
                                    token_hash=q.token_ids_sha256, error=q.error)
                  for qid, q in t.questions.items()}
            tasks[tname] = _task_view(t, qs, {"correct": t.correct, "scored": t.scored})
        variants[vname] = VariantView(engine=v.engine, tasks=tasks, error=None)
    comps = [ComparisonView(baseline=comp.baseline, candidate=comp.candidate, task=comp.task,
                            output_match_rate=comp.output_match_rate, compared=comp.compared, matched=comp.matched,
                            mismatched={q: None for q in comp.mismatched}, noise=None)
             for comp in doc.comparisons]
    cv = ConfigView(pipeline=doc.pipeline, variants=variants, comparisons=comps, gates={},
                    sha256=doc.config_sha256, task_specs=None, datasets={})
    return Side(path=str(path), kind="baseline", id=f"baseline of {doc.config} (run {doc.source_run.run_id})",
                passed=True, status="baseline", outcome="passed", configs={doc.config: cv})


# --------------------------------------------------------------------------- statistics


def newcombe_interval(x_a: int, n_a: int, x_b: int, n_b: int, confidence: float = 0.95) -> tuple[float, float]:
    """Interval for ``p_b - p_a`` of two independent proportions (x/n each).

    Newcombe's hybrid score interval (Newcombe 1998, "Interval estimation for the
    difference between independent proportions: comparison of eleven methods",
    Stat. Med. 17:873-890, method 10), from the Wilson intervals (l, u) of each::

        d = p_b - p_a
        low  = d - sqrt((p_b - l_b)^2 + (u_a - p_a)^2)
        high = d + sqrt((u_b - p_b)^2 + (p_a - l_a)^2)

    Raises:
        ValueError: n_a or n_b is 0, or counts out of range (from the Wilson interval).
    """
    if n_a <= 0 or n_b <= 0:
        raise ValueError("newcombe_interval needs n_a > 0 and n_b > 0")
    pa, pb = x_a / n_a, x_b / n_b
    la, ua = wilson_interval(x_a, n_a, confidence)
    lb, ub = wilson_interval(x_b, n_b, confidence)
    d = pb - pa
    return (d - math.sqrt((pb - lb) ** 2 + (ua - pa) ** 2), d + math.sqrt((ub - pb) ** 2 + (pa - la) ** 2))


def _scored(t: TaskView, pipe: str) -> dict[str, bool]:
    return {q: bool(v.correct.get(pipe)) for q, v in t.questions.items()
            if v.error is None and pipe in v.correct}


def _accuracy_change(ta: TaskView, tb: TaskView, pipe: str) -> dict[str, Any]:
    from scipy import stats as _st

    ca, cb = _scored(ta, pipe), _scored(tb, pipe)
    out: dict[str, Any] = {"pipeline": pipe}
    for side, c in (("a", ca), ("b", cb)):
        k, n = sum(c.values()), len(c)
        out[side] = k / n if n else None
        out[f"{side}_correct"], out[f"{side}_scored"] = k, n
        out[f"{side}_ci"] = list(wilson_interval(k, n)) if n else None
    shared = set(ca) & set(cb)
    same = sorted(q for q in shared if ta.questions[q].prompt_hash == tb.questions[q].prompt_hash)
    out["prompt_changed"] = sorted(shared - set(same))
    if same:
        pc = paired_comparison({q: ca[q] for q in same}, {q: cb[q] for q in same})
        out.update(
            paired=True, n_paired=pc.n, paired_a=pc.accuracy_a, paired_b=pc.accuracy_b,
            change=pc.diff, change_ci=list(pc.diff_ci), p_value=pc.p_value, test=pc.test,
            one_sided_p_value_b_worse=pc.one_sided_p_value, lost=list(pc.a_only), gained=list(pc.b_only),
        )
    elif ca and cb:
        ka, na, kb, nb = out["a_correct"], out["a_scored"], out["b_correct"], out["b_scored"]
        out.update(
            paired=False, n_paired=0, change=kb / nb - ka / na,
            change_ci=list(newcombe_interval(ka, na, kb, nb)),
            p_value=float(_st.fisher_exact([[ka, na - ka], [kb, nb - kb]])[1]), test="fisher_exact",
            one_sided_p_value_b_worse=float(_st.fisher_exact([[ka, na - ka], [kb, nb - kb]], alternative="greater")[1]),
            lost=[], gained=[],
        )
    else:
        out.update(paired=False, n_paired=0, change=None, change_ci=None, p_value=None, test="none",
                   one_sided_p_value_b_worse=None, lost=[], gained=[])
    return out


def _first_char_divergence(a: str, b: str) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _outputs_changed(ta: TaskView, tb: TaskView) -> dict[str, Any]:

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
            changed.append({"question_id": q, "first_divergence": first_divergence(a.token_ids, b.token_ids),
                            "unit": "token"})
        else:
            changed.append({"question_id": q, "unit": "character",
                            "first_divergence": _first_char_divergence(a.completion or "", b.completion or "")})
    return {"compared": compared, "changed": len(changed), "changes": changed}


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) else None


def _acceptance(ta: TaskView, tb: TaskView) -> dict[str, Any] | None:
    sa, sb = _dump(ta.spec_decode) or {}, _dump(tb.spec_decode) or {}
    if not sa and not sb:
        return None
    out: dict[str, Any] = {}
    for key in ("mean_acceptance_length", "acceptance_rate"):
        a, b = _num(sa.get(key)), _num(sb.get(key))
        out[key] = {"a": a, "b": b, "change": (b - a) if a is not None and b is not None else None,
                    "a_ci": getattr(ta, f"{key}_ci"), "b_ci": getattr(tb, f"{key}_ci")}
    out["per_position_acceptance"] = {
        "a": sa.get("per_position_acceptance"), "b": sb.get("per_position_acceptance"),
        "a_ci": ta.per_position_acceptance_ci, "b_ci": tb.per_position_acceptance_ci,
    }
    out["drafts"] = {"a": sa.get("drafts"), "b": sb.get("drafts")}
    out["ci_reason"] = {"a": ta.acceptance_ci_reason, "b": tb.acceptance_ci_reason}
    return out


def _flipped(ta: TaskView, tb: TaskView, acc: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for direction, ids in (("lost", acc.get("lost", [])), ("gained", acc.get("gained", []))):
        for q in ids:
            a, b = ta.questions[q], tb.questions[q]
            out.append({
                "question_id": q, "direction": direction, "gold": a.gold,
                "a_answer": a.answers.get(acc["pipeline"]), "b_answer": b.answers.get(acc["pipeline"]),
                "a_completion": a.completion, "b_completion": b.completion,
            })
    return out


def diff_runs(a: str | Path | Side, b: str | Path | Side) -> dict[str, Any]:
    """Compare side B against side A.

    Args:
        a, b: paths (see :func:`load_side`) or already loaded sides.

    Returns:
        ``{"a": {"path", "kind", "id", "passed", "status"}, "b": {...},
        "tasks": [{"config", "variant", "task", "in_a", "in_b", "pipeline",
        "accuracy": {pipeline: {...}}, "errors": {"a", "b"}, "acceptance": {...} | None,
        "outputs": {"compared", "changed", "changes": [...]}, "flipped": [...]}],
        "comparisons": [{"config", "baseline", "candidate", "task", "a", "b", "change",
        "newly_mismatched", "matching_again", "noise_a", "noise_b"}],
        "gates": {"failing_in_b": [...], "changed": [...], "only_in_a": [...], "only_in_b": [...]},
        "configs_only_in_a": [...], "configs_only_in_b": [...]}``. Accuracies and changes
        are fractions; ``change`` is always B - A.

    Raises:
        DiffError: from :func:`load_side`.
    """
    sa = a if isinstance(a, Side) else load_side(a)
    sb = b if isinstance(b, Side) else load_side(b)
    out: dict[str, Any] = {
        "a": sa.head(), "b": sb.head(),
        "tasks": [], "comparisons": [],
        "gates": {"failing_in_b": [], "changed": [], "only_in_a": [], "only_in_b": []},
        "configs_only_in_a": sorted(set(sa.configs) - set(sb.configs)),
        "configs_only_in_b": sorted(set(sb.configs) - set(sa.configs)),
        "differences": differences(sa, sb),
    }
    for cname in [c for c in sa.configs if c in sb.configs]:
        ca, cb = sa.configs[cname], sb.configs[cname]
        pipe = cb.pipeline or ca.pipeline or "flexible-numeric"
        out["tasks"] += _task_entries(cname, ca, cb, pipe)
        out["comparisons"] += _comparison_entries(cname, ca, cb)
        for k, v in _gate_changes(ca.gates, cb.gates).items():
            out["gates"][k] += v
    return out


def _task_entries(cname: str, ca: ConfigView, cb: ConfigView, pipe: str) -> list[dict[str, Any]]:
    """One entry per variant and task of either side (see :func:`diff_runs`)."""
    out = []
    vnames = list(ca.variants) + [v for v in cb.variants if v not in ca.variants]
    for vname in vnames:
        va, vb = ca.variants.get(vname), cb.variants.get(vname)
        tasks_a, tasks_b = (va.tasks if va else {}), (vb.tasks if vb else {})
        for tname in list(tasks_a) + [t for t in tasks_b if t not in tasks_a]:
            ta, tb = tasks_a.get(tname), tasks_b.get(tname)
            entry: dict[str, Any] = {"config": cname, "variant": vname, "task": tname,
                                     "in_a": ta is not None, "in_b": tb is not None, "pipeline": pipe}
            if ta is None or tb is None:
                out.append(entry)
                continue
            entry["accuracy"] = {p: _accuracy_change(ta, tb, p) for p in PIPELINES}
            entry["errors"] = {s: sum(1 for q in t.questions.values() if q.error) for s, t in (("a", ta), ("b", tb))}
            entry["num_requests"] = {"a": len(ta.questions), "b": len(tb.questions)}
            entry["acceptance"] = _acceptance(ta, tb)
            entry["outputs"] = _outputs_changed(ta, tb)
            entry["flipped"] = _flipped(ta, tb, entry["accuracy"][pipe])
            out.append(entry)
    return out


def _comparison_entries(cname: str, ca: ConfigView, cb: ConfigView) -> list[dict[str, Any]]:
    """One entry per in-run comparison of side B, beside side A's (see :func:`diff_runs`)."""
    out = []
    comps_a = {(x.baseline, x.candidate, x.task): x for x in ca.comparisons}
    for x in cb.comparisons:
        key = (x.baseline, x.candidate, x.task)
        y = comps_a.get(key)
        ra, rb = (y.output_match_rate if y else None), x.output_match_rate
        ma, mb = (y.mismatched if y else {}), x.mismatched
        out.append({
            "config": cname, "baseline": key[0], "candidate": key[1], "task": key[2],
            "a": ra, "b": rb, "a_counts": [y.matched if y else None, y.compared if y else None],
            "b_counts": [x.matched, x.compared],
            "change": (rb - ra) if ra is not None and rb is not None else None,
            "newly_mismatched": [{"question_id": q,
                                  "first_divergence": mb[q]} for q in mb if q not in ma] if y else None,
            "matching_again": sorted(q for q in ma if q not in mb) if y else None,
            "noise_a": _dump(y.noise) if y else None, "noise_b": _dump(x.noise),
        })
    return out


def _gate_changes(ga: Mapping[str, GateResult], gb: Mapping[str, GateResult]) -> dict[str, list[Any]]:
    """The gates failing in B, the verdicts that changed, and the gates of one side only."""
    out: dict[str, list[Any]] = {"failing_in_b": [], "changed": [], "only_in_a": [], "only_in_b": []}
    for gid, g in gb.items():
        if g.passed is False:
            out["failing_in_b"].append({**_gate_view(g), "verdict_a": ga[gid].verdict if gid in ga else None})
        if gid in ga and ga[gid].verdict != g.verdict:
            out["changed"].append({
                "id": gid, "verdict_a": ga[gid].verdict, "verdict_b": g.verdict,
                "observed_a": ga[gid].observed, "observed_b": g.observed,
                "limit_b": g.limit, "detail_b": g.detail,
            })
    if ga:  # a baseline side has no gates: nothing is "only in B" then
        out["only_in_b"] += [gid for gid in gb if gid not in ga]
    out["only_in_a"] += [gid for gid in ga if gid not in gb]
    return out


#: Task settings that change the prompt or the completion (few-shot count, data
#: kind, question count, budget, sampling): a difference makes the runs not like for like.
_PROMPT_KEYS = ("kind", "num_fewshot", "num_questions", "max_tokens", "temperature", "seed")
#: Engine facts (``/server_info``) compared between the two runs.
_ENGINE_KEYS = ("vllm_version", "platform", "dtype", "async_scheduling", "speculative_method",
                "num_speculative_tokens", "max_model_len", "enable_prefix_caching")


def differences(sa: Side, sb: Side) -> list[dict[str, Any]]:
    """What differs between the two sides besides the build under test.

    Compared per config present on both sides: the config file's SHA-256; per task
    the settings that shape prompts and completions (:data:`_PROMPT_KEYS`), the data
    hash, the stop strings and the prompts themselves (questions with the same id
    and a different prompt hash); per variant the engine facts (:data:`_ENGINE_KEYS`).
    A side that lacks an item (a baseline file has no task settings) is not compared
    on it.

    Returns:
        ``[{"config", "kind": "prompts"|"config"|"engine", "where", "field", "a", "b",
        "unpairs": bool}]``; ``unpairs`` is True for a difference that stops questions
        from being paired (their prompts differ), in which case the accuracy change of
        that task is unpaired for those questions.
    """
    out: list[dict[str, Any]] = []
    for cname in [c for c in sa.configs if c in sb.configs]:
        ca, cb = sa.configs[cname], sb.configs[cname]

        def add(kind, where, field, a, b, unpairs=False):
            out.append({"config": cname, "kind": kind, "where": where, "field": field, "a": a, "b": b,  # noqa: B023 - called in this iteration only
                        "unpairs": unpairs})

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


def _gate_view(g: GateResult) -> dict[str, Any]:
    d = g.model_dump(mode="json")
    return {k: d.get(k) for k in ("id", "kind", "verdict", "observed", "op", "limit", "detail", "questions")}


# --------------------------------------------------------------------------- rendering


def _f(x: Any, d: int = 3) -> str:
    return fmt(x, d)


def _ci(ci: Any, d: int = 3) -> str:
    return f" [{ci[0]:.{d}f}, {ci[1]:.{d}f}]" if ci else ""


def _signed(x: float | None, d: int = 3) -> str:
    return "-" if x is None else f"{x:+.{d}f}"


def _p(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _esc(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(_esc(c) for c in r) + " |" for r in rows]
    return out


def _fence(text: str) -> list[str]:
    ticks = 3
    while "`" * ticks in text:
        ticks += 1
    return ["`" * ticks + "text", text, "`" * ticks]


def _render_differences(diffs: list[dict[str, Any]]) -> list[str]:
    """The "read this first" section: what differs besides the build, and which
    comparisons are unpaired because of it."""
    if not diffs:
        return []
    L = ["", "## Read first: A and B differ in more than the build", ""]
    L += _table(["config", "what", "where", "setting", "A", "B"],
                [[x["config"], x["kind"], x["where"], x["field"], x["a"], x["b"]] for x in diffs])
    unp = sorted({(x["config"], x["where"]) for x in diffs if x["unpairs"]})
    if unp:
        L.append("")
        L.append("The prompts differ, so questions cannot be paired where their prompts changed: "
                 + "; ".join(f"{c} {w}" for c, w in unp)
                 + ". Those accuracy changes are unpaired (Newcombe's interval, Fisher's exact test) "
                 "and output changes skip those questions; what can still be compared follows.")
    kinds = {x["kind"] for x in diffs}
    if kinds & {"config", "engine"}:
        L.append("")
        L.append("The config content or the engine differs: every change below mixes the build's effect "
                 "with these differences.")
    return L


def _render_gates(g: Mapping[str, Any]) -> list[str]:
    """Markdown lines: the gates failing in B and the verdicts that changed."""
    L: list[str] = []
    L += ["", "## Gates failing in B", ""]
    if not g["failing_in_b"]:
        L.append("none")
    for x in g["failing_in_b"]:
        lim = f" (limit {x['op']} {_f(x['limit'], 4)})" if x.get("limit") is not None else ""
        L.append(f"- **{x['id']}** (A: {x.get('verdict_a') or 'absent'}): observed {_f(x.get('observed'), 4)}{lim}: "
                 f"{x.get('detail')}")
        if x.get("questions"):
            qs = list(x["questions"])
            L.append(f"  - questions: {', '.join(qs[:50])}" + (f" ... ({len(qs)} in all)" if len(qs) > 50 else ""))
    if g["changed"]:
        L += ["", "### Gate verdicts that changed", ""]
        L += _table(["gate", "A", "B", "observed A", "observed B", "limit B"],
                    [[x["id"], x["verdict_a"], x["verdict_b"], _f(x["observed_a"], 4), _f(x["observed_b"], 4),
                      _f(x["limit_b"], 4)] for x in g["changed"]])
    return L


def _render_accuracy(tasks: list[dict[str, Any]], missing: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: accuracy per task and pipeline, tasks of one side only, failed requests."""
    L: list[str] = []
    L += ["", "## Accuracy", ""]
    rows = []
    for t in tasks:
        for pipe, x in t["accuracy"].items():
            rows.append([
                t["config"], t["variant"], t["task"], pipe + (" (gated)" if pipe == t["pipeline"] else ""),
                f"{_f(x['a'])}{_ci(x['a_ci'])} ({x['a_correct']}/{x['a_scored']})",
                f"{_f(x['b'])}{_ci(x['b_ci'])} ({x['b_correct']}/{x['b_scored']})",
                f"{_signed(x['change'])}{_ci(x['change_ci'])}"
                + (f" on {x['n_paired']} paired" if x["paired"] else " (unpaired)"),
                f"{_p(x['p_value'])} ({x['test']}); B worse: {_p(x['one_sided_p_value_b_worse'])}",
                f"-{len(x['lost'])} / +{len(x['gained'])}",
            ])
    L += _table(["config", "variant", "task", "pipeline", "A [95% CI]", "B [95% CI]", "change [95% CI]",
                 "p (test)", "flipped lost/gained"], rows)
    for t in missing:
        L.append(f"- {t['config']}/{t['variant']}/{t['task']}: only in {'A' if t['in_a'] else 'B'}")
    errs = [t for t in tasks if t["errors"]["a"] or t["errors"]["b"]]
    for t in errs:
        L.append(f"- {t['config']}/{t['variant']}/{t['task']}: failed requests A "
                 f"{t['errors']['a']}/{t['num_requests']['a']}, "
                 f"B {t['errors']['b']}/{t['num_requests']['b']} (not scored)")
    return L


def _render_acceptance(tasks: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: the acceptance figures of both sides, when any task has them."""
    L: list[str] = []
    acc_rows = []
    for t in tasks:
        x = t.get("acceptance")
        if not x:
            continue
        mal, rate, pp = x["mean_acceptance_length"], x["acceptance_rate"], x["per_position_acceptance"]
        acc_rows.append([
            t["config"], t["variant"], t["task"],
            _f(mal["a"]) + _ci(mal["a_ci"]), _f(mal["b"]) + _ci(mal["b_ci"]), _signed(mal["change"]),
            _f(rate["a"]) + _ci(rate["a_ci"]), _f(rate["b"]) + _ci(rate["b_ci"]), _signed(rate["change"]),
            " ".join(_f(v, 3) for v in pp["a"] or []) or "-", " ".join(_f(v, 3) for v in pp["b"] or []) or "-",
        ])
    if acc_rows:
        L += ["", "## Speculative decoding", ""]
        L += _table(["config", "variant", "task", "mean accept. len A", "B", "change", "accept. rate A", "B",
                     "change", "per-position A", "per-position B"], acc_rows)
        reasons = {r for t in tasks if t.get("acceptance") for r in t["acceptance"]["ci_reason"].values() if r}
        for r in sorted(reasons):
            L.append(f"- intervals: {r}")
    return L


def _render_comparisons(comparisons: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: in-run output match of both sides and the noise each was judged against."""
    L: list[str] = []
    if comparisons:
        L += ["", "## Output match between variants", ""]
        rows = []
        for x in comparisons:
            nm = x["newly_mismatched"]
            rows.append([
                x["config"], f"{x['baseline']} -> {x['candidate']}", x["task"],
                f"{_f(x['a'])} ({x['a_counts'][0]}/{x['a_counts'][1]})",
                f"{_f(x['b'])} ({x['b_counts'][0]}/{x['b_counts'][1]})",
                _signed(x["change"]),
                "-" if nm is None else (", ".join(
                    f"{m['question_id']}" + (f"@{m['first_divergence']}" if m["first_divergence"] is not None else "")
                    for m in nm[:20]) + (" ..." if len(nm) > 20 else "") or "none"),
                "-" if x["matching_again"] is None else (", ".join(x["matching_again"][:20]) or "none"),
            ])
        L += _table(["config", "pair", "task", "A", "B", "change", "newly mismatched in B (@first divergent token)",
                     "matching again in B"], rows)
        for x in comparisons:
            for side in ("a", "b"):
                nz = x.get(f"noise_{side}")
                if nz:
                    L.append(f"- {x['config']} {x['baseline']} -> {x['candidate']} {x['task']} ({side.upper()}): "
                             "judged against "
                             f"noise {_f(nz.get('noise_rate'))} ({nz.get('source')}); candidate mismatch rate "
                             f"{_f(nz.get('candidate_rate'))}, one-sided p={_p(nz.get('p_value'))}")
    return L


def _render_outputs(tasks: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: per task the questions whose completion changed between A and B."""
    L: list[str] = []
    L += ["", "## Outputs changed between A and B (same variant)", ""]
    rows = []
    for t in tasks:
        o = t["outputs"]
        firsts = ", ".join(
            f"{c['question_id']}@{c['first_divergence']}" + ("c" if c["unit"] == "character" else "")
            for c in o["changes"][:10]) + (" ..." if o["changed"] > 10 else "")
        rows.append([t["config"], t["variant"], t["task"], o["compared"], o["changed"], firsts or "-"])
    L += _table(["config", "variant", "task", "compared", "changed", "first divergence (token; c = character)"], rows)
    return L


def _render_flipped(tasks: list[dict[str, Any]], max_flipped: int) -> list[str]:
    """Markdown lines: the flipped questions with both completions (at most ``max_flipped`` per group)."""
    L: list[str] = []
    flipped = [t for t in tasks if t["flipped"]]
    if flipped:
        L += ["", "## Flipped questions", ""]
    for t in flipped:
        lost = [f for f in t["flipped"] if f["direction"] == "lost"]
        gained = [f for f in t["flipped"] if f["direction"] == "gained"]
        L += [f"### {t['config']} / {t['variant']} / {t['task']} ({t['pipeline']}): "
              f"{len(lost)} right in A and wrong in B, {len(gained)} wrong in A and right in B", ""]
        for group, name in ((lost, "lost"), (gained, "gained")):
            if not group:
                continue
            L.append(f"{name}: {', '.join(f['question_id'] for f in group)}")
            L.append("")
            for f in group[:max_flipped]:
                L.append(f"<details><summary>{f['question_id']} ({name}): gold {f['gold']}, "
                         f"A answered {f['a_answer']}, B answered {f['b_answer']}</summary>")
                L.append("")
                L.append("A:")
                L += _fence(f["a_completion"] or "")
                L.append("B:")
                L += _fence(f["b_completion"] or "")
                L += ["</details>", ""]
            if len(group) > max_flipped:
                L += [f"({len(group) - max_flipped} more {name} questions in the JSON form)", ""]
    return L


def render_diff_markdown(d: Mapping[str, Any], max_flipped: int = 20) -> str:
    """The diff as Markdown (fit for a pull-request comment).

    Args:
        d: :func:`diff_runs` output.
        max_flipped: flipped questions shown with completions per task and direction
            (the JSON form has all).
    """
    a, b = d["a"], d["b"]
    def verdict(side: Mapping[str, Any]) -> str:
        """The side's run outcome word (a baseline was a passed run)."""
        passed = side.get("passed")
        fallback = "incomplete" if passed is None else ("passed" if passed else "failed")
        return outcome_word(side.get("outcome") or fallback)

    L = [
        "# evalrun diff",
        "",
        f"- A: `{a['path']}` ({a['kind']} {a['id']}, {verdict(a)})",
        f"- B: `{b['path']}` ({b['kind']} {b['id']}, {verdict(b)})",
        "- changes are B - A; accuracy intervals are 95% Wilson, changes 95% paired Wald over the "
        "questions with the same id and prompt on both sides (McNemar p, exact below 25 discordant "
        "pairs; one-sided p for B worse), else Newcombe's hybrid interval with Fisher's exact p",
    ]
    for k in ("configs_only_in_a", "configs_only_in_b"):
        if d.get(k):
            L.append(f"- configs only in {k[-1].upper()}: {', '.join(d[k])}")
    L += _render_differences(d.get("differences") or [])
    L += _render_gates(d["gates"])
    tasks = [t for t in d["tasks"] if t["in_a"] and t["in_b"]]
    missing = [t for t in d["tasks"] if not (t["in_a"] and t["in_b"])]
    if not tasks:
        L += ["", "No config, variant and task ran on both sides: nothing to compare."]
    L += _render_accuracy(tasks, missing)
    L += _render_acceptance(tasks)
    L += _render_comparisons(d["comparisons"])
    L += _render_outputs(tasks)
    L += _render_flipped(tasks, max_flipped)
    return "\n".join(L) + "\n"

# --------------------------------------------------------------------------- CLI


#: Run statuses a diff refuses: the run did not finish measuring what it planned.
UNFINISHED_STATUSES = ("interrupted", "incomplete", "running", "error")


def unfinished_sides(d: dict[str, Any]) -> list[str]:
    """One message per side of a diff (from :func:`diff_runs`) whose run did not
    finish (status in :data:`UNFINISHED_STATUSES`); empty when both finished
    (``completed``) or are baselines."""
    out = []
    for side, label in (("a", "A"), ("b", "B")):
        info = d.get(side) or {}
        if info.get("status") == "error":
            raw = info.get("error")
            err: dict[str, Any] = raw if isinstance(raw, dict) else {}
            where = ", ".join(f"{k} {err[k]}" for k in ("stage", "config", "variant", "task") if err.get(k))
            out.append(f"run {label} ({info.get('path')}) has status error: an unexpected {err.get('type')} ended it "
                       f"({where or 'outside any stage'}): "
                       f"{(str(err.get('message') or '').splitlines() or [''])[0][:300]}; "
                       "the traceback is in its run.json")
        elif info.get("status") in UNFINISHED_STATUSES:
            out.append(f"run {label} ({info.get('path')}) is {info.get('status')}: "
                       "it did not run everything it planned")
    return out


def _peek(path: Path) -> dict[str, Any]:
    """``{"path", "status", "error"}`` of a run folder or run.json (its typed record,
    :func:`harness.records.run_record.load_run`, without its samples); status None when
    it is not a readable run record, e.g. a baseline."""

    try:
        rec = load_run(path)
    except RunRecordError:
        return {"path": str(path), "status": None}
    return {"path": str(path), "status": rec.status, "error": _dump(rec.error)}


def cli_main(argv: list[str]) -> int:
    """``evalrun diff RUN_A RUN_B [--output FILE] [--json] [--max-flipped N]``.

    Returns:
        0 when the diff was produced, 2 when a side cannot be read or is not a
        finished run (``status`` ``interrupted``, ``incomplete``, ``running`` or
        ``error``, whose exception, stage, config, variant and task are named):
        the command says which side and why instead of printing tables that would
        compare what was never measured.
    """
    p = argparse.ArgumentParser(
        prog="evalrun diff",
        description="Explain what changed from run A to run B (run folders, run.json files or baseline JSON files).",
    )
    p.add_argument("run_a", type=Path, help="run id, run folder, run.json, or baseline JSON (the reference side)")
    p.add_argument("run_b", type=Path, help="run id, run folder, run.json, or baseline JSON (the side under test)")
    p.add_argument("--results-dir", type=Path, default=None,
                   help="where run ids are looked up (default: the project's results/)")
    p.add_argument("--output", "-o", type=Path, default=None, help="write to this file instead of the terminal")
    p.add_argument("--json", action="store_true", help="JSON instead of Markdown")
    p.add_argument("--max-flipped", type=int, default=20,
                   help="flipped questions shown with both completions per task and direction (default 20)")
    args = p.parse_args(argv)
    try:
        pa, pb = resolve_side(args.run_a, args.results_dir), resolve_side(args.run_b, args.results_dir)
    except DiffError as e:
        print(f"evalrun diff: {e}", file=sys.stderr)
        return 2
    unfinished = unfinished_sides({"a": _peek(pa), "b": _peek(pb)})
    if not unfinished:
        try:
            d = diff_runs(load_side(pa), load_side(pb))
        except DiffError as e:
            print(f"evalrun diff: {e}", file=sys.stderr)
            return 2
        unfinished = unfinished_sides(d)
    if unfinished:
        for msg in unfinished:
            print(f"evalrun diff: {msg}", file=sys.stderr)
        print("evalrun diff: not compared: a diff of a run that did not finish would show what was never "
              "measured as unchanged; rerun it, or diff two completed runs", file=sys.stderr)
        return 2
    text = json.dumps(d, indent=2) + "\n" if args.json else render_diff_markdown(d, args.max_flipped)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(args.output, text)
        print(f"evalrun diff: written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
