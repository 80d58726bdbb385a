"""Tests for harness.report.shapes: the "Traffic shapes" section of summary.md, on a
record built by hand (the figures below are the record's, counted here)."""

from __future__ import annotations

from harness.report.summary import render_markdown
from tests.record_factory import typed


def _mm(qid: str, at: int) -> dict:
    return {"question_id": qid, "first_divergence": at, "baseline_text": "a", "candidate_text": "b",
            "baseline_tokens": 4, "candidate_tokens": 4}


def _record(problems=(), not_run=None, notes=()):
    proof = {"shape": "prompt_edges", "edges": {"spec_k2": 3}, "prompt_lengths": {"2": 2, "3": 2},
             "prompt_tokens_sent": 10, "places": {"spec_k2/off-1": 2, "spec_k2/off+0": 2},
             "counters": {"prompt_tokens": 10, "generation_tokens": 12, "preemptions": 0,
                          "prefix_cache_queries": 0, "prefix_cache_hits": 0},
             "problems": list(problems), "not_run": not_run, "notes": list(notes)}
    task = {"scored": {"flexible-numeric": 4}, "shape": proof}
    return typed({"configs": [{
        "name": "c",
        "variants": {"reference": {"tasks": {"edges": task}}, "spec": {"tasks": {"edges": task}}},
        "comparisons": [{"baseline": "reference", "candidate": "spec", "task": "edges", "compared": 4, "matched": 3,
                         "mismatches": [_mm("edges/spec_k2/off+0/len3/1", 2)]}],
    }]})


def test_the_section_names_each_place_with_what_diverged_there():
    md = render_markdown(_record(), "/nonexistent")
    sec = md[md.index("## Traffic shapes"):md.index("## Scores")]
    assert "prompt_edges (spec_k2 = 3 tokens)" in sec
    assert "| reference -> spec | spec_k2/off-1 | 0/2 | - |" in sec
    assert "| reference -> spec | spec_k2/off+0 | 1/2 | edges/spec_k2/off+0/len3/1 @2 - |" in sec
    assert "| spec | yes | 10 | 10 | 12 | 0 | 0/0 | - | - | - |" in sec


def test_an_unproven_shape_says_why():
    md = render_markdown(_record(problems=["vllm:generation_tokens did not grow: nothing was generated"]), "/x")
    assert "| spec | **NO** | 10 | 10 | 12 | 0 | 0/0 | - | vllm:generation_tokens did not grow" in md


def test_a_shape_that_cannot_happen_is_not_run_with_its_reason_and_the_notes_are_shown():
    why = "prefix caching is off on c/spec: enable_prefix_caching false in /server_info"
    md = render_markdown(_record(problems=["vllm:prefix_cache_hits grew by 0 < 512"], not_run=why,
                                 notes=["warm outputs equal cold outputs on 2/2 prompts"]), "/x")
    assert f"| spec | NOT RUN | 10 | 10 | 12 | 0 | 0/0 | - | not run: {why} | warm outputs equal cold" in md


def test_no_section_without_a_shape():
    rec = typed({"configs": [{"name": "c", "variants": {"reference": {"tasks": {"t": {}}}}}]})
    assert "## Traffic shapes" not in render_markdown(rec, "/x")


def _load_record():
    proof = {"shape": "concurrency_sweep", "edges": {}, "prompt_lengths": {"100": 6}, "prompt_tokens_sent": 600,
             "places": {"c1/out4": 2, "c1/out64": 1, "c8/out4": 2, "c8/out64": 1},
             "counters": {"prompt_tokens": 600, "generation_tokens": 50, "preemptions": 2,
                          "prefix_cache_queries": 0, "prefix_cache_hits": 0},
             "pass_counters": {"c1": {"prompt_tokens": 300, "generation_tokens": 25},
                               "c8": {"prompt_tokens": 300, "generation_tokens": 25}},
             "peak_in_flight": {"c1": 1, "c8": 3}, "problems": []}
    task = {"scored": {"flexible-numeric": 6}, "shape": proof}
    return typed({"configs": [{
        "name": "c",
        "variants": {"reference": {"tasks": {"sweep": task}}, "spec": {"tasks": {"sweep": task}}},
        "comparisons": [{"baseline": "reference", "candidate": "spec", "task": "sweep", "compared": 6, "matched": 5,
                         "mismatches": [_mm("sweep/c8/out64/1", 7)]}],
    }]})


def test_a_load_shape_shows_each_pass_its_peak_and_what_diverged_there():
    md = render_markdown(_load_record(), "/x")
    sec = md[md.index("## Traffic shapes"):md.index("## Scores")]
    assert "concurrency_sweep (6 requests of 100 tokens)" in sec
    assert "| spec | yes | 600 | 600 | 50 | 2 | 0/0 | c1 1, c8 3 | - |" in sec
    assert "| reference -> spec | c8/out64 | 1/1 | sweep/c8/out64/1 @7 - |" in sec
    assert "| reference -> spec | c1/out4 | 0/2 | - |" in sec
