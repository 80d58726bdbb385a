"""Names that become paths and limits that cannot fail (:mod:`harness.config.checks`) are refused at load.
Line numbers are counted by hand from the literal YAML."""

from __future__ import annotations

import shlex
import textwrap
from pathlib import Path

import pytest

from harness.config.loader import load_config
from tests.config.texts import err, spec_native, write_text

NATIVE = """\
model: fake
{name}variants:
  reference: {{}}
  {spec}:
    speculative_config: {{method: mtp, num_speculative_tokens: 2}}
tasks:
  t: {{kind: synthetic, num_questions: 4}}
gates:
  accuracy_threshold: 0.9
  tolerance: {tol}
comparisons:
  - {{baseline: reference, candidate: {spec}, max_accuracy_drop: {drop}{extra}}}
"""


def native(tmp_path: Path, name: str = "", spec: str = "spec", tol: float = 0.08, drop: float = 0.05,
           extra: str = "", file: str = "c.yaml") -> Path:
    p = tmp_path / file
    p.write_text(NATIVE.format(name=f"name: {name!r}\n" if name else "", spec=spec, tol=tol, drop=drop, extra=extra))
    return p


def test_a_good_config_loads(tmp_path):
    assert load_config(native(tmp_path)).name == "c"


@pytest.mark.parametrize("bad, why", [
    ("../../escape", "'..'"), ("a/b", "'/'"), ("a\\b", "'\\\\'"), ("x" * 101, "101 characters long"),
    (".hidden", "does not start with a letter or digit"), ("a b", "' '"),
])
def test_an_unsafe_config_name_is_refused_naming_file_line_and_key(tmp_path, bad, why):
    msg = err(native(tmp_path, name=bad))
    assert f"{tmp_path / 'c.yaml'}:2: key 'name'" in msg and why in msg


def test_an_unsafe_variant_name_is_refused(tmp_path):
    msg = err(native(tmp_path, spec="'..'"))
    assert f"{tmp_path / 'c.yaml'}:4: key 'variants...'" in msg and "contains '..'" in msg


def test_a_file_stem_that_cannot_be_a_folder_is_refused(tmp_path):
    msg = err(native(tmp_path, file="a b.yaml"))
    assert "name (the file name without .yaml)" in msg and "' '" in msg


def test_a_percent_scale_tolerance_is_refused(tmp_path):
    # tolerance 1 meant as one point: floor 0.9 - 1 = -0.1 <= 0, every accuracy passes
    msg = err(native(tmp_path, tol=1))
    assert f"{tmp_path / 'c.yaml'}:10: key 'gates.tolerance'" in msg and "-0.1 <= 0" in msg


def test_a_floor_of_exactly_zero_is_refused_and_just_above_is_not(tmp_path):
    assert "0.9 - 0.9 = 0 <= 0" in err(native(tmp_path, tol=0.9))
    load_config(native(tmp_path, tol=0.89))


def test_a_drop_limit_of_one_is_refused(tmp_path):
    msg = err(native(tmp_path, drop=1))
    assert f"{tmp_path / 'c.yaml'}:12: key 'comparisons.0.max_accuracy_drop'" in msg and ">= 1" in msg


def test_an_output_match_floor_of_zero_and_an_acceptance_drop_of_k_are_refused(tmp_path):
    assert "min_output_match 0.0 <= 0" in err(native(tmp_path, extra=", min_output_match: 0"))
    p = tmp_path / "two.yaml"
    p.write_text(textwrap.dedent("""\
        model: fake
        variants:
          a: {speculative_config: {method: mtp, num_speculative_tokens: 2}}
          b: {speculative_config: {method: mtp, num_speculative_tokens: 2}}
        tasks:
          t: {kind: synthetic, num_questions: 4}
        comparisons:
          - {baseline: a, candidate: b, max_accuracy_drop: null, max_acceptance_length_drop: 2}
        """))
    msg = err(p)
    assert "max_acceptance_length_drop 2.0 >= num_speculative_tokens 2" in msg and ":8:" in msg


