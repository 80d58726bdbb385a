"""A config's server arguments: split like a shell, the speculative config taken out, typed
and passed to vLLM with the keys evalrun does not type (warned).

Every expected line number below is counted by hand from the literal YAML in the
test, not taken from the loader.
"""

from __future__ import annotations

import json

import pytest

from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.config.schema import ConfigError
from tests.config.texts import spec_native, write, write_text


def test_unbalanced_quotes_in_server_args(tmp_path):
    p = write(tmp_path, "bad.yaml", "model_name: a\naccuracy_threshold: 0.5\nserver_args: \"--x 'oops\"\n")
    with pytest.raises(ConfigError, match="cannot split server_args"):
        load_config(p)


def test_bad_speculative_json(tmp_path):
    p = write(tmp_path, "bad.yaml",
              "model_name: a\naccuracy_threshold: 0.5\nserver_args: \"--speculative-config '{oops'\"\n")
    with pytest.raises(ConfigError, match="not JSON"):
        load_config(p)


def test_native_untyped_speculative_key_is_a_warning_and_passed_on(tmp_path):
    p = spec_native(tmp_path, "method: mtp, num_speculative_tokens: 2, num_speculative_token: 3")
    cfg = load_config(p)
    [w] = cfg.warnings
    assert w.key == "variants.spec.speculative_config.num_speculative_token"
    assert w.nearest == "num_speculative_tokens" and w.line == 5
    argv = list(next(v for v in build_plan([cfg]).configs[0].variants if v.name == "spec").argv)
    sent = json.loads(argv[argv.index("--speculative-config") + 1])
    assert sent == {"method": "mtp", "num_speculative_tokens": 2, "num_speculative_token": 3}


def test_vllm_form_untyped_speculative_key_inside_json_is_passed_to_vllm(tmp_path):
    # vLLM's test passes the JSON to vLLM's own parser unchanged; evalrun warns and does the same
    spec = '{"method":"mtp","num_speculative_token":2}'
    p = write_text(tmp_path, f"model_name: a/b\naccuracy_threshold: 0.9\nserver_args: --speculative-config '{spec}'\n")
    cfg = load_config(p)
    [w] = cfg.warnings
    assert w.line == 3 and w.key == "server_args.--speculative-config.num_speculative_token"
    assert w.nearest == "num_speculative_tokens" and f"{p}:3" in w.message
    argv = list(next(v for v in build_plan([cfg]).configs[0].variants if v.name == "spec_sync").argv)
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == json.loads(spec)


def test_speculative_keys_reach_the_command_unchanged(tmp_path):
    p = spec_native(tmp_path, "method: ngram, num_speculative_tokens: 3, prompt_lookup_min: 2, prompt_lookup_max: 4")
    cp = build_plan([load_config(p)]).configs[0]
    argv = list(next(v for v in cp.variants if v.name == "spec").argv)
    sent = json.loads(argv[argv.index("--speculative-config") + 1])
    assert sent == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
