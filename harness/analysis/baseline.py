"""Stored baselines: a last-known-good record per config, and the gates against it.

A baseline is one JSON file per config, ``<baseline dir>/<config>.json`` (default
``results/baselines/``; a folder the user can commit, or any path given with
``--baseline DIR``). ``evalrun --config LIST --update-baseline`` writes it from a run in
which every gate of that config passed; later runs of the config are gated against it
in addition to the in-run reference:

* ``baseline_accuracy_drop`` (per variant and task): fails when the accuracy dropped
  since the baseline by more than ``gates.baseline_max_accuracy_drop`` **or** is
  significantly lower at ``gates.baseline_alpha`` (one-sided). Paired over the same
  question ids and prompts (exact one-sided McNemar, :func:`harness.analysis.stats.paired_comparison`)
  when the baseline stores per-question correctness (it always does when written by
  evalrun); otherwise Fisher's exact test, one-sided (``scipy.stats.fisher_exact``).
  An improvement never fails.
* ``baseline_acceptance_length_drop`` (per speculative variant and task): fails when
  mean acceptance length dropped since the baseline by more than
  ``gates.baseline_max_acceptance_length_drop`` tokens.

Baseline file (``schema`` :data:`BASELINE_SCHEMA`)::

    {"schema", "config", "config_sha256", "config_path", "written_at",
     "source_run": {"run_id", "path", "started_at", "git_revision", "vllm_version", "platform"},
     "pipeline",                       # the answer pipeline the config's gates read
     "variants": {<variant>: {"engine": {...}, "tasks": {<task>: {
         "num_requests", "error_count", "accuracy", "accuracy_ci", "correct", "scored",
         "spec_decode", "mean_acceptance_length_ci", "acceptance_rate_ci",
         "per_position_acceptance_ci",
         "questions": {<question id>: {"prompt_hash", "gold", "correct": {<pipeline>: bool},
                                      "answers", "completion", "token_ids_sha256", "error"}}}}}},
     "comparisons": [{"baseline", "candidate", "task", "output_match_rate", "compared",
                      "matched", "mismatched": [question ids]}]}
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.config.loader import ModelConfig
from harness.analysis.gates import GateResult, Measurements
from harness.records.run_record import utc_now
from harness.records.samples import Sample, read_jsonl
from harness.analysis.scoring import correctness
from harness.analysis.stats import paired_comparison

__all__ = [
    "BASELINE_SCHEMA",
    "BaselineError",
    "baseline_path",
    "make_baseline",
    "write_baselines",
    "load_baseline",
    "evaluate_baseline_gates",
    "baseline_gates_for_run",
]

BASELINE_SCHEMA = "evalrun-baseline/1"


class BaselineError(ValueError):
    """A baseline cannot be written or read; the message names the file or config."""


def baseline_path(baseline_dir: str | Path, config: str) -> Path:
    """``<baseline_dir>/<config>.json``."""
    return Path(baseline_dir) / f"{config}.json"


def token_ids_hash(ids: Sequence[int] | None) -> str | None:
    """First 16 hex digits of the SHA-256 of the token ids written as comma-separated
    decimal integers (``"1,2,3"``); None when there are no ids."""
    if ids is None:
        return None
    return hashlib.sha256(",".join(str(int(i)) for i in ids).encode()).hexdigest()[:16]


def _question(s: Sample) -> dict[str, Any]:
    return {
        "prompt_hash": s.prompt_hash,
        "gold": s.gold,
        "correct": dict(s.correct),
        "answers": dict(s.answers),
        "completion": s.completion,
        "token_ids_sha256": token_ids_hash(s.token_ids),
        "error": s.error,
    }


def config_pipeline(crec: Mapping[str, Any]) -> str:
    """The answer pipeline a config record's gates read: its ``pipeline`` key (written
    by the runner), else its comparisons', else ``flexible-extract``."""
    if crec.get("pipeline"):
        return crec["pipeline"]
    for comp in crec.get("comparisons", []):
        if comp.get("pipeline"):
            return comp["pipeline"]
    return "flexible-extract"


