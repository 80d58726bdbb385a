"""The sampled verdict's scoring step: once every variant has sampled, the scorer's
server (a non-speculative variant, :func:`harness.config.gates.sampling.scorer_variant`) is
started again and scores every sampled completion of both sides of each
``sampled_equivalence`` gate by prompt log-probabilities; then each comparison's test
(:func:`harness.analysis.sampled.sampled_test`) is stored for the gates.

Why a server started again rather than the scorer's first one: variants run one after
another on a CPU host and side by side on a GPU node, so the candidates' completions
exist only after the scorer's own server is stopped. The cost is one more server start-up
and one prompt-only forward pass per completion (docs/benchmarks.md, "Sampled verdict").
The candidate's own log-probabilities are never read: under speculation they are not
trusted (wrong logprobs under speculation have been reported).

An orchestration module beside the runner (it starts servers and feeds analysis).
"""

from __future__ import annotations

import json
import time

from harness.analysis.gatekinds.sampled_equivalence import SampledEquivalence
from harness.analysis.sampled import committed_length, sampled_test
from harness.config.plan import VariantPlan
from harness.engine.server import ServerStartError
from harness.records.atomic import write_atomic
from harness.records.completions import TargetScore, TokenScores
from harness.records.scoring import ScoringRecord
from harness.run.context import ConfigRun
from harness.run.serving import SCORING, VariantServer

__all__ = ["score_sampled", "sampled_gates", "target_score"]


def sampled_gates(run: ConfigRun) -> list[SampledEquivalence]:
    """The config's ``sampled_equivalence`` gates that can be judged (independent draws, a scorer)."""
    return [g for g in run.plan.gates if isinstance(g, SampledEquivalence) and g.independent and g.scorer]


def score_sampled(run: ConfigRun, variants: list[VariantPlan]) -> None:
    """Score both sides of every judgeable ``sampled_equivalence`` gate on its scorer's
    server, started again (on its own device set when ``run`` has a pool), then store each
    comparison's :class:`~harness.records.measures.SampledRecord` in ``run.measured``.
    A scorer that did not run, a server that does not start or a failed scoring request
    sets ``scoring_error`` on the (variant, task) it concerns (its gate then fails)."""
    gates = sampled_gates(run)
    m = run.measured
    todo: dict[str, set[tuple[str, str]]] = {}
    for g in gates:
        for v in (g.baseline, g.variant):
            if v is not None and g.task is not None and m.task(v, g.task).samples is not None:
                todo.setdefault(g.scorer or "", set()).add((v, g.task))
    for scorer, pairs in todo.items():
        variant_plan = next((x for x in variants if x.name == scorer), None)
        if variant_plan is None or m.variant(scorer).not_run is not None:
            for v, t in pairs:
                m.task_record(v, t).scoring_error = f"the scorer {scorer} did not run (not selected or failed)"
            continue
        _score(run, variant_plan, sorted(pairs))
    for g in gates:
        a, b = m.task(g.baseline, g.task).target_scores, m.task(g.variant, g.task).target_scores
        if a is not None and b is not None and g.baseline is not None and g.task is not None:
            st = sampled_test(a, b, g.scorer or "")
            m.comparison_record(g.baseline, g.variant, g.task).sampled = st
            if st is not None:
                for rec in run.result.scoring:
                    if rec.scorer == g.scorer:
                        rec.sampled[f"{g.baseline}->{g.variant}/{g.task}"] = st.model_dump(mode="json")
                run.progress.log(f"{g.id}: shift {st.shift:+.4f} nats/token on {st.n} questions, t {st.t:.2f}, "
                                 f"sign-flip p {st.p_value:.4g}")


