"""Divergences judged at the baseline's prefix (harness/analysis/prefix_gap.py): which are
scored, how a scored gap is judged (near-tie threshold inclusive, a negative gap explained),
and that a failed score changes no verdict (fail closed). Unit tier."""

from __future__ import annotations

from types import SimpleNamespace as NS

from harness.analysis.divergence import classify_divergences, near_tie_bound
from harness.analysis.prefix_gap import PREFIX_SOURCE, PrefixScore, judge_at_prefix, prefix_items
from harness.records.samples import Sample
from harness.run.prefix_steps import score_prefixes


def S(qid, ids, top=None, variant="x"):
    return Sample(config="c", variant=variant, task="t", question_id=qid, prompt_hash="h", gold="1",
                  completion=" ".join(map(str, ids)), token_ids=tuple(ids), finish_reason="stop", top_logprobs=top)


CONF = ((1, -0.01), (2, -9.0))
OTHER = ((2, -0.01), (1, -9.0))  # the reference confident in its own token 2 at token 0


def _report(near_tie=0.5, widening=None):
    """spec_sync -> spec_async on four questions whose reference left the baseline's path at token 0
    confidently (so neither its distribution nor its paths judge), one question it shares."""
    ref = [S(q, [2, 5, 3], (OTHER, CONF, CONF), "reference") for q in ("a", "b", "c", "d")]
    ref.append(S("e", [1, 5, 3], (CONF, ((5, -0.1), (6, -7.0)), CONF), "reference"))
    base = [S(q, [1, 5, 3]) for q in "abcde"]
    cand = [S(q, [1, 6, 3]) for q in "abcd"] + [S("e", [1, 6, 3])]
    return base, classify_divergences(base, cand, ref, "reference", near_tie, False, widening_nats=widening)


def test_only_divergences_the_reference_could_not_judge_at_the_baselines_prefix_are_scored():
    base, r = _report()
    by = {d.question_id: d for d in r.divergences}
    assert {by[q].source for q in "abcd"} == {"none"} and by["e"].source == "reference_prefix"
    items = {x.question_id: x for x in prefix_items(r, base)}
    assert set(items) == set("abcd")
    assert items["a"].position == 1 and items["a"].prefix == (1,)
    assert (items["a"].baseline_token, items["a"].candidate_token) == (5, 6)


def test_a_scored_gap_is_judged_by_the_reports_threshold_and_a_failure_changes_nothing():
    _, r = _report()
    scores = {
        "a": PrefixScore("a", 1, 5, 6, -0.3, -0.8, 1, 2),  # 0.5 nats: a near-tie, inclusive
        "b": PrefixScore("b", 1, 5, 6, -0.1, -4.1, 1, 3),  # 4 nats: confident
        "c": PrefixScore("c", 1, 5, 6, -2.0, -0.2, 2, 1),  # the reference prefers the candidate's token
        "d": PrefixScore("d", 1, 5, 6, error="request prefix:x->y/t:d:baseline: HTTP 500"),
    }
    j = judge_at_prefix(r, scores, "reference")
    by = {d.question_id: d for d in j.divergences}
    assert by["a"].verdict == "explained" and by["a"].source == PREFIX_SOURCE and by["a"].gap_nats == 0.5
    assert by["b"].verdict == "unexplained" and by["b"].gap_nats == 4.0 and by["b"].candidate_rank == 3
    assert by["b"].reference_token == 5 and by["c"].reference_token == 6
    # the recorded gap is the candidate's below the better of the two (>= 0, as every recorded gap)
    assert by["c"].verdict == "explained" and by["c"].gap_nats == 0.0 and "-1.800 nats below" in by["c"].reason
    # fail closed: unexplained as before, the reason names the request and the error
    assert by["d"].verdict == "unexplained" and by["d"].source == "none"
    assert "request prefix:x->y/t:d:baseline: HTTP 500" in by["d"].reason
    assert by["e"] == next(d for d in r.divergences if d.question_id == "e")  # not scored: unchanged
    # worst first: no gap (as an ended completion), then e's 6.9 nats (judged by the recorded distribution), b's 4
    assert [d.question_id for d in j.unexplained] == ["d", "e", "b"] and j.near_tie_nats == r.near_tie_nats


