"""The typed speculative config refuses what vLLM would refuse, naming the key.

Every expected line number below is counted by hand from the literal YAML in the
test, not taken from the loader.
"""

from __future__ import annotations

from tests.config.texts import err, spec_native



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
