"""The GPUs evalrun may use and each server's need (harness/engine/devices.py); the
expected device counts follow vLLM's world-size rule (tp x pp x pcp per data-parallel
rank on the node), worked out by hand. The dry run's probe asks an interpreter for its
torch's device count: here a shell script stands in for that interpreter (this machine
has no GPU to count)."""

import os

import pytest

from harness.engine import devices as D
from harness.engine.devices import (
    DeviceError,
    available_devices,
    cap_devices,
    detected_devices,
    given_devices,
    planned_devices,
    probed_devices,
    variant_need,
)

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

CMD = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]


@pytest.mark.parametrize("flags,need", [
    ([], 1),
    (["--tensor-parallel-size", "4"], 4),
    (["--tensor_parallel_size=4"], 4),
    (["-tp", "8"], 8),
    (["-tp=2", "-pp", "2"], 4),
    (["--pipeline-parallel-size=2", "--tensor-parallel-size", "2", "--data-parallel-size", "2"], 8),
    (["-dp", "4", "--data-parallel-size-local", "2"], 2),
    (["-tp", "2", "-tp", "4"], 4),  # the last one wins, as with argparse
    (["--prefill-context-parallel-size", "2", "-tp", "2"], 4),
])
def test_variant_need_as_vllm_computes_it(flags, need):
    assert variant_need(CMD + flags) == need


def test_variant_need_errors_name_the_flag_and_variant():
    with pytest.raises(DeviceError, match="cfg/ref: --tensor-parallel-size 'four'"):
        variant_need(CMD + ["-tp", "four"], "cfg/ref")
    with pytest.raises(DeviceError, match="cfg/ref: --tensor-parallel-size has no value"):
        variant_need(CMD + ["--tensor-parallel-size"], "cfg/ref")


def test_cuda_visible_devices_is_the_list_when_set():
    assert detected_devices({"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}) == tuple("01234567")
    assert detected_devices({"CUDA_VISIBLE_DEVICES": "3, 5"}) == ("3", "5")
    assert detected_devices({"CUDA_VISIBLE_DEVICES": ""}) == ()


def test_cpu_host_has_no_devices():
    # this machine has no GPU: neither NVML nor the CPU build of torch reports one
    assert detected_devices({}) == ()


def test_gpus_caps_by_count_or_list():
    eight = tuple("01234567")
    assert cap_devices(eight, "4") == ("0", "1", "2", "3")
    assert cap_devices(eight, "2,5") == ("2", "5")
    assert cap_devices(eight, None) == eight
    with pytest.raises(DeviceError, match="--gpus 1,9: device.s. 9 not available"):
        cap_devices(eight, "1,9")
    assert available_devices("2", {"CUDA_VISIBLE_DEVICES": "4,5,6"}) == ("4", "5")


def test_given_devices_and_variant_need():
    assert given_devices({"CUDA_VISIBLE_DEVICES": "0,1, 2,GPU-ab"}) == ["0", "1", "2", "GPU-ab"]
    assert given_devices({}) == [] and given_devices({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert variant_need(["vllm", "--tensor-parallel-size", "4"]) == 4
    assert variant_need(["--tensor_parallel_size=2", "-pp", "2", "--data-parallel-size", "3"]) == 12
    assert variant_need(["serve", "m"]) == 1
    with pytest.raises(ValueError, match="--tensor-parallel-size"):
        variant_need(["--tensor-parallel-size", "0"])


def interpreter(tmp_path, body: str) -> str:
    """A stand-in for the servers' interpreter: a shell script running ``body``."""
    exe = tmp_path / "python"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    os.chmod(exe, 0o755)
    return str(exe)


def test_the_probe_asks_the_servers_interpreter_when_nothing_else_says(tmp_path, monkeypatch):
    monkeypatch.setattr(D, "_nvml_count", lambda: None)
    four = interpreter(tmp_path, "echo 4")
    assert probed_devices({}, four) == ("0", "1", "2", "3")
    assert probed_devices({"CUDA_VISIBLE_DEVICES": "5,7"}, four) == ("5", "7")   # the variable wins
    assert probed_devices({}, interpreter(tmp_path, "echo no torch >&2; exit 1")) == ()
    assert probed_devices({}, str(tmp_path / "missing")) == ()
    monkeypatch.setattr(D, "_nvml_count", lambda: 2)
    assert probed_devices({}, four) == ("0", "1")   # NVML first: the interpreter is not asked


def test_planned_devices_cap_and_only_the_dry_run_assumes(tmp_path, monkeypatch):
    monkeypatch.setattr(D, "_nvml_count", lambda: None)
    two = interpreter(tmp_path, "echo 2")
    assert planned_devices({}, two, None) == (("0", "1"), None)
    assert planned_devices({}, two, "1") == (("0",), None)
    with pytest.raises(DeviceError, match="--gpus 3: asks for 3 device.s., this host has 2"):
        planned_devices({}, two, "3")
    found, note = planned_devices({}, two, "3", assume=True)
    assert found == ("0", "1", "2") and note is not None and "although this host has 2" in note
