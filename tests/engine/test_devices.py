"""The GPUs evalrun may use and each server's need (harness/engine/devices.py); the
expected device counts follow vLLM's world-size rule (tp x pp x pcp per data-parallel
rank on the node), worked out by hand."""

import pytest

from harness.engine.devices import (
    DeviceError,
    available_devices,
    cap_devices,
    detected_devices,
    variant_need,
)

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
