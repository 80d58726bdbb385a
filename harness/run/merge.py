"""Shards and merge: split a model list over n CI agents, then combine their run records.

``evalrun --config LIST --shard i/n`` runs only shard i (1-based) of the list's configs;
``evalrun merge RUN...`` combines the n shard run folders into one run folder with one
record, ``summary.md``, JUnit file and exit code.

Shard assignment (:func:`assign_shards`) is deterministic and depends only on the set
of configs, not on their order in the list: configs are weighed by an estimate of their
cost, estimated GPU-seconds from earlier run records of the results folder where there
are any, else from stated defaults (:func:`harness.report.cost.config_cost_weights`;
without a results folder, number of variants x questions over all tasks,
:func:`config_weight`), sorted by weight (heaviest first, ties by name) and each
given to the currently lightest shard (ties: the lowest shard index). This is the
longest-processing-time-first rule (Graham 1969), whose largest shard is at most 4/3
of the optimum.

Every shard record carries ``shard``: its index, the count, the configs it ran and the
identity of the whole list (names and SHA-256 of every config). ``merge`` refuses
shards of different lists or builds (:func:`build_of`: evalrun version and git revision,
lm-eval version, and per variant name the engine build it ran, :func:`variant_engines`,
so a variant on the run's engine on two builds in two shards is refused while a variant
on its config's own build (an A/B config's ``<v>.baseline`` / ``<v>.candidate``) is
compared per config: two A/B configs of one list may name different candidates, as the
unsharded list runs them; ``--allow-mixed`` merges them
and says so), different shard counts, a missing or duplicated shard index, and a shard whose
samples files do not match the SHA-256 its record holds for them (:func:`verify_samples`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable, Sequence

from harness.config.plan import ConfigPlan
from harness.records.numerics_noise import joined_noise
from harness.records.run_record import ConfigResult, RunRecord, gates_passed
from harness.records.samples import sha256_file
from harness.records.shards import MergedShard, ShardInfo, ShardListRef
from harness.tasks import task_size

__all__ = ["MergeError", "parse_shard", "config_weight", "assign_shards", "shard_info", "merge_records", "shard_of",
           "build_of", "verify_samples"]


class MergeError(ValueError):
    """Shard records cannot be merged; the message names the run folders and the field."""


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` -> ``(i, n)`` with ``1 <= i <= n``.

    Raises:
        ValueError: not of that form (the message says what is expected).
    """
    try:
        i_s, n_s = text.split("/")
        i, n = int(i_s), int(n_s)
    except ValueError:
        raise ValueError(f"--shard {text!r}: expected i/n with integers, e.g. 2/4 (1-based)") from None
    if not (n >= 1 and 1 <= i <= n):
        raise ValueError(f"--shard {text!r}: need 1 <= i <= n (shards are numbered from 1)")
    return i, n


def config_weight(config_plan: ConfigPlan) -> int:
    """Cost estimate of one config: variants x questions summed over its tasks (>= 1)."""
    questions = sum(task_size(t.spec) for t in config_plan.tasks)
    return max(1, len(config_plan.variants) * questions)


def assign_shards(weights: dict[str, int], n: int) -> list[list[str]]:
    """Split config names over ``n`` shards, longest processing time first.

    Args:
        weights: config name -> weight (:func:`config_weight`).
        n: number of shards (>= 1).

    Returns:
        ``n`` lists of config names (a shard may be empty when there are fewer configs
        than shards); each list in name order. Depends only on ``weights``, not on its
        order.
    """
    loads = [0] * n
    shards: list[list[str]] = [[] for _ in range(n)]
    for name, w in sorted(weights.items(), key=lambda kv: (-kv[1], kv[0])):
        k = min(range(n), key=lambda j: (loads[j], j))
        shards[k].append(name)
        loads[k] += w
    return [sorted(s) for s in shards]


def list_identity(configs: Sequence[ConfigPlan]) -> ShardListRef:
    """Every config's name and SHA-256 (by name), and the SHA-256 of that list."""
    items = sorted(
        ({"name": config_plan.name, "sha256": config_plan.config.sha256} for config_plan in configs),
        key=lambda d: d["name"],
    )
    digest = hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()
    return ShardListRef(configs=items, sha256=digest)


def shard_info(configs: Sequence[ConfigPlan], i: int, n: int,
               results_dir: str | Path | None = None) -> tuple[list[str], ShardInfo]:
    """The config names of shard ``i`` of ``n`` and the ``shard`` field of its run record
    (index, count, its configs, every config's weight, the list's identity).

    With ``results_dir`` the weights are estimated GPU-seconds from its run records
    (:func:`harness.report.cost.config_cost_weights`; defaults where a config has none),
    else :func:`config_weight`. Raises ValueError for a variant whose parallel size is
    not a positive integer."""
    if results_dir is not None:
        from harness.report.cost import config_cost_weights
        from harness.report.history import load_records

        records = load_records(results_dir)[0] if Path(results_dir).is_dir() else []
        weights = config_cost_weights(configs, records)
    else:
        weights = {config_plan.name: config_weight(config_plan) for config_plan in configs}
    names = assign_shards(weights, n)[i - 1]
    return names, ShardInfo(index=i, count=n, configs=names, weights=weights, list=list_identity(configs))


