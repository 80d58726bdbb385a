"""The device pool and its job threads (harness/engine/pool.py) without servers: grants
in plan order on disjoint devices, the cap, cancellation on a job's error."""

import threading
import time

import pytest

from harness.engine.pool import DevicePool, Job, PoolCancelled, run_jobs

EIGHT = tuple(str(i) for i in range(8))


def test_jobs_get_disjoint_devices_and_at_most_the_cap_run_at_once():
    pool = DevicePool(EIGHT, order=["a", "b", "c", "d"], max_servers=2)
    alive, most, seen, lock = [0], [0], {}, threading.Lock()

    def work(key):
        def run(devices):
            with lock:
                alive[0] += 1
                most[0] = max(most[0], alive[0])
                held = {d for k, ds in seen.items() if k in pool.leases for d in ds}
                assert not held & set(devices)
                seen[key] = devices
            time.sleep(0.1)
            with lock:
                alive[0] -= 1
            return key
        return run

    out = run_jobs([Job(k, work(k), need=2) for k in "abcd"], pool)
    assert out == list("abcd")
    assert most[0] == 2
    assert all(len(v) == 2 for v in seen.values())


def test_the_plan_order_decides_who_gets_devices_first():
    pool = DevicePool(EIGHT[:4], order=["long", "short"], max_servers=None)
    starts = {}

    def run(key):
        def f(devices):
            starts[key] = time.monotonic()
            time.sleep(0.2)
        return f

    # both need all four devices: "long" is first in the plan, so it starts first
    run_jobs([Job("short", run("short"), need=4), Job("long", run("long"), need=4)], pool)
    assert starts["long"] < starts["short"]


def test_an_error_cancels_the_waiting_jobs_and_is_raised():
    pool = DevicePool(EIGHT[:4], order=["bad", "later"])
    ran = []

    def bad(devices):
        raise RuntimeError("boom in bad")

    with pytest.raises(RuntimeError, match="boom in bad"):
        run_jobs([Job("bad", bad, need=4), Job("later", lambda d: ran.append(d), need=4)], pool)
    assert ran == [] and pool.cancelled.is_set()
    with pytest.raises(PoolCancelled):
        run_jobs([Job("x", lambda d: None, need=1)], pool)
