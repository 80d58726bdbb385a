"""The native form: explicit variants, tasks, comparisons and gates, checked for names that exist."""

from __future__ import annotations

import pytest

from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.config.schema import ConfigError
from tests.config.texts import NATIVE, write


def test_native_form(tmp_path):
    c = load_config(write(tmp_path, "n.yaml", NATIVE))
    assert c.form == "native"
    assert c.variants["spec"].speculative_config.as_dict()["num_speculative_tokens"] == 2
    assert c.tasks["arith"].kind == "synthetic"
    assert c.comparisons[0].min_output_match == 1.0
    assert c.env == {"VLLM_CPU_KVCACHE_SPACE": "1"}


def test_native_comparison_names_unknown_variant(tmp_path):
    p = write(tmp_path, "n.yaml", NATIVE.replace("candidate: spec}", "candidate: spek}"))
    with pytest.raises(ConfigError, match="no variant named 'spek'; did you mean 'spec'"):
        load_config(p)


def test_unknown_fault_is_a_config_error(tmp_path):
    text = NATIVE.replace("async_scheduling: false", "async_scheduling: false\n    fault: draft-inptu")
    with pytest.raises(ConfigError, match="unknown fault 'draft-inptu'; did you mean 'draft-input'"):
        load_config(write(tmp_path, "n.yaml", text))


def test_task_gate_overrides_and_comparison_tasks(tmp_path):
    text = NATIVE.replace(
        "  arith: {kind: synthetic, num_questions: 10, num_fewshot: 2}",
        "  arith: {kind: synthetic, num_questions: 10, num_fewshot: 2}\n"
        "  gsm8k: {num_questions: 5, gates: {accuracy_threshold: null}}",
    ).replace("candidate: spec}", "candidate: spec, tasks: [arith]}")
    c = load_config(write(tmp_path, "n.yaml", text))
    assert c.gates_for("arith").accuracy_threshold == 0.8
    assert c.gates_for("gsm8k").accuracy_threshold is None
    assert c.gates_for("gsm8k").min_acceptance_length == 1.5      # not overridden: inherited

    ids = {g.id for g in build_plan([c]).configs[0].gates}
    assert "n/spec/arith/accuracy_floor" in ids and "n/spec/gsm8k/accuracy_floor" not in ids
    assert "n/reference->spec/arith/min_output_match" in ids
    assert "n/reference->spec/gsm8k/min_output_match" not in ids
    bad = text.replace("tasks: [arith]", "tasks: [arihm]")
    with pytest.raises(ConfigError, match="no task named 'arihm'"):
        load_config(write(tmp_path, "b.yaml", bad))
    with pytest.raises(ConfigError, match="did you mean 'accuracy_threshold'"):
        misspelt = text.replace("gates: {accuracy_threshold: null}", "gates: {accuracy_treshold: null}")
        load_config(write(tmp_path, "c.yaml", misspelt))
