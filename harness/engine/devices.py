"""The GPUs evalrun may use, and how many each variant's server needs.

* :func:`available_devices`: ``CUDA_VISIBLE_DEVICES`` when it is set (an empty value
  means none), else the devices NVML reports (``pynvml`` from nvidia-ml-py, when
  importable), else the installed torch's ``torch.cuda.device_count()``; none on a CPU
  host. ``--gpus`` (a list ``0,1,4`` or a count ``4``) caps the result.
* :func:`probed_devices` / :func:`planned_devices`: the same without importing torch
  into evalrun (the dry run's cost): the servers' interpreter is asked in a subprocess.
* :func:`given_devices`: the devices one server process was handed (its
  ``CUDA_VISIBLE_DEVICES``), as the run record stores them.
* :func:`variant_need`: the devices one vLLM server takes, as vLLM computes them
  (``vllm/config/parallel.py`` of vllm 0.32: ``world_size = pipeline_parallel_size x
  tensor_parallel_size x prefill_context_parallel_size``, and one such world per
  data-parallel rank on this node: ``--data-parallel-size-local``, which defaults to
  ``--data-parallel-size``). Each factor is found by its destination in vLLM's parser
  (:mod:`harness.config.vllm_parser`), so every spelling the parser accepts counts:
  ``--tensor-parallel-size 4``, ``--tensor_parallel_size=4``, ``-tp 4``, ``-tp=4``,
  ``-pc 2`` (a unique prefix of ``-pcp``); the last occurrence wins, as with argparse.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence

from harness.config.vllm_args import hits_of
from harness.config.vllm_parser import current_table
from harness.engine.probes import command, cuda_count

#: The destination in vLLM's parser of each factor of a server's device count (vllm 0.32
#: ``vllm/engine/arg_utils.py``).
PARALLEL_DESTS = {
    "tensor": "tensor_parallel_size",
    "pipeline": "pipeline_parallel_size",
    "prefill_context": "prefill_context_parallel_size",
    "data": "data_parallel_size",
    "data_local": "data_parallel_size_local",
}


class DeviceError(ValueError):
    """The devices cannot be determined or do not suffice (bad ``--gpus``, a malformed
    parallel-size flag, a variant needing more devices than available); names the
    option, flag or variant."""


def _flag_value(argv: Sequence[str], dest: str, where: str) -> int | None:
    """The integer value of the last flag that sets ``dest`` in ``argv``, or None."""
    found = hits_of(argv, dest)
    if not found:
        return None
    h = found[-1]
    long = (current_table().options_of(dest) or [h.option])[0]
    if h.value is None:
        raise DeviceError(f"{where}: {h.spelled} has no value")
    try:
        n = int(h.value)
    except ValueError:
        raise DeviceError(f"{where}: {long} {h.value!r} is not an integer (written {h.spelled})") from None
    if n < 1 and dest != "data_parallel_size_local":
        raise DeviceError(f"{where}: {long} {n} must be at least 1 (written {h.spelled})")
    return n


def variant_need(argv: Sequence[str], where: str = "server command") -> int:
    """Devices one server started with ``argv`` takes on this node.

    Args:
        argv: the server command.
        where: what to name in errors (e.g. the variant id).

    Returns:
        ``tp x pp x pcp x dp_local`` (each 1 when absent; ``dp_local`` defaults to
        ``dp``), at least 1.

    Raises:
        DeviceError: a parallel-size flag without a value or with a non-integer or
            non-positive one (names it and ``where``).
    """
    v = {k: _flag_value(argv, dest, where) for k, dest in PARALLEL_DESTS.items()}
    world = (v["tensor"] or 1) * (v["pipeline"] or 1) * (v["prefill_context"] or 1)
    dp_local = v["data_local"] if v["data_local"] is not None else (v["data"] or 1)
    return max(1, world * max(1, dp_local))


def _nvml_count() -> int | None:
    """Devices NVML reports, or None when pynvml is missing or NVML cannot start."""
    try:
        import pynvml
    except Exception:  # noqa: BLE001 - not installed or broken: try torch
        return None
    try:
        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no driver (a CPU host): no NVML devices
        return None


#: Device nodes of a GPU driver (NVIDIA, AMD's ROCm); without any, torch is not imported.
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd")


def _torch_count() -> int | None:
    """``torch.cuda.device_count()`` of the installed torch, or None without torch or CUDA.
    Without any GPU driver device node (:data:`GPU_DEVICE_NODES`) it is 0 without
    importing torch (seconds of a CPU host's start-up)."""
    if not any(os.path.exists(n) for n in GPU_DEVICE_NODES):
        return 0
    try:
        import torch
    except Exception:  # noqa: BLE001 - no torch here: no device count from it
        return None
    try:
        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - a CPU build: no CUDA devices
        return 0


def given_devices(env: Mapping[str, str]) -> list[str]:
    """The CUDA device ids a process with environment ``env`` is given: the entries of
    ``CUDA_VISIBLE_DEVICES`` (ids or UUIDs, in order); empty when unset or empty (a CPU
    host, or no GPU given)."""
    raw = env.get("CUDA_VISIBLE_DEVICES", "")
    return [d.strip() for d in raw.split(",") if d.strip()]


def detected_devices(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Device ids visible to evalrun before any cap: ``CUDA_VISIBLE_DEVICES`` split on
    commas when set (empty = none, :func:`given_devices`), else ``0..n-1`` for the count
    NVML, then torch, reports (NVML and torch are imported only here, only when the
    variable is unset)."""
    env = os.environ if env is None else env
    if "CUDA_VISIBLE_DEVICES" in env:
        return tuple(given_devices(env))
    n = _nvml_count()
    if n is None:
        n = _torch_count()
    return tuple(str(i) for i in range(n or 0))


def cap_devices(devices: Sequence[str], gpus: str | None) -> tuple[str, ...]:
    """``devices`` capped by the ``--gpus`` option.

    Args:
        devices: the detected device ids.
        gpus: None (no cap), a count (``"4"``: the first four), or a comma list of device
            ids (``"0,1,4"``: those, each of which must be among ``devices`` when devices
            were detected; on a host where none were, the list is taken as given).

    Raises:
        DeviceError: a count below 0 or above the devices detected (``--gpus 8`` on a host
            with fewer: only the dry run plans devices that are not there,
            :func:`dry_run_devices`), or a listed device that is not available (names
            ``--gpus`` and the device).
    """
    if gpus is None:
        return tuple(devices)
    text = gpus.strip()
    if "," not in text and text.isdigit():
        if int(text) > len(devices):
            raise DeviceError(f"--gpus {gpus}: asks for {int(text)} device(s), this host has {len(devices)} ("
                              + (", ".join(devices) if devices else "none: a CPU host, or no GPU visible")
                              + "); only --dry-run plans devices that are not there")
        return tuple(devices)[:int(text)]
    wanted = tuple(d.strip() for d in text.split(",") if d.strip())
    missing = [d for d in wanted if devices and d not in devices]
    if missing:
        raise DeviceError(f"--gpus {gpus}: device(s) {', '.join(missing)} not available "
                          f"(available: {', '.join(devices) or 'none'})")
    if len(set(wanted)) != len(wanted):
        raise DeviceError(f"--gpus {gpus}: a device is listed twice")
    return wanted


def available_devices(gpus: str | None = None, env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The device ids evalrun may hand to its servers: :func:`detected_devices`
    capped by ``--gpus`` (:func:`cap_devices`). Empty on a CPU host."""
    return cap_devices(detected_devices(env), gpus)


def dry_run_devices(detected: Sequence[str], gpus: str | None) -> tuple[tuple[str, ...], str | None]:
    """The devices the dry run plans on: :func:`cap_devices` of ``detected``, except that a
    ``--gpus`` count above the devices detected plans that many devices that are not there
    (``0..N-1``), so a node's schedule and cost can be previewed from any host (a real run
    refuses that, :func:`cap_devices`).

    Returns:
        ``(device ids, note)``; the note says the devices are assumed (None when they exist).

    Raises:
        DeviceError: as :func:`cap_devices` for anything but a count above the devices.
    """
    text = (gpus or "").strip()
    if "," not in text and text.isdigit() and int(text) > len(detected):
        n = int(text)
        return tuple(str(i) for i in range(n)), (
            f"planned on {n} device(s) from --gpus {gpus}, although this host has {len(detected)}: a preview "
            "of that node's schedule and cost (a run with --gpus here refuses)")
    return cap_devices(detected, gpus), None


def probed_devices(env: Mapping[str, str], python: str) -> tuple[str, ...]:
    """The devices found without importing torch into this process (the dry run imports
    no engine): ``CUDA_VISIBLE_DEVICES`` of ``env`` when set, else ``0..n-1`` for NVML's
    count, else for ``torch.cuda.device_count()`` asked of ``python`` (the servers'
    interpreter) in a subprocess (:mod:`harness.engine.probes.cuda_count`; none when that fails)."""
    if "CUDA_VISIBLE_DEVICES" in env:
        return detected_devices(env)
    n = _nvml_count()
    if n is None:
        try:
            r = subprocess.run(command(python, cuda_count), capture_output=True, text=True, timeout=120, check=False)
            n = int(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 and r.stdout.strip() else 0
        except (OSError, subprocess.TimeoutExpired, ValueError):
            n = 0
    return tuple(str(i) for i in range(n))


def planned_devices(env: Mapping[str, str], python: str, gpus: str | None,
                    assume: bool = False) -> tuple[tuple[str, ...], str | None]:
    """The devices a plan is scheduled on: :func:`probed_devices` capped by ``--gpus``
    (:func:`cap_devices`); with ``assume`` (the dry run) a ``--gpus`` count above them
    plans that many (:func:`dry_run_devices`).

    Returns:
        ``(device ids, note)``; the note says the devices are assumed (None when they exist).

    Raises:
        DeviceError: a bad ``--gpus`` (names it).
    """
    found = probed_devices(env, python)
    return dry_run_devices(found, gpus) if assume else (cap_devices(found, gpus), None)
