"""Divergences scored at the baseline's prefix on the reference's server (docs/gates.md,
"Near ties"): once every variant has run and the comparisons are judged, each divergence of
a greedy comparison that the reference's recorded distribution could not judge at the
baseline's prefix, or judged only by a bound because the candidate's token was outside its
recorded top k (:func:`harness.analysis.prefix_gap.prefix_items`), is scored on the
reference's non-speculative server, started again, with prompt log-probabilities
(:func:`harness.engine.client.target_logprobs`, as the sampled verdict scores,
:mod:`harness.run.sampled_steps`): the prompt and the baseline's ids up to the divergence,
followed once by the baseline's token and once by the candidate's. The comparison's
divergences are then judged by that gap (:func:`harness.analysis.prefix_gap.judge_at_prefix`).

The server starts only when at least one such divergence exists: a deterministic run (the
CPU engine without numerics noise) starts nothing more. Scoring that fails (a server that
does not start, a request that fails) changes no verdict: an unexplained divergence stays
unexplained, and its reason names the request and the error.

An orchestration module beside the runner (it starts servers and feeds analysis).
"""

from __future__ import annotations

import json
import time

from harness.analysis.prefix_gap import PrefixItem, PrefixScore, judge_at_prefix, prefix_items
from harness.config.plan import VariantPlan
from harness.engine.server import ServerStartError
from harness.records.atomic import write_atomic
from harness.records.completions import TokenScores
from harness.records.run_record import ComparisonResult
from harness.records.scoring import ScoringRecord
from harness.run.context import ConfigRun
from harness.run.serving import Purpose, VariantServer

__all__ = ["PREFIX", "score_prefixes"]

#: The reference's server started again to score divergences at the baseline's prefix
#: (``logs/<config>/<variant>.prefix.log``; never speculative).
PREFIX = Purpose("prefix", speculative=False)

#: (comparison entry, its items to score)
_Todo = list[tuple[ComparisonResult, list[PrefixItem]]]


def score_prefixes(run: ConfigRun, variants: list[VariantPlan]) -> None:
    """Score, on the reference's server started again, every divergence of the config's
    judged comparisons that the reference's recorded distribution could not judge at the
    baseline's prefix; store each comparison's re-judged divergences in its record entry
    (``run.result.comparisons``, which the gates read) and the scores in
    ``samples/<config>/<candidate>/<task>.prefix_scores.<baseline>.jsonl``; record the step
    in ``run.result.scoring`` (``purpose: prefix``). Nothing starts when there is nothing
    to score. Never raises for a server or request failure (it is recorded)."""
    by_ref: dict[str, _Todo] = {}
    m = run.measured
    for res in run.result.comparisons:
        dv = res.divergence
        if dv is None or dv.reference is None:
            continue
        items = prefix_items(dv, m.task(res.baseline, res.task).samples or ())
        items = [x for x in items if x.question_id in _prompts(run, res.task)]
        if items:
            by_ref.setdefault(dv.reference, []).append((res, items))
    for ref, todo in by_ref.items():
        variant_plan = next((x for x in variants if x.name == ref), None)
        if variant_plan is None or m.variant(ref).not_run is not None:
            _judge(run, ref, todo, {}, f"the reference {ref} did not run (not selected or failed)")
            continue
        _score(run, variant_plan, todo)


def _prompts(run: ConfigRun, task: str) -> dict[str, str]:
    prepared = run.prepared.get(task)
    return {r.question_id: r.prompt for r in prepared.requests} if prepared is not None else {}


def _request_ids(res: ComparisonResult, x: PrefixItem) -> tuple[str, str]:
    """The two scoring requests' ids of ``x``: ``prefix:<baseline>-><candidate>/<task>:<question>:<side>``."""
    base = f"prefix:{res.baseline}->{res.candidate}/{res.task}:{x.question_id}"
    return f"{base}:baseline", f"{base}:candidate"