def test_a_vllm_form_percent_tolerance_is_refused(tmp_path):
    p = tmp_path / "v.yaml"
    p.write_text("model_name: a/b\naccuracy_threshold: 0.9\ntolerance: 5\nnum_questions: 50\n")
    msg = err(p)
    assert f"{p}:3: key 'tolerance'" in msg


def test_a_task_override_is_named(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(textwrap.dedent("""\
        model: fake
        variants:
          reference: {}
        tasks:
          t:
            kind: synthetic
            gates: {max_error_rate: 1}
        """))
    assert "key 'tasks.t.gates.max_error_rate'" in err(p)


@pytest.mark.parametrize("k, floor, refused", [(2, "3.5", True), (2, "3.0", False), (1, "2.01", True)])
def test_min_acceptance_length_above_one_plus_k_is_refused(tmp_path, k, floor, refused):
    p = spec_native(tmp_path, f"method: mtp, num_speculative_tokens: {k}", floor)
    if not refused:
        assert load_config(p).gates.min_acceptance_length == float(floor)
        return
    msg = err(p)
    assert f"{p}:9" in msg and f"min_acceptance_length {float(floor)}" in msg and f"= {1 + k}" in msg


def test_min_acceptance_length_refused_in_vllm_form(tmp_path):
    spec = shlex.quote('{"method":"mtp","num_speculative_tokens":1}')
    p = write_text(tmp_path, f"model_name: a/b\naccuracy_threshold: 0.9\nmin_acceptance_length: 2.5\n"
                             f"server_args: --speculative-config {spec}\n")
    msg = err(p)
    assert f"{p}:3" in msg and "2.5" in msg and "= 2" in msg


SHAPED = """\
model: fake
server_args: {args}
variants:
  reference: {{}}
  spec:
    speculative_config: {{method: mtp, num_speculative_tokens: 2}}
tasks:
  edges:
    kind: shape
    shape: {{speculative_tokens: {ks}, chunk_size: {chunk}}}
"""


def _shaped(tmp_path: Path, ks: str = "[2]", chunk: str = "null", args: str = "''") -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(SHAPED.format(ks=ks, chunk=chunk, args=args))
    return p


def test_a_shape_whose_edges_are_the_engines_loads(tmp_path):
    cfg = load_config(_shaped(tmp_path, ks="[2, 4]", chunk="64", args="'--max-num-batched-tokens 64'"))
    assert cfg.tasks["edges"].shape.edges() == {"spec_k2": 3, "spec_k4": 5, "chunk": 64}
    # vLLM's parser's other spelling of the same destination counts too
    load_config(_shaped(tmp_path, chunk="64", args="'--max-num-batched-tokens=64'"))
    # and so does another spelling of the same number: vLLM reads this flag with its
    # human_readable_int, so 1K is 1024 and 01024 is 1024 (1k is 1000: refused below)
    for value in ("1K", "01024"):
        load_config(_shaped(tmp_path, chunk="1024", args=f"'--max-num-batched-tokens {value}'"))


@pytest.mark.parametrize("ks, chunk, args, why", [
    ("[4]", "null", "''", "variant spec speculates with num_speculative_tokens 2, not among the shape's "
                          "speculative_tokens [4]"),
    ("[2]", "64", "''", "shape chunk_size 64 but variant reference's server sets --max-num-batched-tokens (not set)"),
    ("[2]", "64", "'--max-num-batched-tokens 128'", "--max-num-batched-tokens 128"),
    ("[2]", "1024", "'--max-num-batched-tokens 1k'", "--max-num-batched-tokens 1000"),
])
def test_a_shape_whose_edges_are_not_the_engines_is_refused(tmp_path, ks, chunk, args, why):
    p = _shaped(tmp_path, ks=ks, chunk=chunk, args=args)
    assert why in err(p) and "s.yaml" in err(p)
