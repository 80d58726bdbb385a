"""The sampled verdict's plan: which comparisons get a ``sampled_equivalence`` gate, which
variant scores, when the seeding makes the draws dependent (the gate is then NOT RUN as
planned), and the seed every request sends (harness/config/schema.py ``request_seed``)."""

from __future__ import annotations

import hashlib
import textwrap

import pytest

from harness.analysis.gatekinds.min_output_match import MinOutputMatch
from harness.analysis.gatekinds.sampled_equivalence import SampledEquivalence
from harness.config.gates import plan_gates
from harness.config.loader import load_config
from harness.report.dry_run import detectable_drops, family_false_fail_of


def _cfg(tmp_path, task: str, spec_offset: int = 2000, baseline: str = "reference"):
    p = tmp_path / "c.yaml"
    p.write_text(textwrap.dedent(f"""\
        model: m
        variants:
          reference: {{}}
          other: {{seed_offset: 1000}}
          spec: {{speculative_config: {{method: mtp, num_speculative_tokens: 2}}, seed_offset: {spec_offset}}}
          spec2: {{speculative_config: {{method: mtp, num_speculative_tokens: 2}}, seed_offset: 3000}}
        tasks:
          t: {task}
        comparisons:
          - {{baseline: reference, candidate: other}}
          - {{baseline: {baseline}, candidate: spec}}
          - {{baseline: spec, candidate: spec2}}
        """))
    return load_config(p)


def _sampled(cfg) -> dict[str, SampledEquivalence]:
    return {g.id.split("/", 1)[1]: g for g in plan_gates(cfg) if isinstance(g, SampledEquivalence)}


def test_a_sampling_task_gets_the_sampled_gate_and_no_output_match(tmp_path):
    cfg = _cfg(tmp_path, "{kind: synthetic, temperature: 1.0, seed_mode: per_question}")
    got = _sampled(cfg)
    assert set(got) == {"reference->other/t/sampled_equivalence", "reference->spec/t/sampled_equivalence",
                        "spec->spec2/t/sampled_equivalence"}
    assert not [g for g in plan_gates(cfg) if isinstance(g, MinOutputMatch)]
    # with the false-alarm budget (the default) the gate is tested at the budget (Holm over the
    # config's family), not at its own alpha; with the budget off, at the comparison's alpha 0.05
    assert all(g.independent and g.limit == 0.01 and g.budget == 0.01 and g.planned_test() for g in got.values())
    off = _sampled(cfg.model_copy(update={"false_alarm_budget": None}))
    assert all(g.independent and g.limit == 0.05 and not g.planned_test() for g in off.values())
    # a speculative baseline is not trusted to score: the config's first non-speculative variant does
    assert got["spec->spec2/t/sampled_equivalence"].scorer == "reference"
    assert got["reference->spec/t/sampled_equivalence"].scorer == "reference"


def test_a_greedy_task_gets_none(tmp_path):
    cfg = _cfg(tmp_path, "{kind: synthetic, temperature: 0.0}")
    assert _sampled(cfg) == {}


def test_one_seed_for_every_request_or_the_same_seeds_on_both_sides_is_dependent(tmp_path):
    same = _sampled(_cfg(tmp_path, "{kind: synthetic, temperature: 1.0, seed: 42}"))
    assert all(not g.independent and "not independent draws" in g.dependence for g in same.values())
    coupled = _sampled(_cfg(tmp_path, "{kind: synthetic, temperature: 1.0, seed_mode: per_question}", spec_offset=0))
    assert "same seeds (seed_offset 0)" in coupled["reference->spec/t/sampled_equivalence"].dependence
    unseeded = _sampled(_cfg(tmp_path, "{kind: synthetic, temperature: null, seed: null}", spec_offset=0))
    assert all(g.independent for g in unseeded.values())  # the engine's own generator: independent


