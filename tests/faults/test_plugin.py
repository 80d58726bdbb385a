"""harness.faults.plugin: plugin plumbing (fast, no vLLM needed), registration, patch
targets in the installed vLLM (skipped when vLLM is not importable), the model-runner
check and the observers.

The engine-level effects (acceptance down for ``draft-input``, outputs diverging for
``state-rollback``) need a real server and are asserted by the self-check tests; each
fault's wrapper is tested in its own file (``test_<fault module>.py``).
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest

import harness.faults.observers as observers
import harness.faults.plugin as faults
from harness.config.plan import FAULT_ENV as PLAN_ENV
from harness.faults.plugin import FAULT_ENV, FAULTS, FaultConfigError
from tests.faults.fakes import OBSERVERS, needs_vllm

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

# ---------------------------------------------------------------------------
# plumbing
# ---------------------------------------------------------------------------


def test_fault_env_matches_plan():
    assert FAULT_ENV == PLAN_ENV == "EVALRUN_FAULT"


def test_entry_point_declared():
    text = open(os.path.join(os.path.dirname(__file__), "..", "..", "pyproject.toml")).read()
    assert '[project.entry-points."vllm.general_plugins"]' in text
    assert 'evalrun_faults = "harness.faults.plugin:register"' in text


@pytest.mark.parametrize("value", [None, "", "  "])
def test_register_is_inert_without_a_fault(monkeypatch, value):
    if value is not None:
        monkeypatch.setenv(FAULT_ENV, value)
    assert faults.requested_fault() is None
    faults.register()
    assert faults.applied_patches() == []


def test_inert_register_imports_nothing_heavy():
    # A fresh interpreter: importing the module and calling register() without the
    # variable must not import vllm or torch (it runs in every vLLM process).
    code = (
        "import sys, harness.faults.plugin as f; f.register(); "
        "heavy = [m for m in ('vllm', 'torch', 'numpy', 'pydantic') if m in sys.modules]; "
        "print(heavy); assert not heavy, heavy"
    )
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_unknown_fault_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "draft_inptu")
    with pytest.raises(FaultConfigError) as e:
        faults.register()
    msg = str(e.value)
    assert FAULT_ENV in msg and "draft_inptu" in msg
    for name in faults.known_faults():
        assert name in msg
    assert faults.applied_patches() == []


def test_known_faults_listed_and_documented():
    names = faults.known_faults()
    assert names == sorted(names)
    assert {"draft-input", "draft-input-placeholder", "state-rollback", "noop"} <= set(names)
    for name, f in FAULTS.items():
        assert f.name == name
        assert f.summary and f.mirrors and f.expected
        if name != "noop":
            assert f.targets, name
            doc = inspect.getdoc(f.install) or ""
            assert "FAULTS.md" in doc and "Patches" in doc, name


def test_requested_fault_reads_given_environ():
    assert faults.requested_fault({FAULT_ENV: "state-rollback"}) is FAULTS["state-rollback"]
    assert faults.requested_fault({}) is None


@needs_vllm
def test_noop_logs_active_line_and_patches_only_the_observers(monkeypatch, caplog, capsys):
    monkeypatch.setenv(FAULT_ENV, "noop")
    with caplog.at_level("INFO", logger="vllm.evalrun.faults"):
        faults.register()
    out = caplog.text + capsys.readouterr().err
    assert f"evalrun fault noop active in process {os.getpid()}" in out
    # the observers only count (they call the original unchanged); noop patches nothing else
    assert faults.applied_patches() == OBSERVERS



# ---------------------------------------------------------------------------
# patch targets in the installed vLLM
# ---------------------------------------------------------------------------


@needs_vllm
def test_patch_targets_exist_with_expected_signatures():
    assert faults.check_patch_targets() == []


@needs_vllm
def test_cpu_code_path_inherits_the_patched_functions():
    # If a vLLM upgrade makes the CPU runner or the MTP proposer override these,
    # the patches would silently stop applying on CPU.
    from vllm.v1.spec_decode.eagle import EagleProposer
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    assert "propose" not in EagleProposer.__dict__
    assert issubclass(EagleProposer, SpecDecodeBaseProposer)
    assert "_update_states_after_model_execute" not in CPUModelRunner.__dict__
    assert issubclass(CPUModelRunner, GPUModelRunner)


@needs_vllm
def test_runner_feeds_the_patched_call_sites():
    # The runner passes next_token_ids by keyword to drafter.propose, calls the
    # post-verification update, and passes the accepted counts to the GDN builder.
    from vllm.v1.worker import gpu_model_runner as g

    src = inspect.getsource(g.GPUModelRunner)
    assert "next_token_ids=next_token_ids" in src
    assert "self._update_states_after_model_execute(" in src
    assert "num_accepted_tokens=self.num_accepted_tokens.gpu" in src
    assert "self.input_batch.num_accepted_tokens_cpu[:num_reqs]" in src


@needs_vllm
@pytest.mark.parametrize("name", ["draft-input", "draft-input-placeholder", "state-rollback",
                                  "async-placeholder-token", "async-stale-accepted", "spec-prompt-edge"])
def test_register_patches_exactly_the_targets_and_unpatches(monkeypatch, name):
    fault = FAULTS[name]
    originals = {t: t.resolve()[2] for t in fault.targets}
    monkeypatch.setenv(FAULT_ENV, name)
    faults.register()
    faults.register()  # idempotent: vLLM may call it more than once per process
    patched = [t for t in fault.targets if getattr(t.resolve()[2], "__evalrun_fault__", None)]
    assert patched == [t for t in fault.targets if t.patched]
    assert len(faults.applied_patches()) == len(patched) + len(OBSERVERS)
    assert len(patched) >= 1
    for t in patched:
        fn = t.resolve()[2]
        assert fn is not originals[t]
        assert fn.__wrapped__ is originals[t]
    faults.unpatch_all()
    for t in fault.targets:
        assert t.resolve()[2] is originals[t]



@needs_vllm
def test_runner_check_accepts_the_cpu_runner_and_refuses_another():
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    cpu_runner = object.__new__(CPUModelRunner)
    name = faults.check_model_runner(cpu_runner, FAULTS["async-stale-accepted"])
    assert name.startswith("vllm.v1.worker.cpu_model_runner.CPUModelRunner")
    assert "vllm.v1.worker.gpu_model_runner.GPUModelRunner" in name

    class V2Runner:  # stands for vllm.v1.worker.gpu.model_runner.GPUModelRunner
        pass

    with pytest.raises(FaultConfigError) as e:
        faults.check_model_runner(V2Runner(), FAULTS["async-placeholder-token"])
    msg = str(e.value)
    assert "V2Runner" in msg and "vllm.v1.worker.gpu_model_runner.GPUModelRunner" in msg
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in msg and "async-placeholder-token" in msg
    # no fault, or noop: nothing to refuse
    assert faults.check_model_runner(V2Runner(), None).endswith("V2Runner")
    assert faults.check_model_runner(V2Runner(), FAULTS["noop"]).endswith("V2Runner")


@needs_vllm
def test_v2_runners_do_not_derive_from_the_patched_v1_runner():
    # Why the check above matters: vLLM's V2 runners are separate classes.
    from vllm.v1.worker.cpu.model_runner import CPUModelRunner as CPUV2
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner as V1

    assert not issubclass(CPUV2, V1)


@needs_vllm
def test_a_missing_observer_target_does_not_stop_the_server(monkeypatch, tmp_path):
    # observers only count: a renamed vLLM internal leaves the run unobserved, not broken
    monkeypatch.setattr(observers, "CONDENSE", faults.PatchTarget("vllm.v1.worker.gpu_input_batch",
                                                               "InputBatch.no_such_method", ()))
    monkeypatch.setenv(faults.REPORT_ENV, str(tmp_path))
    faults.register()
    assert faults.counts()["observer_missing"] == 1
    assert "vllm.v1.worker.gpu_input_batch.InputBatch.swap_states" in faults.applied_patches()
    assert faults.read_reports(tmp_path)["processes"] == 1