def _score(run: ConfigRun, variant_plan: VariantPlan, todo: _Todo) -> None:
    """Start ``variant_plan``'s server again (:data:`PREFIX`), score ``todo``'s items, stop it,
    then judge and record (:func:`_judge`)."""
    c, p = run.plan.config, run.progress
    server = VariantServer(run, variant_plan, PREFIX)
    n_items = sum(len(items) for _, items in todo)
    p.log(f"{variant_plan.id}: scoring {n_items} divergence(s) of "
          f"{', '.join(f'{r.baseline}->{r.candidate}/{r.task}' for r, _ in todo)} at the baseline's prefix on this "
          f"non-speculative server, started again (log: {server.log_path})")
    rec = ScoringRecord(scorer=variant_plan.name, purpose="prefix",
                        scored=[f"{r.baseline}->{r.candidate}/{r.task}" for r, _ in todo])
    run.result.scoring.append(rec)
    got: dict[str, TokenScores | str] = {}
    server.ready_to_launch()  # its devices and the pre-launch check's answer: not start-up time
    t0 = time.monotonic()
    try:
        with server as session:
            t_ready = time.monotonic()
            for res, items in todo:
                run.place.at("client", task=res.task)
                prompts = _prompts(run, res.task)
                reqs = []
                for x in items:
                    rb, rc = _request_ids(res, x)
                    reqs += [(rb, prompts[x.question_id], x.prefix + (x.baseline_token,)),
                             (rc, prompts[x.question_id], x.prefix + (x.candidate_token,))]
                answers = session.score_completions(reqs, chat=c.tasks[res.task].use_chat_completions)
                got.update({rid: a for (rid, _, _), a in zip(reqs, answers)})
            t_done = time.monotonic()
    except ServerStartError as e:
        p.error(f"{variant_plan.id}: the prefix scoring server could not run: {e}")
        rec.error = str(e)
        _judge(run, variant_plan.name, todo, got, f"the scoring server ({variant_plan.id}) could not run: {e}")
        return
    rec.completions = len(got)
    rec.startup_seconds, rec.scoring_seconds = round(t_ready - t0, 2), round(t_done - t_ready, 2)
    rec.seconds = round(time.monotonic() - t0, 2)
    p.log(f"{variant_plan.id} (prefix): {len(got)} prefixes scored in {t_done - t_ready:.1f}s; server start-up "
          f"{t_ready - t0:.1f}s, whole step {time.monotonic() - t0:.1f}s")
    _judge(run, variant_plan.name, todo, got, None)
    run.ctx.checkpoint()


def _last(a: TokenScores | str | None, rid: str) -> tuple[float | None, int | None, str | None]:
    """(log-probability, rank, error) of the last scored token of answer ``a`` to request ``rid``."""
    if a is None:
        return None, None, f"request {rid}: not scored"
    if isinstance(a, str):
        return None, None, a
    if not a.logprobs:
        return None, None, f"request {rid}: no scored token"
    return a.logprobs[-1], a.ranks[-1], None


def _judge(run: ConfigRun, scorer: str, todo: _Todo, got: dict[str, TokenScores | str],
           failed: str | None) -> None:
    """Each comparison of ``todo`` re-judged from the answers ``got`` (request id -> answer;
    ``failed``: why none came), its scores written to its samples file."""
    for res, items in todo:
        scores: dict[str, PrefixScore] = {}
        for x in items:
            rb, rc = _request_ids(res, x)
            lb, kb, eb = _last(got.get(rb), rb) if failed is None else (None, None, f"{rb}: {failed}")
            lc, kc, ec = _last(got.get(rc), rc) if failed is None else (None, None, f"{rc}: {failed}")
            scores[x.question_id] = PrefixScore(x.question_id, x.position, x.baseline_token, x.candidate_token,
                                                lb, lc, kb, kc, eb or ec)
        assert res.divergence is not None  # score_prefixes chose entries with divergences
        res.divergence = judge_at_prefix(res.divergence, scores, scorer)
        judged = [s for s in scores.values() if s.error is None]
        run.progress.log(
            f"{run.plan.config.name}/{res.baseline}->{res.candidate}/{res.task}: {len(judged)} of {len(scores)} "
            f"divergence(s) judged at the baseline's prefix, "
            f"{sum(1 for s in judged if (s.gap_nats or 0.0) <= res.divergence.near_tie_nats + 1e-12)} near-ties")
        if len(judged) < len(scores):
            bad = next(s for s in scores.values() if s.error is not None)
            run.progress.warn(f"{run.plan.config.name}/{res.baseline}->{res.candidate}/{res.task}: "
                              f"{len(scores) - len(judged)} divergence(s) could not be scored at the baseline's "
                              f"prefix, e.g. {bad.error}")
        path = run.folder.samples(run.plan.config.name, res.candidate, res.task, f"prefix_scores.{res.baseline}")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, "".join(json.dumps(s.to_json()) + "\n" for s in scores.values()))
