"""The config types: the typed speculative config refuses what vLLM would refuse, naming
the key; environment values are strings.

Every expected line number below is counted by hand from the literal YAML in the
test, not taken from the loader.
"""

from __future__ import annotations

from harness.config.loader import load_config
from harness.config.plan import build_plan
from tests.config.texts import HEAD, err, spec_native, write_text


def test_native_misspelt_method_names_line_and_nearest(tmp_path):
    # no method and no draft model: refused, naming the misspelt key and the nearest one
    p = spec_native(tmp_path, "methd: mtp, num_speculative_tokens: 2")
    msg = err(p)
    assert f"{p}:5" in msg
    assert "variants.spec.speculative_config" in msg and "'methd'" in msg and "did you mean 'method'" in msg


def test_typed_values_are_checked(tmp_path):
    assert "num_speculative_tokens" in err(spec_native(tmp_path, "method: mtp, num_speculative_tokens: 0"))
    assert "prompt_lookup_min (5) is larger than prompt_lookup_max (3)" in err(
        spec_native(tmp_path, "method: ngram, num_speculative_tokens: 2, prompt_lookup_min: 5, prompt_lookup_max: 3"))
    assert "set 'method'" in err(spec_native(tmp_path, "num_speculative_tokens: 2"))


def test_env_numbers_become_their_text_and_nothing_else_is_converted(tmp_path):
    cfg = load_config(write_text(tmp_path, HEAD + "env: {A: 1, B: '2.5', C: 4096}\n"))
    assert cfg.env == {"A": "1", "B": "2.5", "C": "4096"}
    plan_env = build_plan([cfg]).configs[0].variants[0].env
    assert plan_env["A"] == "1" and plan_env["C"] == "4096"
