"""The vLLM form's ``evalrun.tasks``: native tasks beside the GSM8K task, and the H200
configs' traffic shapes (their counts computed here from the configs' own server
arguments, independently of the shape code)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from harness.config.loader import load_config
from harness.config.schema import ConfigError
from harness.tasks import task_size
from tests.config.texts import VLLM_FORM, write

REPO = Path(__file__).resolve().parents[2]
H200 = [REPO / "configs" / f"{n}.yaml" for n in
        ("Qwen3-Next-80B-A3B-Instruct", "Nemotron-3-Super-120B-A12B-BF16", "Nemotron-3-Nano-30B-A3B-BF16")]

SHAPE = """\
evalrun:
  tasks:
    prefix:
      kind: shape
      shape: {kind: prefix_reuse, prefix_tokens: 64, prompt_tokens: 96, prompts: 4}
      max_tokens: 16
"""


def test_evalrun_tasks_come_after_the_gsm8k_task_on_every_variant(tmp_path):
    c = load_config(write(tmp_path, "m.yaml", VLLM_FORM + SHAPE))
    assert list(c.tasks) == ["gsm8k", "prefix"]
    assert c.tasks["gsm8k"].num_questions == 200  # vLLM's keys still make the GSM8K task
    assert c.tasks["prefix"].shape.kind == "prefix_reuse" and task_size(c.tasks["prefix"]) == 2 * 4
    assert all(x.tasks is None for x in c.comparisons)  # the derived comparisons gate it too


def test_evalrun_tasks_may_not_take_the_gsm8k_name(tmp_path):
    text = VLLM_FORM + "evalrun:\n  tasks:\n    gsm8k: {kind: synthetic}\n"
    with pytest.raises(ConfigError, match=r"evalrun\.tasks\.gsm8k'.*give the extra task another name"):
        load_config(write(tmp_path, "m.yaml", text))


def test_an_evalrun_task_is_validated_as_a_native_task(tmp_path):
    text = VLLM_FORM + "evalrun:\n  tasks:\n    p: {kind: shape, shape: {kind: prefix_reuse, prefix_tokens: 8}}\n"
    with pytest.raises(ConfigError, match="needs prefix_tokens and prompt_tokens"):
        load_config(write(tmp_path, "m.yaml", text))


def _k(path: Path) -> int:
    """num_speculative_tokens of the config's own --speculative-config."""
    args = shlex.split(yaml.safe_load(path.read_text())["server_args"])
    return json.loads(args[args.index("--speculative-config") + 1])["num_speculative_tokens"]


@pytest.mark.parametrize("path", H200, ids=lambda p: p.stem)
def test_h200_configs_plan_the_shapes_that_apply_on_a_gpu(path):
    c = load_config(path)
    raw = yaml.safe_load(path.read_text())
    k = _k(path)
    edges = c.tasks["edges"]
    assert edges.shape.kind == "prompt_edges" and edges.shape.speculative_tokens == [k]
    assert edges.shape.edges() == {f"spec_k{k}": k + 1}  # no block edge: derived at start-up on a hybrid
    assert task_size(edges) == 3 * 3  # offsets -1, 0, +1, three prompts each
    off = "--no-enable-prefix-caching" in raw["server_args"]
    assert ("prefix" in c.tasks) is not off  # a config that turns prefix caching off gets no prefix shape
    if not off:
        p = c.tasks["prefix"].shape
        max_len = int(shlex.split(raw["server_args"])[shlex.split(raw["server_args"]).index("--max-model-len") + 1])
        assert p.prompt_tokens + c.tasks["prefix"].max_tokens <= max_len
        assert task_size(c.tasks["prefix"]) == 2 * p.prompts
    sweep = c.tasks["sweep"].shape  # no server setting of its own: applies on every GPU config
    assert sweep.kind == "concurrency_sweep" and sweep.concurrency == [1, 64] and task_size(c.tasks["sweep"]) == 128
    assert sweep.prompt_tokens + max(sweep.output_tokens) <= 4096  # --max-model-len of every H200 config


@pytest.mark.parametrize("path", H200, ids=lambda p: p.stem)
def test_the_evalrun_block_leaves_vllms_keys_as_vllms_test_reads_them(path):
    raw = yaml.safe_load(path.read_text())
    c = load_config(path)
    assert c.tasks["gsm8k"].num_questions == raw["num_questions"] and c.model == raw["model_name"]
    assert set(raw) - {"evalrun"} <= {"model_name", "accuracy_threshold", "num_questions", "num_fewshot",
                                      "startup_max_wait_seconds", "min_acceptance_length", "server_args"}