def make_baseline(record: Mapping[str, Any], run_dir: str | Path, config: str,
                  pipeline: str | None = None) -> dict[str, Any]:
    """Build the baseline document of one config from a run record and its samples.

    Args:
        record: the run record (``run.json`` as a dict).
        run_dir: the run folder (samples are read from it).
        config: the config's name.
        pipeline: the answer pipeline the config's gates read (default: the one the
            record's comparisons name, else ``flexible-extract``).

    Returns:
        The baseline dict (see the module docstring).

    Raises:
        BaselineError: the config is not in the record, or a samples file is missing
            or unreadable.
    """
    run_dir = Path(run_dir)
    crec = next((c for c in record.get("configs", []) if c.get("name") == config), None)
    if crec is None:
        raise BaselineError(f"config {config!r} is not in run {record.get('run_id')}")
    prov = record.get("provenance", {})
    doc: dict[str, Any] = {
        "schema": BASELINE_SCHEMA,
        "config": config,
        "config_sha256": crec.get("sha256"),
        "config_path": crec.get("path"),
        "written_at": utc_now(),
        "source_run": {
            "run_id": record.get("run_id"),
            "path": str(run_dir),
            "started_at": prov.get("started_at"),
            "git_revision": prov.get("git_revision"),
            "vllm_version": prov.get("vllm_version"),
            "platform": prov.get("platform"),
        },
        "pipeline": pipeline or config_pipeline(crec),
        "variants": {},
        "comparisons": [],
    }
    for vname, v in crec.get("variants", {}).items():
        vdoc: dict[str, Any] = {"engine": v.get("engine"), "tasks": {}}
        for tname, t in v.get("tasks", {}).items():
            if t.get("status") != "ran":
                continue
            spath = run_dir / t["samples"]
            try:
                samples = read_jsonl(spath)
            except (OSError, ValueError) as e:
                raise BaselineError(f"{spath}: cannot read samples for the baseline: {e}") from e
            vdoc["tasks"][tname] = {
                **{k: t.get(k) for k in (
                    "num_requests", "error_count", "accuracy", "accuracy_ci", "correct", "scored",
                    "spec_decode", "mean_acceptance_length_ci", "acceptance_rate_ci",
                    "per_position_acceptance_ci")},
                "questions": {s.question_id: _question(s) for s in samples},
            }
        doc["variants"][vname] = vdoc
    for comp in crec.get("comparisons", []):
        doc["comparisons"].append({
            "baseline": comp["baseline"], "candidate": comp["candidate"], "task": comp["task"],
            "output_match_rate": comp.get("output_match_rate"), "compared": comp.get("compared"),
            "matched": comp.get("matched"),
            "mismatched": [mm["question_id"] for mm in comp.get("mismatches", [])],
        })
    return doc


def write_baselines(record: Mapping[str, Any], run_dir: str | Path, baseline_dir: str | Path
                    ) -> list[tuple[str, Path | None, str]]:
    """Write ``<baseline_dir>/<config>.json`` for every config of the run whose gates
    passed.

    A config is written when no gate failed, nothing errored (no config error, no
    variant whose server failed) and at least one gate passed. Gates that were NOT
    RUN because an optional task had no data or a variant was left out with
    ``--variant`` do not stop it: the baseline holds what ran, and the message names
    what was left out (those variants and tasks are then not in the file, so later
    runs are not gated on them).

    Returns:
        One ``(config, path or None, message)`` per config of the record; path is None
        when the config was skipped, and the message says why.

    Raises:
        BaselineError: a samples file of a passing config cannot be read.
        OSError: the folder or file cannot be written.
    """
    out = []
    bdir = Path(baseline_dir)
    for crec in record.get("configs", []):
        name = crec.get("name")
        gates = crec.get("gates", [])
        bad = [g["id"] for g in gates if g.get("passed") is False]
        not_run = [g for g in gates if g.get("passed") is None]
        broken = [f"variant {v}: {x['error'].splitlines()[0]}" for v, x in crec.get("variants", {}).items()
                  if x.get("error")]
        if not any(g.get("passed") is True for g in gates) or bad or crec.get("error") or broken:
            why = crec.get("error") or (
                f"gates not passed: {', '.join(bad[:5])}" + (" ..." if len(bad) > 5 else "") if bad
                else "; ".join(broken) if broken else "no gate was judged")
            out.append((name, None, f"baseline of {name} not updated: {why}"))
            continue
        doc = make_baseline(record, run_dir, name)
        bdir.mkdir(parents=True, exist_ok=True)
        path = baseline_path(bdir, name)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(path)
        msg = f"baseline of {name} written to {path} from run {record.get('run_id')}"
        if not_run:
            left = sorted({"/".join(x for x in (g.get("variant"), g.get("task")) if x) for g in not_run})
            reasons = sorted({str(g.get("detail", "")).removeprefix("not run: ") for g in not_run})
            msg += (f"; left out (NOT RUN, so not in the baseline and not gated against it later): "
                    f"{', '.join(left)} ({'; '.join(reasons)})")
        out.append((name, path, msg))
    return out