def _verdict(configs: list[ConfigResult], could_not_run: bool) -> tuple[int, bool | None]:
    """Exit code and ``passed`` from the gates, as the runner decides them."""
    joint = gates_passed(g for c in configs for g in c.gates)
    if joint is False:
        return 1, False
    if could_not_run:
        return 2, None
    return 0, joint


def build_of(rec: RunRecord) -> dict[str, str | list[str] | None]:
    """The build a run ran on, as merge compares it: evalrun version, evalrun's git
    revision, lm-eval version, and the engine versions its variants' servers reported
    on ``/version`` (sorted; empty when no server answered)."""
    prov = rec.provenance
    engines = sorted({v.engine.vllm_version for c in rec.configs for v in c.variants.values()
                      if v.engine is not None and v.engine.vllm_version})
    return {"evalrun version": prov.evalrun_version, "git revision": prov.git_revision,
            "lm-eval version": prov.lm_eval.version if prov.lm_eval else None, "engine version": engines}


def variant_engines(rec: RunRecord) -> dict[str, list[str]]:
    """Per variant, the engine builds its servers ran: the version (and ``commit C`` when
    known) of the variant's recorded build, else the version its server reported on
    ``/version``; a variant with neither is left out.

    A variant on the run's engine (``--python`` / ``--build``) is keyed by its name across
    the record's configs (every shard must run one engine); a variant on a build its config
    names (``build:``, an A/B config's ``<v>.baseline`` / ``<v>.candidate``) by
    ``<config>/<variant>``: its build is part of the list (the list's hash checks it), and
    two configs of one list may name different candidates, as the unsharded list runs them."""
    out: dict[str, set[str]] = {}
    for c in rec.configs:
        for vname, v in c.variants.items():
            name = f"{c.name}/{vname}" if v.build_spec else vname
            version = v.build.version if v.build is not None and v.build.version else (
                v.engine.vllm_version if v.engine is not None else None)
            if version:
                commit = v.build.commit if v.build is not None else None
                out.setdefault(name, set()).add(version + (f" commit {commit}" if commit else ""))
    return {k: sorted(x) for k, x in out.items()}


def _common_builds(a: dict[str, list[str]], b: dict[str, list[str]]) -> tuple[dict[str, list[str]], ...]:
    """The two shards' builds of the variant names both ran on a known build (a shard
    whose servers never answered has nothing to compare)."""
    both = sorted(set(a) & set(b))
    return {k: a[k] for k in both}, {k: b[k] for k in both}


def verify_samples(rec: RunRecord) -> list[str]:
    """Check every samples file a record names against the SHA-256 it recorded.

    Returns:
        One message per problem, naming the run folder and the file: missing, not
        matching its hash (e.g. the record of a retried attempt over the samples of an
        earlier one), or no hash recorded (a record that cannot be verified).
    """
    base = Path(rec.path) if rec.path else None
    out = []
    for c in rec.configs:
        for vname, v in c.variants.items():
            for tname, t in v.tasks.items():
                files = [(t.samples, t.samples_sha256)]
                if t.rerun is not None:
                    files.append((t.rerun.samples, t.rerun.samples_sha256))
                for rel, want in files:
                    if base is None:
                        out.append(f"{rec.run_id}: {c.name}/{vname}/{tname}: the record is not in a run folder; "
                                   "its samples cannot be checked")
                        continue
                    path = base / rel
                    if want is None:
                        out.append(f"{base}: {rel}: no content hash in run.json (written by an evalrun that did "
                                   "not record one): the samples cannot be verified")
                        continue
                    try:
                        got = sha256_file(path)
                    except OSError as e:
                        out.append(f"{base}: {rel}: samples file cannot be read: {e.strerror or e}")
                        continue
                    if got != want:
                        out.append(f"{base}: {rel}: content does not match the hash in run.json "
                                   f"(sha256 {got[:12]}... vs recorded {want[:12]}...): the samples are not the "
                                   "ones this record measured (a retried attempt over an earlier one?)")
    return out


def _build_field(key: str) -> Callable[[RunRecord], object]:
    """A getter of one field of :func:`build_of` (``key``)."""
    return lambda r: build_of(r)[key]


