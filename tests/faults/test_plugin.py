"""harness.faults.plugin: plugin plumbing (fast, no vLLM needed) and patch targets in the
installed vLLM (skipped when vLLM is not importable).

The engine-level effects (acceptance down for ``draft-input``, outputs diverging for
``state-rollback``) need a real server and are asserted by the self-check tests.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import subprocess
import sys
import types

import pytest

import harness.faults.plugin as faults
from harness.config.loader import load_config
from harness.config.plan import CPU_ASYNC_ENV, build_plan
from harness.config.plan import FAULT_ENV as PLAN_ENV
from harness.faults.plugin import FAULT_ENV, FAULTS, FaultConfigError

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vllm not installed")


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv(FAULT_ENV, raising=False)
    monkeypatch.delenv(faults.DEBUG_ENV, raising=False)
    monkeypatch.delenv(faults.CPU_ASYNC_ENV, raising=False)
    monkeypatch.delenv(faults.REPORT_ENV, raising=False)
    faults.unpatch_all()
    yield
    faults.unpatch_all()


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


OBSERVERS = [
    "vllm.v1.worker.worker_base.WorkerWrapperBase.init_device",
    "vllm.v1.worker.gpu_input_batch.InputBatch.condense",
    "vllm.v1.worker.gpu_input_batch.InputBatch.swap_states",
]


@needs_vllm
def test_noop_logs_active_line_and_patches_only_the_observers(monkeypatch, caplog, capsys):
    monkeypatch.setenv(FAULT_ENV, "noop")
    with caplog.at_level("INFO", logger="vllm.evalrun.faults"):
        faults.register()
    out = caplog.text + capsys.readouterr().err
    assert f"evalrun fault noop active in process {os.getpid()}" in out
    # the observers only count (they call the original unchanged); noop patches nothing else
    assert faults.applied_patches() == OBSERVERS


def test_off_by_one_counts():
    # k accepted+bonus of d drafts: k <= d -> k+1, k == d+1 -> k-1, d == 0 unchanged
    assert faults.off_by_one_counts([1, 2, 3], [2, 2, 2]) == [2, 3, 2]
    assert faults.off_by_one_counts([1, 1], [0, 1]) == [1, 2]
    assert faults.off_by_one_counts([2], [1]) == [1]
    for d in range(1, 5):
        for k in range(1, d + 2):
            (w,) = faults.off_by_one_counts([k], [d])
            assert w != k and 1 <= w <= d + 1 and abs(w - k) == 1


# ---------------------------------------------------------------------------
# wrapper logic on fakes (torch only)
# ---------------------------------------------------------------------------


def _fake_propose(self, num_speculative_tokens, target_token_ids, target_positions,
                  target_hidden_states, next_token_ids, token_indices_to_sample,
                  common_attn_metadata, sampling_metadata, mm_embed_inputs=None,
                  num_rejected_tokens_gpu=None, slot_mappings=None):
    self.seen = next_token_ids.tolist()
    return "drafts"


@needs_torch
@pytest.mark.parametrize("name", ["draft-input", "draft-input-placeholder"])
def test_draft_input_wrapper_replaces_next_token_ids(name):
    import torch

    wrapped = faults.draft_input_wrapper(name)(_fake_propose)
    me = types.SimpleNamespace()
    # Padded layout: 2 requests x (1 + 2 drafts); request 0 accepted nothing (last
    # valid index 0), request 1 accepted one draft (last valid index 4).
    target = torch.tensor([10, 11, 12, 20, 21, 22], dtype=torch.int32)
    nxt = torch.tensor([99, 98], dtype=torch.int32)
    out = wrapped(me, 2, target_token_ids=target, target_positions=None,
                  target_hidden_states=None, next_token_ids=nxt,
                  token_indices_to_sample=torch.tensor([0, 4], dtype=torch.int32),
                  common_attn_metadata=None, sampling_metadata=None)
    assert out == "drafts"
    assert me.seen == ([10, 21] if name == "draft-input" else [0, 0])
    assert nxt.tolist() == [99, 98]  # the caller's tensor is not modified


@needs_torch
def test_draft_input_wrapper_unpadded_path_uses_query_ends():
    import torch

    wrapped = faults.draft_input_wrapper("draft-input")(_fake_propose)
    me = types.SimpleNamespace()
    cad = types.SimpleNamespace(query_start_loc=torch.tensor([0, 3, 5], dtype=torch.int32))
    target = torch.tensor([1, 2, 3, 4, 5], dtype=torch.int32)
    wrapped(me, 2, target, None, None, torch.tensor([7, 8], dtype=torch.int32), None, cad, None)
    assert me.seen == [3, 5]


def _fake_update(self, output_token_ids, scheduler_output):
    # What vLLM's original does on the non-align path.
    n = output_token_ids.size(0)
    self.num_accepted_tokens.gpu[:n] = (output_token_ids != -1).sum(dim=1)
    self.input_batch.num_accepted_tokens_cpu_tensor[:n].copy_(self.num_accepted_tokens.gpu[:n])


def _fake_runner(num_reqs: int, req_ids: list[str]):
    import torch

    class _Event:
        def synchronize(self):
            pass

        def record(self):
            pass

    return types.SimpleNamespace(
        speculative_config=object(),
        model_config=types.SimpleNamespace(is_hybrid=True),
        cache_config=types.SimpleNamespace(mamba_cache_mode="none"),
        use_async_scheduling=False,
        num_accepted_tokens=types.SimpleNamespace(gpu=torch.ones(8, dtype=torch.int32)),
        num_accepted_tokens_event=_Event(),
        input_batch=types.SimpleNamespace(
            req_ids=req_ids, num_accepted_tokens_cpu_tensor=torch.ones(8, dtype=torch.int32)
        ),
    )


@needs_torch
def test_state_rollback_wrapper_perturbs_counts_of_spec_rows_only():
    import torch

    wrapped = faults.state_rollback_wrapper("state-rollback")(_fake_update)
    runner = _fake_runner(3, ["a", "b", "c"])
    # a: 0 of 2 drafts accepted (k=1); b: all 2 accepted (k=3); c: prefill, no drafts.
    out_ids = torch.tensor([[5, -1, -1], [6, 7, 8], [9, -1, -1]], dtype=torch.int32)
    sched = types.SimpleNamespace(scheduled_spec_decode_tokens={"a": [1, 2], "b": [3, 4]})
    wrapped(runner, out_ids, sched)
    assert runner.input_batch.num_accepted_tokens_cpu_tensor[:3].tolist() == [2, 2, 1]
    assert runner.num_accepted_tokens.gpu[:3].tolist() == [2, 2, 1]


@needs_torch
def test_state_rollback_wrapper_ignores_non_hybrid_models():
    import torch

    wrapped = faults.state_rollback_wrapper("state-rollback")(lambda self, o, s: None)
    runner = _fake_runner(1, ["a"])
    runner.model_config.is_hybrid = False
    sched = types.SimpleNamespace(scheduled_spec_decode_tokens={"a": [1, 2]})
    wrapped(runner, torch.tensor([[5, -1, -1]]), sched)
    assert runner.input_batch.num_accepted_tokens_cpu_tensor[:1].tolist() == [1]


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
def test_state_rollback_wrapper_on_vllms_own_function():
    # The real _update_states_after_model_execute (non-align path) on a fake runner:
    # the wrapper's overwrite must survive the original's copy.
    import torch
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    original = inspect.unwrap(GPUModelRunner.__dict__["_update_states_after_model_execute"])
    wrapped = faults.state_rollback_wrapper("state-rollback")(original)
    runner = _fake_runner(3, ["a", "b", "c"])
    out_ids = torch.tensor([[5, -1, -1], [6, 7, 8], [9, -1, -1]], dtype=torch.int32)
    sched = types.SimpleNamespace(scheduled_spec_decode_tokens={"a": [1, 2], "b": [3, 4]})
    original(runner, out_ids, sched)
    assert runner.input_batch.num_accepted_tokens_cpu_tensor[:3].tolist() == [1, 3, 1]
    wrapped(runner, out_ids, sched)
    assert runner.input_batch.num_accepted_tokens_cpu_tensor[:3].tolist() == [2, 2, 1]
    assert runner.num_accepted_tokens.gpu[:3].tolist() == [2, 2, 1]


# ---------------------------------------------------------------------------
# counters, reports, runner check, async scheduling on the CPU
# ---------------------------------------------------------------------------


def test_reports_are_written_per_process_and_merged(tmp_path, monkeypatch):
    monkeypatch.setenv(faults.REPORT_ENV, str(tmp_path))
    faults._STATE["fault"] = "async-stale-accepted"
    faults.count("async-stale-accepted.executions", 7)
    faults.count("async-stale-accepted.changed", 2)
    path = faults.flush_report()
    assert path == str(tmp_path / f"plugin-{os.getpid()}.json")
    # a second process (another pid) with other counts, and a broken file
    (tmp_path / "plugin-1.json").write_text(json.dumps(
        {"pid": 1, "fault": "async-stale-accepted", "model_runner": "x.Runner", "patched": ["a.b"],
         "counts": {"async-stale-accepted.executions": 3, "batch.reorder_swaps": 5}}))
    (tmp_path / "plugin-2.json").write_text("{not json")
    rep = faults.read_reports(tmp_path)
    assert rep["processes"] == 2 and len(rep["errors"]) == 1
    assert rep["counts"] == {"async-stale-accepted.executions": 10, "async-stale-accepted.changed": 2,
                             "batch.reorder_swaps": 5}
    assert rep["faults"] == ["async-stale-accepted"] and rep["model_runners"] == ["x.Runner"]
    assert faults.exercised(rep, "async-stale-accepted") == (True, "")


@pytest.mark.parametrize("cnts, processes, why", [
    ({}, 0, "did not load"),
    ({"f.executions": 0}, 1, "never ran"),
    ({"f.executions": 4, "f.changed": 0}, 1, "never changed"),
])
def test_fault_not_exercised_reasons(cnts, processes, why):
    ok, reason = faults.exercised({"processes": processes, "counts": cnts, "faults": ["f"]}, "f")
    assert not ok and why in reason
    if processes:
        assert "fault not exercised" in reason


def test_missing_report_folder_reads_as_no_process(tmp_path):
    assert faults.read_reports(tmp_path / "absent")["processes"] == 0


def test_plan_sets_cpu_async_env_only_for_async_variants():
    assert CPU_ASYNC_ENV == faults.CPU_ASYNC_ENV
    repo = os.path.join(os.path.dirname(__file__), "..", "..")
    plan = build_plan([load_config(os.path.join(repo, "configs", "tiny-qwen3next-mtp-cpu.yaml"))])
    env = {v.name: v.env for v in plan.configs[0].variants}
    assert set(env) == {"reference", "spec_sync", "spec_async"}
    assert env["spec_async"][CPU_ASYNC_ENV] == "1"
    assert CPU_ASYNC_ENV not in env["spec_sync"] and CPU_ASYNC_ENV not in env["reference"]


def test_keep_requested_async_only_restores_an_explicit_true():
    def cfg(v):
        return types.SimpleNamespace(scheduler_config=types.SimpleNamespace(async_scheduling=v))

    c = cfg(False)  # what CpuPlatform.check_and_update_config leaves
    assert faults.keep_requested_async(True, c) and c.scheduler_config.async_scheduling is True
    for asked in (None, False):
        c = cfg(False)
        assert not faults.keep_requested_async(asked, c) and c.scheduler_config.async_scheduling is False
    assert faults.counts()["cpu_async.kept"] == 1


@needs_vllm
def test_cpu_async_patch_keeps_async_through_vllms_own_platform_hook(monkeypatch):
    # vLLM's own CpuPlatform.check_and_update_config resets async_scheduling; with the
    # plugin's variable set the requested True survives it, and CUDA events/streams are
    # no-op stand-ins (this host has no CUDA); unpatching restores both.
    import torch
    from vllm.platforms.cpu import CpuPlatform

    src = inspect.getsource(inspect.unwrap(CpuPlatform.check_and_update_config.__func__))
    assert "scheduler_config.async_scheduling = False" in src
    event, stream = torch.cuda.Event, torch.cuda.Stream
    monkeypatch.setenv(faults.CPU_ASYNC_ENV, "1")
    faults.register()
    assert "vllm.platforms.cpu.CpuPlatform.check_and_update_config" in faults.applied_patches()
    if not torch.cuda.is_available():
        assert torch.cuda.Event is faults._NoOpEvent and torch.Event is faults._NoOpEvent
        s = torch.cuda.current_stream()
        s.wait_stream(torch.cuda.Stream())
        with torch.cuda.stream(s):
            torch.cuda.Event(blocking=True).record()
    faults.unpatch_all()
    assert torch.cuda.Event is event and torch.cuda.Stream is stream
    assert "evalrun" not in repr(CpuPlatform.check_and_update_config)


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


@needs_torch
def test_stale_accepted_counts_follow_row_index_not_reorder():
    import torch

    # previous batch rows: 0 -> req A (valid 3), 1 -> req B (valid 1), 2 -> req C (valid 2)
    valid = torch.tensor([3, 1, 2, 0], dtype=torch.int32)
    prev_drafts = torch.tensor([2, 2, 2, 0], dtype=torch.int32)
    # current batch: row 0 = C (was row 2), row 1 = B (stayed), row 2 = new request
    prev_pos = torch.tensor([2, 1, -1], dtype=torch.int32)
    correct = torch.tensor([2, 1, 1], dtype=torch.int32)   # vLLM's gather through prev_positions
    wrong, reordered = faults.stale_accepted_counts(correct, prev_pos, valid, prev_drafts)
    # row 0 moved and verified drafts: takes previous row 0's count (A's 3);
    # row 1 did not move; row 2 is new (no drafts verified): both keep theirs
    assert wrong.tolist() == [3, 1, 1] and reordered.tolist() == [True, False, False]
    # a stale count of 0 (a discarded row) is raised to 1, a valid state slot
    wrong, _ = faults.stale_accepted_counts(correct, torch.tensor([1, 3, -1], dtype=torch.int32),
                                           torch.tensor([3, 1, 2, 0], dtype=torch.int32), prev_drafts + 1)
    assert wrong.tolist() == [3, 1, 1]


@needs_vllm
def test_stale_accepted_wrapper_on_vllms_own_function():
    import torch
    from vllm.v1.spec_decode.utils import update_num_computed_tokens_for_batch_change as orig

    wrapped = faults.stale_accepted_wrapper("async-stale-accepted")(orig)
    def run(fn):
        nct = torch.tensor([10, 20, 30], dtype=torch.int32)
        acc = torch.ones(3, dtype=torch.int32)
        fn(nct, acc, torch.tensor([2, 1, -1], dtype=torch.int32), torch.tensor([3, 1, 2, 0], dtype=torch.int32),
           torch.tensor([2, 2, 2, 0], dtype=torch.int32), torch.tensor([7, 8, 9], dtype=torch.int32))
        return nct.tolist(), acc.tolist()
    (nct0, acc0), (nct1, acc1) = run(orig), run(wrapped)
    # vLLM: row 0 (was row 2): computed 30 + 2 valid, accepted 2; row 1: 20 + 1; row 2 new: CPU value 9
    assert (nct0, acc0) == ([32, 21, 9], [2, 1, 1])
    assert nct1 == nct0 and acc1 == [3, 1, 1]   # positions stay right, only the moved row's count is stale
    c = faults.counts()
    assert c["async-stale-accepted.executions"] == 1 and c["async-stale-accepted.changed"] == 1
    assert c["async-stale-accepted.reordered_rows"] == 1


@needs_vllm
def test_placeholder_token_wrapper_on_vllms_own_function():
    # vLLM's own prepare_next_token_ids_padded on a fake proposer and batch: the fixed
    # backup is the last committed token (num_tokens_no_spec - 1); with the fault it is
    # looked up at the optimistic sequence length, i.e. a placeholder slot (-1 -> 0).
    import numpy as np
    import torch
    from vllm.platforms.cpu import CpuPlatform
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    from vllm.v1.utils import CpuGpuBuffer

    CpuPlatform.register_triton_kernel_overrides()  # the CPU engine's kernels, as in a server
    original = inspect.unwrap(SpecDecodeBaseProposer.__dict__["prepare_next_token_ids_padded"])
    wrapped = faults.placeholder_token_wrapper("async-placeholder-token")(original)
    me = types.SimpleNamespace(backup_next_token_ids=CpuGpuBuffer(4, dtype=torch.int32, device="cpu", with_numpy=True))
    prompt = [5, 6, 7, 8]
    reqs = {"a": types.SimpleNamespace(get_token_id=lambda i: (prompt + [9])[i] if i < 5 else -1),
            "b": types.SimpleNamespace(get_token_id=lambda i: (prompt + [9, 10])[i] if i < 6 else -1)}
    batch = types.SimpleNamespace(num_reqs=2, req_ids=["a", "b"], vocab_size=100,
                                  num_tokens_no_spec=np.array([5, 6]))
    # row a: a discarded row (uses the backup); row b: sampled 11 then a rejected draft
    sampled = torch.tensor([[-1, -1, -1], [11, -1, -1]], dtype=torch.int32)
    discard = torch.tensor([True, False])
    fixed_next, fixed_valid = original(me, sampled, reqs, batch, discard)
    assert fixed_next.tolist() == [9, 11] and fixed_valid.tolist() == [0, 1]
    faults._RUNNER = lambda: types.SimpleNamespace(optimistic_seq_lens_cpu=torch.tensor([7, 8], dtype=torch.int32))
    next_ids, valid = wrapped(me, sampled, reqs, batch, discard)
    # row a's backup looked up at index 7 (beyond its 5 tokens): placeholder -1, clamped to 0
    assert next_ids.tolist() == [0, 11] and valid.tolist() == [0, 1]
    c = faults.counts()
    assert c["async-placeholder-token.executions"] == 1
    assert c["async-placeholder-token.changed"] == 1
    assert c["async-placeholder-token.backup_placeholder"] == 2  # both rows' backups became -1
    # under async scheduling row b was in the previous step's batch (its last token lives
    # on the device): the placeholder the host-side lookup returns is fed to the drafter
    batch.prev_req_id_to_index = {"b": 0}
    next_ids, _ = wrapped(me, sampled, reqs, batch, discard)
    assert next_ids.tolist() == [0, 0]
    assert faults.counts()["async-placeholder-token.changed"] == 1 + 2


@needs_torch
def test_stale_accepted_counts_when_the_batch_grew():
    import torch

    # previous batch had 2 rows; now 3 rows, row 2 moved in from previous row 0
    valid = torch.tensor([3, 2], dtype=torch.int32)
    prev_pos = torch.tensor([1, -1, 0], dtype=torch.int32)
    correct = torch.tensor([2, 1, 3], dtype=torch.int32)
    wrong, reordered = faults.stale_accepted_counts(correct, prev_pos, valid, torch.tensor([2, 2], dtype=torch.int32))
    # row 0 (was row 1) takes previous row 0's 3; row 2 lies beyond the old batch: no stale value
    assert wrong.tolist() == [3, 1, 3] and reordered.tolist() == [True, False, False]


@needs_vllm
def test_a_missing_observer_target_does_not_stop_the_server(monkeypatch, tmp_path):
    # observers only count: a renamed vLLM internal leaves the run unobserved, not broken
    monkeypatch.setattr(faults, "_CONDENSE", faults.PatchTarget("vllm.v1.worker.gpu_input_batch",
                                                               "InputBatch.no_such_method", ()))
    monkeypatch.setenv(faults.REPORT_ENV, str(tmp_path))
    faults.register()
    assert faults.counts()["observer_missing"] == 1
    assert "vllm.v1.worker.gpu_input_batch.InputBatch.swap_states" in faults.applied_patches()
    assert faults.read_reports(tmp_path)["processes"] == 1


@needs_torch
def test_spec_prompt_edge_perturbs_only_prompts_of_k_plus_one_tokens():
    # k = 2: only a request whose prompt has 3 tokens gets the off-by-one; b (4 tokens)
    # keeps its true count though it verified drafts too.
    import torch

    wrapped = faults.state_rollback_wrapper("spec-prompt-edge", faults.prompt_edge_rows)(_fake_update)
    runner = _fake_runner(3, ["a", "b", "c"])
    runner.speculative_config = types.SimpleNamespace(num_speculative_tokens=2)
    runner.requests = {r: types.SimpleNamespace(num_prompt_tokens=n) for r, n in (("a", 3), ("b", 4), ("c", 3))}
    out_ids = torch.tensor([[5, -1, -1], [6, 7, 8], [9, -1, -1]], dtype=torch.int32)
    sched = types.SimpleNamespace(scheduled_spec_decode_tokens={"a": [1, 2], "b": [3, 4]})
    before = faults.counts().get("spec-prompt-edge.changed", 0)
    wrapped(runner, out_ids, sched)
    # a: 0 of 2 accepted -> 1 + 1 = 2; b: untouched 3; c: no drafts (prefill) -> 1
    assert runner.input_batch.num_accepted_tokens_cpu_tensor[:3].tolist() == [2, 3, 1]
    assert faults.counts().get("spec-prompt-edge.changed", 0) - before == 1


@needs_torch
def test_spec_prompt_edge_changes_nothing_for_long_prompts():
    import torch

    wrapped = faults.state_rollback_wrapper("spec-prompt-edge", faults.prompt_edge_rows)(_fake_update)
    runner = _fake_runner(2, ["a", "b"])
    runner.speculative_config = types.SimpleNamespace(num_speculative_tokens=2)
    runner.requests = {"a": types.SimpleNamespace(num_prompt_tokens=245),
                       "b": types.SimpleNamespace(num_prompt_tokens=2)}
    out_ids = torch.tensor([[5, -1, -1], [6, 7, -1]], dtype=torch.int32)
    sched = types.SimpleNamespace(scheduled_spec_decode_tokens={"a": [1, 2], "b": [3, 4]})
    wrapped(runner, out_ids, sched)
    assert runner.input_batch.num_accepted_tokens_cpu_tensor[:2].tolist() == [1, 2]
