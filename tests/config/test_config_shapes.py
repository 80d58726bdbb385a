"""What docs/configuration.md says about the shape of each key, tried key by key.

The two shape tables of docs/configuration.md (the vLLM form's table and "Shapes of the
keys") are read here; every field of the loader's input types must be in them, and for
every row a value of another shape, chosen from the shape the docs state, must be refused
with the file and the key path.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.config.loader import load_config
from harness.config.native_form import NativeConfig
from harness.config.schema import ComparisonSpec, ConfigError, GateSpec, TaskSpec, VariantSpec
from harness.config.vllm_form import EvalrunBlock, VllmGsm8kConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def _rows(text: str, header: str) -> dict[str, str]:
    """key -> shape of the Markdown table whose header line is ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == header)
    out = {}
    for line in lines[start + 2:]:
        if not line.startswith("| `"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        out[cells[0].strip("`")] = cells[1]
    return out


TEXT = DOC.read_text(encoding="utf-8")
VLLM_ROWS = _rows(TEXT, "| key | shape | default | meaning |")
NATIVE_ROWS = _rows(TEXT, "| key | shape |")


def test_every_key_of_both_forms_has_its_shape_in_the_docs():
    assert set(VLLM_ROWS) == set(VllmGsm8kConfig.model_fields)
    want = {f"evalrun.{k}" for k in EvalrunBlock.model_fields} | set(NativeConfig.model_fields)
    for prefix, model in (("variants.<name>.", VariantSpec), ("tasks.<name>.", TaskSpec), ("gates.", GateSpec),
                          ("comparisons[].", ComparisonSpec)):
        want |= {prefix + k for k in model.model_fields}
    assert set(NATIVE_ROWS) == want


def wrong_values(shape: str) -> list[Any]:
    """Values of another shape than ``shape`` says (its first word, and what follows)."""
    head = shape.split()[0].rstrip(",")
    if shape.startswith("string, or list"):
        return [{"x": 1}, [["x"]], [{"x": 1}], True]
    if shape.startswith("mapping of string -> string"):
        return [["x"], {"X": ["a", "b"]}, {"X": {"y": 1}}, {"X": True}]
    if shape.startswith("list of strings"):
        return ["x", [["x"]], [5]]
    return {
        "string": [["x"], {"x": 1}, 5],
        "number": ["0.5", True, [1]],
        "integer": [2.5, "3", True],
        "boolean": ["true", 1],
        "mapping": [["x"], "x"],
        "list": ["x", {"x": 1}],
        "one": ["nope", 5],
    }[head]


BASE_VLLM = {"model_name": "m/x", "accuracy_threshold": 0.5}
BASE_NATIVE = {"model": "m/x", "variants": {"reference": {}, "spec": {}}, "tasks": {"t": {"kind": "synthetic"}},
               "comparisons": [{"baseline": "reference", "candidate": "spec"}]}


def _place(key: str, value: Any) -> tuple[dict, str]:
    """A config with ``value`` at the documented ``key``, and the key path the error must name."""
    if key.startswith("evalrun."):
        return {**BASE_VLLM, "evalrun": {key.split(".", 1)[1]: value}}, key
    doc = yaml.safe_load(yaml.safe_dump(BASE_NATIVE))
    parts = key.split(".")
    if parts[0] in ("variants", "tasks") and len(parts) == 3:
        name = "reference" if parts[0] == "variants" else "t"
        doc[parts[0]][name][parts[2]] = value
        return doc, f"{parts[0]}.{name}.{parts[2]}"
    if parts[0] == "comparisons[]":
        doc["comparisons"][0][parts[1]] = value
        return doc, f"comparisons.0.{parts[1]}"
    if parts[0] == "gates" and len(parts) == 2:
        doc["gates"] = {parts[1]: value}
        return doc, key
    doc[key] = value
    return doc, key


CASES = ([("vllm", k, v) for k, shape in VLLM_ROWS.items() for v in wrong_values(shape)]
         + [("native", k, v) for k, shape in NATIVE_ROWS.items() for v in wrong_values(shape)])


@pytest.mark.parametrize("form, key, value", CASES, ids=[f"{c[0]}:{c[1]}={c[2]!r}" for c in CASES])
def test_a_value_of_another_shape_is_refused_with_file_and_key(tmp_path, form, key, value):
    doc, dotted = ({**BASE_VLLM, key: value}, key) if form == "vllm" else _place(key, value)
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert str(p) in msg
    assert re.search(rf"'{re.escape(dotted)}[.']", msg), msg


def test_the_documented_shapes_themselves_load(tmp_path):
    p = tmp_path / "ok.yaml"
    p.write_text(yaml.safe_dump({**BASE_VLLM, "server_args": ["--max-model-len", 4096], "env": {"A": 1, "B": "x"},
                                 "tolerance": 0, "max_concurrency": None, "evalrun": {"alpha": 0.1}}))
    cfg = load_config(p)
    assert cfg.env == {"A": "1", "B": "x"} and cfg.server_args == ("--max-model-len", "4096")
    assert cfg.gates.tolerance == 0.0
