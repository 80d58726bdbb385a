"""Waiting for a stopped server's GPU memory (harness/engine/gpu_memory.py), with a fake
device-memory probe and a fake clock: no GPU, no process."""

from __future__ import annotations

from harness.engine.gpu_memory import LOG_INTERVAL, RELEASE_TIMEOUT, still_held, wait_for_release

GIB = 1024 ** 3


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_nothing_to_wait_for_on_a_cpu_host():
    assert wait_for_release([], None, lambda d: None, print)
    assert wait_for_release(["0"], None, lambda d: None, print)  # nothing read before the start


def test_the_slack_is_two_percent_of_the_device():
    before = {"0": (10 * GIB, 100 * GIB)}
    assert still_held(before, {"0": (12 * GIB, 100 * GIB)}) == []
    assert still_held(before, {"0": (12 * GIB + 1, 100 * GIB)}) == ["0"]


def test_memory_that_never_comes_back_ends_the_wait_after_30_s_with_a_message():
    clock, said = Clock(), []
    before = {"0": (1 * GIB, 80 * GIB), "1": (1 * GIB, 80 * GIB)}
    ok = wait_for_release(["0", "1"], before, lambda d: {"0": (1 * GIB, 80 * GIB), "1": (70 * GIB, 80 * GIB)},
                          said.append, clock=clock, sleep=clock.sleep)
    assert not ok and RELEASE_TIMEOUT == clock.t == 30.0
    # progress every 10 s (vLLM's log_interval), then the timeout naming the device held
    assert len(said) == int(RELEASE_TIMEOUT // LOG_INTERVAL) - 1 + 1
    assert said[-1] == ("GPU memory not back after 30 s: GPU 1: 70.0 GiB used (1.0 GiB before the start); "
                        "the next server may not fit")


def test_memory_that_cannot_be_read_any_more_is_said():
    said: list[str] = []
    assert not wait_for_release(["0"], {"0": (0, 1)}, lambda d: None, said.append)
    assert said == ["GPU 0: memory cannot be read any more; not waiting for it"]
