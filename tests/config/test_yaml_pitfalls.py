"""YAML pitfalls the loader refuses (:mod:`harness.config.yaml_pitfalls`).

Every expected line number below is counted by hand from the literal YAML in the
test, not taken from the loader.
"""

from __future__ import annotations

import pytest

from harness.config.loader import load_config
from tests.config.texts import HEAD, err
from tests.config.texts import write_text as write

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


# ------------------------------------------------------------------ shapes


@pytest.mark.parametrize("form", ["vllm", "native", "variant"])
@pytest.mark.parametrize("value, shape, line", [("[a, b]", "a list", None), ("{x: 1}", "a mapping", None),
                                                ("\n    - a\n    - b", "a list", "+1")])
def test_env_lists_and_mappings_are_refused_with_file_line_and_key(tmp_path, form, value, shape, line):
    if form == "vllm":
        text, key, at = HEAD + f"env:\n  OK: x\n  FOO: {value}\n", "env.FOO", 5
    elif form == "native":
        text = (f"model: m/x\nenv:\n  OK: x\n  FOO: {value}\n"
                "variants: {reference: {}}\ntasks: {t: {kind: synthetic}}\n")
        key, at = "env.FOO", 4
    else:
        text = (
            f"model: m/x\nvariants:\n  reference:\n    env:\n      FOO: {value.replace(chr(10), chr(10) + '    ')}\n"
            "tasks: {t: {kind: synthetic}}\n"
        )
        key, at = "variants.reference.env.FOO", 5
    at += 1 if line else 0
    msg = err(write(tmp_path, text))
    assert f"c.yaml:{at}: key '{key}': {shape}" in msg


@pytest.mark.parametrize("item, line", [("[--a, b]", 5), ("{--dtype: float32}", 5)])
def test_server_args_items_must_be_scalars(tmp_path, item, line):
    msg = err(write(tmp_path, HEAD + f"server_args:\n  - --enforce-eager\n  - {item}\n"))
    assert f"c.yaml:{line}: key 'server_args.1'" in msg


def test_server_args_as_a_mapping_is_refused(tmp_path):
    msg = err(write(tmp_path, HEAD + "server_args: {--dtype: float32}\n"))
    assert "c.yaml:3: key 'server_args': a mapping" in msg
