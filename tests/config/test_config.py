"""Config loading: both forms, variant derivation, errors that name file, key, line and nearest key."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from harness.config.loader import load_config
from harness.config.model_list import load_model_list, read_model_list, resolve_list_path
from harness.config.schema import ConfigError
from harness.config.plan import build_plan

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    return p


VLLM_FORM = """\
model_name: "org/model"
accuracy_threshold: 0.9
num_questions: 200
num_fewshot: 5
server_args: >-
  --max-model-len 4096
  --speculative-config '{"method":"mtp","num_speculative_tokens":3}'
env:
  VLLM_X: 1
"""


def test_vllm_form_derives_three_variants(tmp_path):
    c = load_config(write(tmp_path, "m.yaml", VLLM_FORM))
    assert c.form == "vllm-gsm8k"
    assert list(c.variants) == ["reference", "spec_sync", "spec_async"]
    assert c.variants["reference"].speculative_config is None
    assert c.variants["spec_sync"].speculative_config.as_dict() == {"method": "mtp", "num_speculative_tokens": 3}
    assert c.variants["spec_sync"].async_scheduling is False
    assert c.variants["spec_async"].async_scheduling is True
    assert c.server_args == ("--max-model-len", "4096")
    assert c.env == {"VLLM_X": "1"}
    assert c.gates.tolerance == 0.08  # vLLM's default, absolute
    assert c.gates.accuracy_threshold == 0.9
    assert c.tasks["gsm8k"].num_questions == 200
    pairs = {(x.baseline, x.candidate) for x in c.comparisons}
    assert ("reference", "spec_async") in pairs and ("spec_sync", "spec_async") in pairs


def test_vllm_form_without_speculation_has_one_variant(tmp_path):
    c = load_config(write(tmp_path, "m.yaml",
                          'model_name: a/b\naccuracy_threshold: 0.5\nserver_args: "--max-model-len 1024"\n'))
    assert list(c.variants) == ["reference"]
    assert c.comparisons == ()


def test_speculative_config_equals_form(tmp_path):
    text = "model_name: a\naccuracy_threshold: 0.5\nserver_args: --speculative-config='{\"method\":\"ngram\"}'\n"
    c = load_config(write(tmp_path, "m.yaml", text))
    assert c.variants["spec_async"].speculative_config.as_dict() == {"method": "ngram"}


def test_unknown_key_names_file_line_and_nearest(tmp_path):
    p = write(tmp_path, "bad.yaml", "model_name: a\naccuracy_treshold: 0.9\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert f"{p}:2" in msg
    assert "accuracy_treshold" in msg and "did you mean 'accuracy_threshold'" in msg


def test_missing_required_key(tmp_path):
    p = write(tmp_path, "bad.yaml", "model_name: a\n")
    with pytest.raises(ConfigError, match="missing required key 'accuracy_threshold'"):
        load_config(p)


def test_wrong_type_names_key_and_line(tmp_path):
    p = write(tmp_path, "bad.yaml", "model_name: a\naccuracy_threshold: 0.5\nnum_questions: many\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert f"{p}:3" in str(e.value) and "num_questions" in str(e.value)


def test_unbalanced_quotes_in_server_args(tmp_path):
    p = write(tmp_path, "bad.yaml", "model_name: a\naccuracy_threshold: 0.5\nserver_args: \"--x 'oops\"\n")
    with pytest.raises(ConfigError, match="cannot split server_args"):
        load_config(p)


def test_bad_speculative_json(tmp_path):
    p = write(tmp_path, "bad.yaml",
              "model_name: a\naccuracy_threshold: 0.5\nserver_args: \"--speculative-config '{oops'\"\n")
    with pytest.raises(ConfigError, match="not JSON"):
        load_config(p)


NATIVE = """\
model: builtin:tiny
server_args: --dtype float32
env: {VLLM_CPU_KVCACHE_SPACE: 1}
variants:
  reference: {}
  spec:
    speculative_config: {method: mtp, num_speculative_tokens: 2}
    async_scheduling: false
tasks:
  arith: {kind: synthetic, num_questions: 10, num_fewshot: 2}
gates:
  accuracy_threshold: 0.8
  min_acceptance_length: 1.5
comparisons:
  - {baseline: reference, candidate: spec}
"""


def test_native_form(tmp_path):
    c = load_config(write(tmp_path, "n.yaml", NATIVE))
    assert c.form == "native"
    assert c.variants["spec"].speculative_config.as_dict()["num_speculative_tokens"] == 2
    assert c.tasks["arith"].kind == "synthetic"
    assert c.comparisons[0].min_output_match == 1.0
    assert c.env == {"VLLM_CPU_KVCACHE_SPACE": "1"}


def test_native_unknown_nested_key_suggests(tmp_path):
    p = write(tmp_path, "n.yaml", NATIVE.replace("async_scheduling: false", "async_schedulin: false"))
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert "variants.spec.async_schedulin" in msg and "did you mean 'async_scheduling'" in msg
    assert f"{p}:8" in msg


def test_native_comparison_names_unknown_variant(tmp_path):
    p = write(tmp_path, "n.yaml", NATIVE.replace("candidate: spec}", "candidate: spek}"))
    with pytest.raises(ConfigError, match="no variant named 'spek'; did you mean 'spec'"):
        load_config(p)


def test_model_list_resolution_and_comments(tmp_path):
    write(tmp_path, "a.yaml", VLLM_FORM)
    lst = write(tmp_path, "models.txt", "# comment\n\na.yaml  # trailing comment\n")
    assert read_model_list(lst) == [tmp_path / "a.yaml"]
    configs = load_model_list(lst)
    assert [c.name for c in configs] == ["a"]


def test_model_list_falls_back_to_configs_dir(tmp_path):
    lst = write(tmp_path, "models.txt", "Qwen3-Next-80B-A3B-Instruct.yaml\n")
    assert read_model_list(lst) == [REPO / "configs" / "Qwen3-Next-80B-A3B-Instruct.yaml"]


def test_model_list_missing_entries_all_named(tmp_path):
    write(tmp_path, "a.yaml", VLLM_FORM)
    lst = write(tmp_path, "models.txt", "a.yaml\nnope-1.yaml\n# x\nnope-2.yaml\n")
    with pytest.raises(ConfigError) as e:
        read_model_list(lst)
    msg = str(e.value)
    assert "2 missing" in msg and f"{lst}:2: 'nope-1.yaml'" in msg and f"{lst}:4: 'nope-2.yaml'" in msg


def test_empty_and_missing_list(tmp_path):
    with pytest.raises(ConfigError, match="names no config"):
        read_model_list(write(tmp_path, "empty.txt", "# only comments\n\n"))
    with pytest.raises(ConfigError, match="not found"):
        read_model_list(tmp_path / "absent.txt")


def test_shipped_lists_load():
    for name in ("models-h200.txt", "models-cpu.txt"):
        configs = load_model_list(name)
        assert configs, name


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


def test_single_config_by_name_resolves_in_configs_dir():
    assert resolve_list_path("tiny-qwen3next-mtp-cpu.yaml") == REPO / "configs" / "tiny-qwen3next-mtp-cpu.yaml"