def load_baseline(path: str | Path) -> dict[str, Any]:
    """Read and check a baseline file.

    Raises:
        BaselineError: the file is missing, not JSON, of another schema, or lacks
            ``config`` / ``variants``.
    """
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise BaselineError(f"{p}: cannot read baseline: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise BaselineError(f"{p}: not a JSON baseline: {e}") from e
    if not isinstance(doc, dict) or doc.get("schema") != BASELINE_SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise BaselineError(f"{p}: schema {got!r}, this evalrun reads {BASELINE_SCHEMA!r}")
    if not isinstance(doc.get("variants"), dict) or not doc.get("config"):
        raise BaselineError(f"{p}: baseline lacks 'config' or 'variants'")
    doc["_path"] = str(p)
    return doc


def baseline_correctness(task: Mapping[str, Any], pipeline: str) -> dict[str, tuple[str, bool]]:
    """Question id -> (prompt hash, verdict of ``pipeline``) for the baseline's
    successful questions (empty when the baseline stores no questions)."""
    out = {}
    for qid, q in (task.get("questions") or {}).items():
        if q.get("error") is None and pipeline in (q.get("correct") or {}):
            out[qid] = (q.get("prompt_hash"), bool(q["correct"][pipeline]))
    return out


def _gate(gid, kind, config, variant, task, base_label, op, observed, limit, passed, detail, questions=()):
    return GateResult(id=gid, kind=kind, config=config, variant=variant, task=task, baseline=base_label,
                      op=op, observed=observed, limit=limit, passed=passed, detail=detail,
                      questions=tuple(questions))


def evaluate_baseline_gates(
    baseline: Mapping[str, Any],
    config: ModelConfig,
    samples_by: Mapping[tuple[str, str], Sequence[Sample]],
    m: Measurements,
) -> tuple[list[GateResult], list[str]]:
    """Judge the run of one config against its stored baseline.

    Args:
        baseline: a document from :func:`load_baseline` / :func:`make_baseline`.
        config: the config run.
        samples_by: ``(variant, task)`` -> this run's samples.
        m: this run's measurements (speculative metrics, ``not_run``).

    Returns:
        ``(gate results, notes)``. A variant or task absent from the baseline gets no
        gate (named in the notes: a new variant must not fail a run); one that did not
        run now is ``NOT RUN``.

    Semantics (module docstring): with b = questions right in the baseline and wrong
    now, c = the reverse, over the question ids present in both with the same prompt
    hash, drop = (b - c)/n and the one-sided exact McNemar p = P(Binomial(b + c, 1/2)
    >= b) (McNemar 1947); without paired data drop = p_base - p_now and p is
    Fisher's exact one-sided p of the 2x2 table [[correct_base, wrong_base],
    [correct_now, wrong_now]] (alternative: the baseline's odds of a right answer
    are greater; Fisher 1935, ``scipy.stats.fisher_exact``).
    """
    from scipy import stats as _st

    g = config.gates
    pipe = g.accuracy_pipeline
    label = f"baseline:{(baseline.get('source_run') or {}).get('run_id')}"
    results: list[GateResult] = []
    notes: list[str] = []
    if baseline.get("pipeline") and baseline["pipeline"] != pipe:
        notes.append(f"baseline was written with pipeline {baseline['pipeline']}, the config now reads {pipe}")
    for vname, vspec in config.variants.items():
        for tname in config.tasks:
            g = config.gates_for(tname)
            bt = ((baseline.get("variants") or {}).get(vname) or {}).get("tasks", {}).get(tname)
            if bt is None:
                notes.append(f"{vname}/{tname}: not in the baseline, not gated against it")
                continue
            prefix = f"{config.name}/{vname}/{tname}"
            nr = m.not_run.get((vname, None)) or m.not_run.get((vname, tname))
            cur = samples_by.get((vname, tname))
            if g.baseline_max_accuracy_drop is not None:
                gid = f"{prefix}/baseline_accuracy_drop"
                if nr is not None or cur is None:
                    results.append(_gate(gid, "baseline_accuracy_drop", config.name, vname, tname, label, "<=",
                                         None, g.baseline_max_accuracy_drop, None, f"not run: {nr or 'no samples'}"))
                else:
                    results.append(_accuracy_vs_baseline(gid, config.name, vname, tname, label, bt, cur, pipe,
                                                         g.baseline_max_accuracy_drop, g.baseline_alpha, _st))
            if vspec.speculative_config is not None and g.baseline_max_acceptance_length_drop is not None:
                gid = f"{prefix}/baseline_acceptance_length_drop"
                lim = g.baseline_max_acceptance_length_drop
                base_mal = (bt.get("spec_decode") or {}).get("mean_acceptance_length")
                if base_mal is None:
                    notes.append(f"{vname}/{tname}: the baseline has no mean acceptance length, not gated")
                    continue
                if nr is not None:
                    results.append(_gate(gid, "baseline_acceptance_length_drop", config.name, vname, tname, label,
                                         "<=", None, lim, None, f"not run: {nr}"))
                    continue
                sm = m.spec.get((vname, tname))
                if sm is None or sm.mean_acceptance_length is None:
                    results.append(_gate(gid, "baseline_acceptance_length_drop", config.name, vname, tname, label,
                                         "<=", None, lim, False,
                                         f"mean acceptance length missing now (baseline {base_mal:.3f})"))
                    continue
                drop = base_mal - sm.mean_acceptance_length
                ok = drop <= lim
                ci = bt.get("mean_acceptance_length_ci")
                results.append(_gate(
                    gid, "baseline_acceptance_length_drop", config.name, vname, tname, label, "<=", drop, lim, ok,
                    f"mean acceptance length baseline {base_mal:.3f}"
                    + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
                    + f" -> now {sm.mean_acceptance_length:.3f}: drop {drop:.3f} "
                    + ("<=" if ok else ">") + f" {lim}",
                ))
    return results, notes


def _accuracy_vs_baseline(gid, config, vname, tname, label, bt, cur, pipe, limit, alpha, _st) -> GateResult:
    base = baseline_correctness(bt, pipe)
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
        a_acc, b_acc, lost = pc.accuracy_a, pc.accuracy_b, pc.a_only
    else:
        cb = int(bt.get("correct", {}).get(pipe) or 0)
        nb = int(bt.get("scored", {}).get(pipe) or 0)
        cn, nn = sum(now.values()), len(now)
        if nb == 0 or nn == 0:
            return _gate(gid, "baseline_accuracy_drop", config, vname, tname, label, "<=", None, limit, False,
                         "no scored question on one side: accuracy cannot be compared with the baseline")
        a_acc, b_acc = cb / nb, cn / nn
        drop = a_acc - b_acc
        p = float(_st.fisher_exact([[cb, nb - cb], [cn, nn - cn]], alternative="greater")[1])
        how = f"unpaired (baseline has no per-question data for these prompts): {cb}/{nb} vs {cn}/{nn}; one-sided Fisher exact p={p:.4g}"
        lost = ()
    signif = p < alpha
    ok = drop <= limit and not signif
    detail = f"{pipe} accuracy baseline {a_acc:.4f} -> now {b_acc:.4f} (drop {drop:.4f}); {how}"
    if changed_prompt:
        detail += f"; {changed_prompt} question(s) have a different prompt than in the baseline and are not paired"
    why = []
    if drop > limit:
        why.append(f"drop {drop:.4f} > {limit}")
    if signif:
        why.append(f"significantly lower (p={p:.4g} < alpha {alpha})")
    if why:
        detail += "; FAILED: " + "; ".join(why)
    return _gate(gid, "baseline_accuracy_drop", config, vname, tname, label, "<=", drop, limit, ok, detail,
                 lost if not ok else ())


def baseline_gates_for_run(
    baseline_dir: str | Path,
    config: ModelConfig,
    samples_by: Mapping[tuple[str, str], Sequence[Sample]],
    m: Measurements,
) -> tuple[dict[str, Any], list[GateResult]]:
    """What the runner calls per config: find ``<baseline_dir>/<config>.json`` and,
    when it exists, judge the run against it.

    Returns:
        ``(info, gate results)``; info is ``{"path", "found", "source_run_id",
        "written_at", "config_sha256_matches", "notes"}`` (or with ``error``). No file:
        no gates. An unreadable file: one failing ``baseline_readable`` gate, so a
        corrupt baseline never passes silently.
    """
    path = baseline_path(baseline_dir, config.name)
    info: dict[str, Any] = {"path": str(path), "found": path.is_file()}
    if not path.is_file():
        return info, []
    try:
        doc = load_baseline(path)
    except BaselineError as e:
        info["error"] = str(e)
        return info, [_gate(f"{config.name}/baseline_readable", "baseline_readable", config.name, "-", None,
                            str(path), "==", None, None, False, str(e))]
    results, notes = evaluate_baseline_gates(doc, config, samples_by, m)
    info.update(
        source_run_id=(doc.get("source_run") or {}).get("run_id"),
        written_at=doc.get("written_at"),
        config_sha256_matches=doc.get("config_sha256") == config.sha256,
        notes=notes,
    )
    return info, results