def test_request_seed_per_question_is_sha256_of_seed_plus_offset_and_question(tmp_path):
    t = _cfg(tmp_path, "{kind: synthetic, temperature: 1.0, seed: 7, seed_mode: per_question}").tasks["t"]
    want = int(hashlib.sha256(b"1007/arith/test/3").hexdigest()[:8], 16) & 0x7FFFFFFF
    assert t.request_seed("arith/test/3", 1000) == want
    assert t.request_seed("arith/test/3") != t.request_seed("arith/test/4")
    s = _cfg(tmp_path, "{kind: synthetic, temperature: 1.0, seed: 7}").tasks["t"]
    assert s.request_seed("arith/test/3", 1000) == s.request_seed("arith/test/4", 1000) == 1007
    n = _cfg(tmp_path, "{kind: synthetic, temperature: 1.0, seed: null}").tasks["t"]
    assert n.request_seed("arith/test/3", 1000) is None


def test_request_seed_per_run_mixes_in_the_run_id_and_a_pinned_seed_run_repeats_it(tmp_path):
    t = _cfg(tmp_path, "{kind: synthetic, temperature: 1.0, seed: 7, seed_mode: per_run}").tasks["t"]
    with pytest.raises(ValueError, match="no run id"):
        t.request_seed("arith/test/3", 1000)  # never sent without its run id: fail closed
    night1, night2 = t.for_run("2026-12-04T01-00-00Z"), t.for_run("2026-12-05T01-00-00Z")
    want = int(hashlib.sha256(b"2026-12-04T01-00-00Z/1007/arith/test/3").hexdigest()[:8], 16) & 0x7FFFFFFF
    assert night1.request_seed("arith/test/3", 1000) == want
    assert night1.request_seed("arith/test/3", 1000) != night2.request_seed("arith/test/3", 1000)
    assert night1.request_seed("arith/test/3") != night1.request_seed("arith/test/4")
    assert night1.model_dump()["seed_run"] == "2026-12-04T01-00-00Z"  # what run.json's tasks record
    assert "seed_run" not in t.model_dump()  # off: the dump is unchanged
    pinned = _cfg(tmp_path, "{kind: synthetic, temperature: 1.0, seed: 7, seed_mode: per_run, "
                            "seed_run: 2026-12-04T01-00-00Z}").tasks["t"]
    assert pinned.for_run("later").request_seed("arith/test/3", 1000) == want
    assert all(g.independent for g in _sampled(_cfg(tmp_path, "{kind: synthetic, temperature: 1.0, "
                                                              "seed_mode: per_run}")).values())


@pytest.mark.parametrize("task, says", [
    ("{kind: synthetic, temperature: 1.0, seed: null, seed_mode: per_run}", "needs a seed"),
    ("{kind: synthetic, temperature: 1.0, seed_mode: per_question, seed_run: x}", "set seed_mode: per_run"),
])
def test_per_run_seeds_are_refused_where_they_cannot_apply(tmp_path, task, says):
    with pytest.raises(Exception, match=says):
        _cfg(tmp_path, task)


def test_dry_run_states_the_detectable_shift_and_counts_the_gates_in_the_family(tmp_path):
    cfg = _cfg(tmp_path, "{kind: synthetic, num_questions: 80, temperature: 1.0, seed_mode: per_question}")
    # with the budget (the default) the stated level is the budget, 0.01 two-sided: z_(1-0.005) = 2.575829
    [d] = detectable_drops(cfg)
    assert [s["shift"] for s in d["sampled"]] == pytest.approx([(2.575829 + 0.841621) * 0.1 / 80 ** 0.5] * 3,
                                                               abs=1e-5)
    [d] = detectable_drops(cfg.model_copy(update={"false_alarm_budget": None}))
    assert [s["shift"] for s in d["sampled"]] == pytest.approx([(1.959964 + 0.841621) * 0.1 / 80 ** 0.5] * 3,
                                                               abs=1e-5)
    f = family_false_fail_of(cfg)
    assert f["sampled_gates"] == 3 and f["sampled_alpha_sum_bound"] == pytest.approx(0.15)
