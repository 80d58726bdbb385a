"""YAML pitfalls and the typed speculative config.

Every expected line number below is counted by hand from the literal YAML in the
test, not taken from the loader.
"""

from __future__ import annotations

import json
import shlex
import textwrap
from pathlib import Path

import pytest

from harness.config.loader import load_config
from harness.config.schema import ConfigError
from harness.config.plan import build_plan


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    return p


def err(p: Path) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(p)
    return str(e.value)


# ------------------------------------------------------------------ duplicate keys


def test_duplicate_top_level_key_names_both_lines(tmp_path):
    p = write(tmp_path, """\
        model_name: a/b
        accuracy_threshold: 0.9
        num_questions: 50
        accuracy_threshold: 0.5
        """)
    msg = err(p)
    assert f"{p}:4" in msg and "duplicate key 'accuracy_threshold'" in msg
    assert "line 2" in msg and "line 4" in msg


def test_duplicate_nested_key_names_path_and_both_lines(tmp_path):
    p = write(tmp_path, """\
        model: x
        variants:
          reference: {}
          spec:
            speculative_config: {method: mtp, num_speculative_tokens: 2}
            async_scheduling: true
            async_scheduling: false
        tasks:
          t: {kind: synthetic}
        """)
    msg = err(p)
    assert "duplicate key 'variants.spec.async_scheduling'" in msg
    assert "line 6" in msg and "line 7" in msg


def test_duplicate_env_variable(tmp_path):
    p = write(tmp_path, """\
        model_name: a/b
        accuracy_threshold: 0.9
        env:
          VLLM_CPU_KVCACHE_SPACE: "1"
          VLLM_CPU_KVCACHE_SPACE: "4"
        """)
    msg = err(p)
    assert "duplicate key 'env.VLLM_CPU_KVCACHE_SPACE'" in msg and "line 4" in msg and "line 5" in msg


# ------------------------------------------------------------------ YAML 1.1 implicit types


@pytest.mark.parametrize("value, kind", [
    ("yes", "boolean"), ("no", "boolean"), ("on", "boolean"), ("off", "boolean"), ("true", "boolean"),
    ("", "null"), ("~", "null"), ("1.0", "float"), ("6.02e+23", "float"), (".5", "float"),
    ("0755", "integer"), ("0x1F", "integer"), ("1_000", "integer"), ("1:30", "integer"),
    ("2024-01-01", "date"),
])
def test_env_value_read_as_other_type_is_an_error_with_the_quoted_form(tmp_path, value, kind):
    p = write(tmp_path, f"model_name: a/b\naccuracy_threshold: 0.9\nenv:\n  MY_FLAG: {value}\n")
    msg = err(p)
    assert f"{p}:4" in msg and "env.MY_FLAG" in msg and kind in msg
    assert f'MY_FLAG: "{value}"' in msg


def test_env_quoted_and_plain_decimal_values_are_kept_as_text(tmp_path):
    p = write(tmp_path, """\
        model_name: a/b
        accuracy_threshold: 0.9
        env: {A: "yes", B: "0755", C: 1, D: "", E: 4096, F: 1e3}
        """)
    c = load_config(p)
    assert c.env == {"A": "yes", "B": "0755", "C": "1", "D": "", "E": "4096", "F": "1e3"}  # PyYAML: 1e3 is a string


def test_variant_env_checked_too(tmp_path):
    p = write(tmp_path, """\
        model: x
        variants:
          reference:
            env: {VLLM_USE_V2: off}
        tasks:
          t: {kind: synthetic}
        """)
    msg = err(p)
    assert f"{p}:4" in msg and "variants.reference.env.VLLM_USE_V2" in msg and 'VLLM_USE_V2: "off"' in msg


@pytest.mark.parametrize("value", ["yes", "1.5", "0123"])
def test_model_name_read_as_other_type_is_an_error(tmp_path, value):
    p = write(tmp_path, f"accuracy_threshold: 0.9\nmodel_name: {value}\n")
    msg = err(p)
    assert f"{p}:2" in msg and "model_name" in msg and f'model_name: "{value}"' in msg