def shard_of(r: RunRecord) -> ShardInfo:
    """The record's shard, or MergeError naming the run when it has none."""
    if r.shard is None:
        raise MergeError(f"{r.path or r.run_id}: not a shard run (no 'shard' in run.json; run with --shard i/n)")
    return r.shard


def merge_records(records: Sequence[RunRecord], run_id: str, allow_mixed: bool = False) -> RunRecord:
    """Combine shard run records into one record.

    Args:
        records: shard records (each with ``shard``), any order.
        run_id: the merged run's id.
        allow_mixed: merge shards of different builds (:func:`build_of`) or lists
            anyway; each difference is then a sentence in ``merge_warnings`` of the
            merged record (and its summary).

    Returns:
        A run record whose ``configs`` are the shards' configs in name order, whose
        ``provenance`` is the first shard's with ``started_at`` the earliest and
        ``ended_at`` the latest, configs and datasets united, and ``merged_from`` listing
        the shard runs; exit code and ``passed`` recomputed from the gates. A shard
        with status ``error`` makes the merged status ``error`` (its ``error`` kept,
        exit code 2).

    Raises:
        MergeError: a record without ``shard``; different lists or builds (unless
            ``allow_mixed``); different shard counts; a missing or duplicated shard
            index; a shard whose samples do not match its record's hashes
            (:func:`verify_samples`, never allowed).
    """
    if not records:
        raise MergeError("no run folders given")
    where = lambda r: str(r.path or r.run_id)  # noqa: E731
    for r in records:
        if r.shard is None:
            raise MergeError(f"{where(r)}: not a shard run (no 'shard' in run.json; run with --shard i/n)")
    first = records[0]
    for r in records[1:]:
        if shard_of(r).count != shard_of(first).count:
            raise MergeError(f"{where(r)} and {where(first)}: different shard count "
                             f"({shard_of(r).count!r} vs {shard_of(first).count!r}); only shards of one split merge")
    warnings: list[str] = []
    checks: list[tuple[str, Callable[[RunRecord], object]]] = [("list", lambda r: shard_of(r).list.sha256)]
    checks += [(key, _build_field(key)) for key in build_of(first)]
    for key, get in checks:
        for r in records[1:]:
            a, b = get(r), get(first)
            if key == "engine version":  # per variant name: an A/B config's two builds are one variant's each
                a, b = _common_builds(variant_engines(r), variant_engines(first))
            if a != b:
                msg = (f"{where(r)} and {where(first)}: different {key} ({a!r} vs {b!r})")
                if not allow_mixed:
                    raise MergeError(msg + "; only shards of one list run on one build merge "
                                     "(--allow-mixed merges them and says so in the record and the summary)")
                warnings.append(msg + ": merged with --allow-mixed")
    bad = [msg for r in records for msg in verify_samples(r)]
    if bad:
        raise MergeError("samples do not match their run record: " + "; ".join(bad[:10])
                         + (f"; ... ({len(bad)} in all)" if len(bad) > 10 else ""))
    n = shard_of(first).count
    seen: dict[int, str] = {}
    for r in records:
        i = shard_of(r).index
        if i in seen:
            raise MergeError(f"shard {i}/{n} given twice: {seen[i]} and {where(r)}")
        seen[i] = where(r)
    missing = sorted(set(range(1, n + 1)) - set(seen))
    if missing:
        raise MergeError(f"shards {', '.join(f'{i}/{n}' for i in missing)} missing (given: {sorted(seen)})")
    configs = sorted((c.model_copy(deep=True) for r in records for c in r.configs), key=lambda c: c.name)
    prov = first.provenance.model_copy(deep=True)
    prov.started_at = min(r.provenance.started_at for r in records)
    ends = [r.provenance.ended_at for r in records]
    prov.ended_at = None if None in ends else max(e for e in ends if e is not None)
    prov.configs = [x for r in records for x in r.provenance.configs]
    prov.datasets = {k: v for r in records for k, v in r.provenance.datasets.items()}
    could_not_run = any(r.status != "completed" for r in records)
    code, passed = _verdict(configs, could_not_run)
    errored = [r for r in records if r.status == "error"]
    if errored:  # a shard that ended on an unexpected exception: the merged run is an error too (exit 2)
        code, passed = 2, None
    return RunRecord(
        run_id=run_id, status="error" if errored else "completed" if not could_not_run else "incomplete",
        error=errored[0].error.model_copy() if errored and errored[0].error else None,
        passed=passed, exit_code=code, provenance=prov, configs=configs,
        merged_from=[MergedShard(run_id=r.run_id, path=str(r.path) if r.path else None, shard=shard_of(r).index,
                                 exit_code=r.exit_code) for r in sorted(records, key=lambda r: shard_of(r).index)],
        merge_warnings=warnings, numerics_noise=joined_noise([r.numerics_noise for r in records]),
    )