def test_the_widened_threshold_judges_a_six_nat_gap_at_the_prefix_as_a_near_tie():
    b = near_tie_bound(0.5, {"EVALRUN_NUMERICS_NOISE": "gpu"})
    _, r = _report(b.nats, b.widening_nats)
    j = judge_at_prefix(r, {"a": PrefixScore("a", 1, 5, 6, -0.1, -6.1, 1, 2)}, "reference")
    assert next(d for d in j.divergences if d.question_id == "a").verdict == "explained"
    _, r0 = _report()
    j0 = judge_at_prefix(r0, {"a": PrefixScore("a", 1, 5, 6, -0.1, -6.1, 1, 2)}, "reference")
    assert next(d for d in j0.divergences if d.question_id == "a").verdict == "unexplained"


def test_nothing_to_score_starts_nothing():
    base, r = _report()
    same = r.model_copy(update={"divergences": tuple(d for d in r.divergences if d.source == "reference_prefix")})
    res = NS(baseline="spec_sync", candidate="spec_async", task="t", divergence=same)
    # the reference as baseline: its divergences judged in its recorded top k need nothing more
    ref_is_base = NS(baseline="reference", candidate="spec_sync", task="t", divergence=same.model_copy(
        update={"reference": "reference"}))
    run = NS(result=NS(comparisons=[res, ref_is_base, NS(divergence=None)]),
             measured=NS(task=lambda v, t: NS(samples=base)))
    score_prefixes(run, [])  # would need a server (run.plan, run.folder, ...) if anything were scored
    assert res.divergence is same


def test_a_candidate_token_outside_the_recorded_top_k_is_scored_when_its_bound_is_within_the_near_tie():
    # reference -> spec_sync at token 1. "o": candidate 7 outside the recorded top 2, whose
    # bound (-0.1 - -0.4 = 0.3 nats) is within the 0.5-nat near tie: only its exact gap can say.
    # "f": 7 outside a top 2 whose bound, 6.9, already decides. "i": 6 in the top 2, 6.9 down.
    near, far = ((5, -0.1), (6, -0.4)), ((5, -0.1), (6, -7.0))
    ref = [S("o", [1, 5, 3], (CONF, near, CONF), "reference"), S("f", [1, 5, 3], (CONF, far, CONF), "reference"),
           S("i", [1, 5, 3], (CONF, far, CONF), "reference")]
    cand = [S("o", [1, 7, 3]), S("f", [1, 7, 3]), S("i", [1, 6, 3])]
    r = classify_divergences(ref, cand, None, "reference", 0.5, True)
    by = {d.question_id: d for d in r.divergences}
    assert [by[q].in_top_k for q in "ofi"] == [False, False, True]
    assert {by[q].verdict for q in "ofi"} == {"unexplained"}
    assert (by["o"].gap_nats, by["f"].gap_nats) == (0.3, 6.9)
    items = prefix_items(r, ref)
    assert [(x.question_id, x.prefix, x.baseline_token, x.candidate_token) for x in items] == [("o", (1,), 5, 7)]
    # scored 0.4 nats apart at that prefix: a near tie after all
    j = judge_at_prefix(r, {"o": PrefixScore("o", 1, 5, 7, -0.5, -0.9, 1, 3)}, "reference")
    got = {d.question_id: d for d in j.divergences}
    assert got["o"].verdict == "explained" and got["o"].source == PREFIX_SOURCE and got["o"].gap_nats == 0.4
    assert got["f"].verdict == got["i"].verdict == "unexplained"
    # the same bound 6.9 is within the near tie widened by the gpu level (12.5 nats): scored then
    wide = near_tie_bound(0.5, {"EVALRUN_NUMERICS_NOISE": "gpu"})
    rw = classify_divergences(ref, cand, None, "reference", wide.nats, True, widening_nats=wide.widening_nats)
    assert sorted(x.question_id for x in prefix_items(rw, ref)) == ["f", "o"]
