"""Waiting for a stopped server's GPU memory to come back before the next server starts
on those devices, as vLLM's test utility does.

vLLM's ``RemoteVLLMServer`` (``tests/utils.py``, the base of ``RemoteOpenAIServer`` since
2026) stops a server with SIGTERM, 15 s, SIGKILL of the process group, and then calls
``_wait_for_gpu_memory_release(timeout=30.0, log_interval=10.0)`` (subclasses without a
GPU override it with ``pass``). evalrun does the same after every stop
(:meth:`harness.engine.server.VllmServer.stop`): the devices are the ones the server was
handed (its ``CUDA_VISIBLE_DEVICES``, :func:`harness.engine.devices.given_devices`); their
memory is read before the server starts and after it stopped, with NVML
(:func:`nvml_memory`, ``pynvml`` from nvidia-ml-py, as :mod:`harness.engine.devices`
counts devices). Memory counts as back when every device's used memory is at most what
it was before the start plus :data:`RELEASE_SLACK` of its total (evalrun's margin for
other processes' drift: vLLM's exact criterion is not in the source read). On a CPU host
(no devices handed) or without NVML there is nothing to read and nothing is waited for.
Past :data:`RELEASE_TIMEOUT` the wait ends with a message naming the devices and their
memory, and the run goes on (the next start fails on its own if memory is short).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

#: Seconds vLLM's ``RemoteVLLMServer`` waits for the memory (``timeout=30.0``).
RELEASE_TIMEOUT = 30.0
#: Seconds between progress messages while waiting (vLLM's ``log_interval=10.0``).
LOG_INTERVAL = 10.0
#: Seconds between readings.
POLL_SECONDS = 0.5
#: Share of a device's total memory above its used memory before the start that still
#: counts as returned (evalrun's margin).
RELEASE_SLACK = 0.02

#: device id -> (used bytes, total bytes)
MemoryReading = dict[str, tuple[int, int]]
#: reads the memory of the given devices; None when it cannot (no NVML, no devices)
MemoryProbe = Callable[[Sequence[str]], "MemoryReading | None"]


def nvml_memory(devices: Sequence[str]) -> MemoryReading | None:
    """Used and total memory of ``devices`` (CUDA ids or UUIDs, as in
    ``CUDA_VISIBLE_DEVICES``) from NVML, or None without devices, without ``pynvml`` or
    when NVML cannot start or a device cannot be read."""
    if not devices:
        return None
    try:
        import pynvml
    except Exception:  # noqa: BLE001 - not installed or broken: nothing to read
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver
        return None
    try:
        out: MemoryReading = {}
        for d in devices:
            h = (pynvml.nvmlDeviceGetHandleByIndex(int(d)) if d.isdigit()
                 else pynvml.nvmlDeviceGetHandleByUUID(d))
            info = pynvml.nvmlDeviceGetMemoryInfo(h)
            out[d] = (int(info.used), int(info.total))
        return out
    except Exception:  # noqa: BLE001 - a device NVML cannot read
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down is best effort
            pass


def still_held(before: Mapping[str, tuple[int, int]], now: Mapping[str, tuple[int, int]]) -> list[str]:
    """The devices whose used memory is above their use before the start plus
    :data:`RELEASE_SLACK` of their total."""
    return [d for d, (used0, total) in before.items()
            if d in now and now[d][0] > used0 + RELEASE_SLACK * total]


def describe(devices: Sequence[str], before: Mapping[str, tuple[int, int]],
             now: Mapping[str, tuple[int, int]]) -> str:
    """``GPU 0: 61.2 GiB used (1.1 GiB before the start), ...``."""
    gib = 1024 ** 3
    return ", ".join(f"GPU {d}: {now[d][0] / gib:.1f} GiB used ({before[d][0] / gib:.1f} GiB before the start)"
                     for d in devices)


def wait_for_release(devices: Sequence[str], before: MemoryReading | None, probe: MemoryProbe,
                     say: Callable[[str], None], timeout: float = RELEASE_TIMEOUT,
                     clock: Callable[[], float] = time.monotonic,
                     sleep: Callable[[float], None] = time.sleep) -> bool:
    """Wait until the memory of ``devices`` is back to ``before`` (:func:`still_held`).

    Args:
        devices: the devices the server was handed (empty: nothing to wait for).
        before: their memory read before the server started (None: nothing to compare).
        probe: reads the memory (:func:`nvml_memory`; a fake in tests).
        say: where progress and the timeout message go.
        timeout: seconds to wait at most (:data:`RELEASE_TIMEOUT`).

    Returns:
        True when the memory came back (or there is nothing to wait for), False when the
        wait timed out or the memory could no longer be read (said through ``say``).
    """
    if not devices or not before:
        return True
    t0 = last_said = clock()
    while True:
        now = probe(devices)
        if now is None:
            say(f"GPU {', '.join(devices)}: memory cannot be read any more; not waiting for it")
            return False
        held = still_held(before, now)
        if not held:
            return True
        waited = clock() - t0
        if waited >= timeout:
            say(f"GPU memory not back after {timeout:.0f} s: {describe(held, before, now)}; "
                "the next server may not fit")
            return False
        if clock() - last_said >= LOG_INTERVAL:
            say(f"waiting for the GPU memory to come back ({waited:.0f} s): {describe(held, before, now)}")
            last_said = clock()
        sleep(POLL_SECONDS)