def test_server_args_list_items(tmp_path):
    ok = write(tmp_path, """\
        model_name: a/b
        accuracy_threshold: 0.9
        server_args: [--max-model-len, 4096, --served-model-name, "my model"]
        """)
    c = load_config(ok)
    assert c.server_args == ("--max-model-len", "4096", "--served-model-name", "my model")
    bad = write(tmp_path, """\
        model_name: a/b
        accuracy_threshold: 0.9
        server_args:
          - --enforce-eager
          - --trust-remote-code
          - on
        """, "bad.yaml")
    msg = err(bad)
    assert f"{bad}:6" in msg and "server_args.2" in msg and '- "on"' in msg


def test_server_args_scalar_read_as_float(tmp_path):
    p = write(tmp_path, "model_name: a/b\naccuracy_threshold: 0.9\nserver_args: 1.0\n")
    assert 'server_args: "1.0"' in err(p)


# ------------------------------------------------------------------ typed speculative config

NATIVE = """\
model: x
variants:
  reference: {}
  spec:
    speculative_config: {SPEC}
tasks:
  t: {kind: synthetic}
gates:
  min_acceptance_length: MIN
"""


def native(tmp_path, spec: str, floor: str = "1.5") -> Path:
    return write(tmp_path, NATIVE.replace("SPEC", spec).replace("MIN", floor))


def test_native_misspelt_method_names_line_and_nearest(tmp_path):
    # no method and no draft model: refused, naming the misspelt key and the nearest one
    p = native(tmp_path, "methd: mtp, num_speculative_tokens: 2")
    msg = err(p)
    assert f"{p}:5" in msg
    assert "variants.spec.speculative_config" in msg and "'methd'" in msg and "did you mean 'method'" in msg


def test_native_untyped_speculative_key_is_a_warning_and_passed_on(tmp_path):
    p = native(tmp_path, "method: mtp, num_speculative_tokens: 2, num_speculative_token: 3")
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
    p = write(tmp_path, f"model_name: a/b\naccuracy_threshold: 0.9\nserver_args: --speculative-config '{spec}'\n")
    cfg = load_config(p)
    [w] = cfg.warnings
    assert w.line == 3 and w.key == "server_args.--speculative-config.num_speculative_token"
    assert w.nearest == "num_speculative_tokens" and f"{p}:3" in w.message
    argv = list(next(v for v in build_plan([cfg]).configs[0].variants if v.name == "spec_sync").argv)
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == json.loads(spec)


def test_typed_values_are_checked(tmp_path):
    assert "num_speculative_tokens" in err(native(tmp_path, "method: mtp, num_speculative_tokens: 0"))
    assert "prompt_lookup_min (5) is larger than prompt_lookup_max (3)" in err(
        native(tmp_path, "method: ngram, num_speculative_tokens: 2, prompt_lookup_min: 5, prompt_lookup_max: 3"))
    assert "set 'method'" in err(native(tmp_path, "num_speculative_tokens: 2"))


def test_speculative_keys_reach_the_command_unchanged(tmp_path):
    p = native(tmp_path, "method: ngram, num_speculative_tokens: 3, prompt_lookup_min: 2, prompt_lookup_max: 4")
    cp = build_plan([load_config(p)]).configs[0]
    argv = list(next(v for v in cp.variants if v.name == "spec").argv)
    sent = json.loads(argv[argv.index("--speculative-config") + 1])
    assert sent == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4}


@pytest.mark.parametrize("k, floor, refused", [(2, "3.5", True), (2, "3.0", False), (1, "2.01", True)])
def test_min_acceptance_length_above_one_plus_k_is_refused(tmp_path, k, floor, refused):
    p = native(tmp_path, f"method: mtp, num_speculative_tokens: {k}", floor)
    if not refused:
        assert load_config(p).gates.min_acceptance_length == float(floor)
        return
    msg = err(p)
    assert f"{p}:9" in msg and f"min_acceptance_length {float(floor)}" in msg and f"= {1 + k}" in msg


def test_min_acceptance_length_refused_in_vllm_form(tmp_path):
    spec = shlex.quote('{"method":"mtp","num_speculative_tokens":1}')
    p = write(tmp_path, f"model_name: a/b\naccuracy_threshold: 0.9\nmin_acceptance_length: 2.5\n"
                        f"server_args: --speculative-config {spec}\n")
    msg = err(p)
    assert f"{p}:3" in msg and "2.5" in msg and "= 2" in msg