def _score(run: ConfigRun, variant_plan: VariantPlan, pairs: list[tuple[str, str]]) -> None:
    """Start ``variant_plan``'s server again for scoring (:data:`harness.run.serving.SCORING`: never
    speculative, on its own device set when ``run`` has a pool), score every sample of
    ``pairs`` ((variant, task)), stop it; write
    ``samples/<config>/<variant>/<task>.target_logprobs.jsonl`` and the scores."""
    c, p, m = run.plan.config, run.progress, run.measured
    server = VariantServer(run, variant_plan, SCORING)
    p.log(f"{variant_plan.id}: scoring the sampled completions of {', '.join(f'{v}/{t}' for v, t in pairs)} on this "
          f"non-speculative server, started again (log: {server.log_path})")
    got: dict[tuple[str, str], list[TokenScores | str]] = {}
    rec = ScoringRecord(scorer=variant_plan.name, scored=[f"{v}/{t}" for v, t in pairs])
    run.result.scoring.append(rec)
    server.ready_to_launch()  # its devices and the pre-launch check's answer: not start-up time
    t0 = time.monotonic()
    try:
        with server as session:
            t_ready = time.monotonic()
            for v, t in pairs:
                run.place.at("client", task=t)
                got[(v, t)] = session.score_completions(_items(run, v, t), chat=c.tasks[t].use_chat_completions)
            t_done = time.monotonic()
    except ServerStartError as e:
        p.error(f"{variant_plan.id}: the scoring server could not run: {e}")
        rec.error = str(e)
        for v, t in pairs:
            if (v, t) not in got:
                m.task_record(v, t).scoring_error = f"the scoring server ({variant_plan.id}) could not run: {e}"
        return
    n = sum(len(x) for x in got.values())
    rec.completions, rec.startup_seconds = n, round(t_ready - t0, 2)
    rec.scoring_seconds, rec.seconds = round(t_done - t_ready, 2), round(time.monotonic() - t0, 2)
    p.log(f"{variant_plan.id} (scoring): {n} completions scored in {t_done - t_ready:.1f}s; server start-up "
          f"{t_ready - t0:.1f}s, whole step {time.monotonic() - t0:.1f}s")
    for (v, t), answers in got.items():
        _store(run, v, t, answers)
    run.ctx.checkpoint()


def _items(run: ConfigRun, v: str, t: str) -> list[tuple[str, str, tuple[int, ...]]]:
    """The scoring items of variant ``v`` on task ``t``: one per successful sample with token ids."""
    prompts = {r.question_id: r.prompt for r in run.prepared[t].requests}
    return [(f"{v}:{s.question_id}", prompts.get(s.question_id, ""), s.token_ids or ())
            for s in run.measured.task(v, t).samples or () if s.ok and s.token_ids is not None
            and s.question_id in prompts]


def target_score(q: str, a: TokenScores | str, seed: int | None, stop: str | int | None) -> TargetScore:
    """One completion's :class:`TargetScore` from its scoring answer ``a`` (an error string
    is the score's error): scored on its committed ids only, those up to the one that
    completes its stop string ``stop`` (:func:`harness.analysis.sampled.committed_length`,
    one rule for both sides), with the count of its target-top-1 tokens when every
    committed token has a rank."""
    if isinstance(a, str):
        return TargetScore(q, 0, None, seed, a)
    keep = committed_length(a.pieces, stop)
    n = len(a.logprobs) if keep is None else keep
    ranks = a.ranks[:n]
    top1 = None if any(r is None for r in ranks) else sum(r == 1 for r in ranks)
    return TargetScore(q, n, float(sum(a.logprobs[:n])), seed, top1=top1,
                       past_stop=None if keep is None else len(a.logprobs) - keep)


def _store(run: ConfigRun, v: str, t: str, answers: list[TokenScores | str]) -> None:
    """The scores of ``v`` on ``t`` into the measurements and their JSONL file
    (:func:`target_score`); a failed scoring request is that question's error and the
    task's ``scoring_error``."""
    items = _items(run, v, t)
    samples = {s.question_id: s for s in run.measured.task(v, t).samples or ()}
    scores: dict[str, TargetScore] = {}
    errors = []
    for (rid, _, _), a in zip(items, answers):
        q = rid.split(":", 1)[1]
        scores[q] = target_score(q, a, samples[q].seed, samples[q].stop_reason)
        if isinstance(a, str):
            errors.append(a)
    tm = run.measured.task_record(v, t)
    tm.target_scores = {q: s for q, s in scores.items() if s.error is None}
    if errors:
        tm.scoring_error = f"{len(errors)} completion(s) could not be scored, e.g. {errors[0]}"
    path = run.folder.samples(run.plan.config.name, v, t, "target_logprobs")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "".join(json.dumps(s.to_json()) + "\n" for s in scores.values()))
