"""vLLM's GSM8K form: the variants derived from its server arguments."""

from __future__ import annotations

from harness.config.loader import load_config
from tests.config.texts import VLLM_FORM, write


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
