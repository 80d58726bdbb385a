"""YAML texts and helpers shared by the config tests (not a test module)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from harness.config.loader import load_config
from harness.config.schema import ConfigError


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    return p


def write_text(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    return write(tmp_path, name, text)


def err(p: Path) -> str:
    """The message of the :class:`ConfigError` loading ``p`` raises."""
    with pytest.raises(ConfigError) as e:
        load_config(p)
    return str(e.value)


#: The two keys a vLLM-form config needs (lines 1 and 2).
HEAD = "model_name: m/x\naccuracy_threshold: 0.5\n"


#: A vLLM-form config with a speculative config (three variants).
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


#: A native config: a reference and one MTP variant, a synthetic task, gates, one comparison.
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


#: A native config whose variant ``spec`` has the speculative config ``SPEC`` (line 5) and
#: whose ``min_acceptance_length`` is ``MIN`` (line 9).
SPEC_NATIVE = """\
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


def spec_native(tmp_path: Path, spec: str, floor: str = "1.5") -> Path:
    return write_text(tmp_path, SPEC_NATIVE.replace("SPEC", spec).replace("MIN", floor))
