"""Variants side by side on disjoint GPUs: a device pool and the threads that run jobs on it.

The runner hands :func:`run_jobs` a list of :class:`Job` (one per variant: its id, its
device need and a callable that runs it on the devices it is given); each job runs in
its own thread, which starts AND stops its own server (the parent-death signal of a
server, :mod:`harness.engine.server`, fires when the thread that launched it exits, so
that thread must outlive the server). A job waits for its devices in the pool; the
pool grants them in the plan's order (longest estimated work first,
:func:`harness.config.schedule.lpt_order`): whenever devices free up, every waiting
job that fits starts, as :func:`harness.config.schedule.simulate` predicts.

Stopping: an error raised by a job, or a signal (KeyboardInterrupt in the thread that
waits in :func:`run_jobs`), cancels the pool: no waiting job starts, SIGTERM goes to
every live server's process group (again every 0.2 s until every job thread ended, so
a server launched during the stop is caught too), the threads are joined, and the
error (or the interrupt) is raised again in the waiting thread. A job that returns
normally after a failed server start-up is not an error: the others go on.

On a CPU host (no devices) the runner does not use this module: variants run one at a
time in the calling thread.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from harness.config.plan import Plan
from harness.config.schedule import (
    Item,
    check_fits,
    default_seconds,
    lpt_order,
    pick_devices,
)
from harness.engine import server as _server
from harness.engine.devices import DeviceError, available_devices, variant_need

T = TypeVar("T")

#: Seconds between two SIGTERM rounds while a cancelled pool waits for its threads.
RESIGNAL_SECONDS = 0.2


class PoolCancelled(Exception):
    """The pool was cancelled (another job's error or a signal) before or while this job ran."""


@dataclass(frozen=True)
class ServerPlan:
    """The devices of a run and every selected variant's place in it.

    Attributes:
        devices: device ids evalrun may use (empty on a CPU host).
        max_servers: cap on servers alive at once (None = only the devices limit).
        items: one :class:`harness.config.schedule.Item` per selected, applicable
            variant (key = variant id), in plan order.
    """

    devices: tuple[str, ...]
    max_servers: int | None
    items: tuple[Item, ...]

    @property
    def uses_pool(self) -> bool:
        """True on a GPU host: each server gets its own device set (``CUDA_VISIBLE_DEVICES``),
        one thread per running variant. False on a CPU host: one at a time, no threads."""
        return bool(self.devices)

    def need(self, key: str) -> int:
        """The device need of the variant ``key`` (1 when unknown)."""
        return next((it.need for it in self.items if it.key == key), 1)


def server_plan(plan: Plan, variants: Sequence[str] | None = None, gpus: str | None = None,
                max_servers: int | None = None, estimates: Mapping[str, float] | None = None,
                env: Mapping[str, str] | None = None) -> ServerPlan:
    """Devices, needs and estimates of a run, checked before any server starts.

    Args:
        plan: the run's plan.
        variants: only these variant names (None = all); not-applicable variants are left out.
        gpus: the ``--gpus`` option (a count or a comma list; None = every device found).
        max_servers: the ``--max-servers`` option (None = no cap).
        estimates: variant id -> estimated server seconds (e.g. from earlier runs'
            records); a variant without one gets :func:`harness.config.schedule.default_seconds`
            of its tasks' questions.
        env: the environment to read ``CUDA_VISIBLE_DEVICES`` from (default: this process's).

    Returns:
        the :class:`ServerPlan`.

    Raises:
        DeviceError: a bad ``--gpus`` / ``--max-servers``, a malformed parallel-size
            flag, or a variant needing more devices than available (each names the
            config/variant; no check on a CPU host, where variants run one at a time).
    """
    if max_servers is not None and max_servers < 1:
        raise DeviceError(f"--max-servers {max_servers}: must be at least 1")
    devices = available_devices(gpus, env)
    items = []
    for config_plan in plan.configs:
        questions = sum(t.spec.num_questions or 0 for t in config_plan.tasks)
        for variant_plan in config_plan.variants:
            if (variants is not None and variant_plan.name not in variants) or variant_plan.not_applicable:
                continue
            est = (estimates or {}).get(variant_plan.id)
            try:
                need = variant_need(variant_plan.argv, variant_plan.id)
            except DeviceError:
                if devices:
                    raise
                need = 1  # a CPU host checks no devices; the pre-launch check judges the flag
            items.append(Item(variant_plan.id, need, default_seconds(questions) if est is None else float(est)))
    try:
        check_fits(items, devices)
    except ValueError as e:
        raise DeviceError(f"refused before any server starts: {e} (--gpus, CUDA_VISIBLE_DEVICES)") from None
    return ServerPlan(devices, max_servers, tuple(items))


class DevicePool:
    """Disjoint device sets for jobs, granted in plan order.

    Args:
        devices: every device id.
        order: job keys, highest priority first (LPT order); unknown keys come last.
        max_servers: at most this many leases at once (None = no cap).

    Thread-safe; :meth:`cancel` wakes every waiter (which raises :class:`PoolCancelled`).
    """

    def __init__(self, devices: Sequence[str], order: Sequence[str] = (), max_servers: int | None = None) -> None:
        self.devices = tuple(devices)
        self.free = list(self.devices)
        self.max_servers = max_servers
        self.rank = {k: i for i, k in enumerate(order)}
        self.cancelled = threading.Event()
        self.leases: dict[str, tuple[str, ...]] = {}
        self._waiting: dict[str, int] = {}
        self._expected: dict[str, int] = {}
        self._arrival = 0
        self._arrived: dict[str, int] = {}
        self._cond = threading.Condition()

    def expect(self, needs: Mapping[str, int]) -> None:
        """Announce jobs (key -> need) that will ask soon: until they ask (or are
        :meth:`withdraw` n), a job later in the plan order does not take the devices
        they would get, so the order holds whichever thread arrives first."""
        with self._cond:
            self._expected.update({k: n for k, n in needs.items() if k not in self.leases})

    def withdraw(self, keys: Sequence[str]) -> None:
        """The jobs ``keys`` will not ask (their config stopped early, or they ended)."""
        with self._cond:
            for k in keys:
                self._expected.pop(k, None)
            self._cond.notify_all()

    def _would_start(self) -> dict[str, tuple[str, ...]]:
        """The waiting jobs that get devices now, by list scheduling in rank order
        (announced jobs that have not asked yet keep their place)."""
        free = list(self.free)
        alive = len(self.leases)
        out: dict[str, tuple[str, ...]] = {}
        keys = set(self._waiting) | set(self._expected)
        for key in sorted(keys, key=lambda k: (self.rank.get(k, len(self.rank)), self._arrived.get(k, 0))):
            if self.max_servers is not None and alive >= self.max_servers:
                break
            need = self._waiting.get(key, self._expected.get(key, 0))
            got = pick_devices(free, self.devices, need)
            if got is None:
                continue
            if key in self._waiting:
                out[key] = got
            free = [d for d in free if d not in got]
            alive += 1
        return out

    def acquire(self, key: str, need: int) -> tuple[str, ...]:
        """Wait until ``key`` may start; returns its devices.

        Raises:
            DeviceError: ``need`` exceeds the pool's devices (names ``key``).
            PoolCancelled: the pool was cancelled while waiting.
        """
        if need > len(self.devices):
            raise DeviceError(f"{key}: needs {need} devices, the pool has {len(self.devices)}")
        with self._cond:
            self._waiting[key] = need
            self._arrived[key] = self._arrival
            self._arrival += 1
            try:
                while True:
                    if self.cancelled.is_set():
                        raise PoolCancelled(key)
                    got = self._would_start().get(key)
                    if got is not None:
                        self.free = [d for d in self.free if d not in got]
                        self.leases[key] = got
                        self._expected.pop(key, None)
                        return got
                    self._cond.wait(0.5)
            finally:
                self._waiting.pop(key, None)
                self._cond.notify_all()

    def release(self, key: str) -> None:
        """Give ``key``'s devices back (no-op when it holds none)."""
        with self._cond:
            got = self.leases.pop(key, ())
            self.free = [d for d in self.devices if d in self.free or d in got]
            self._cond.notify_all()

    @contextmanager
    def lease(self, key: str, need: int) -> Iterator[tuple[str, ...]]:
        """:meth:`acquire` then :meth:`release` around the block."""
        got = self.acquire(key, need)
        try:
            yield got
        finally:
            self.release(key)

    def cancel(self) -> None:
        """No waiting job starts any more; wakes every waiter."""
        self.cancelled.set()
        with self._cond:
            self._cond.notify_all()


@dataclass
class Job(Generic[T]):
    """One unit of work for :func:`run_jobs`.

    Attributes:
        key: its name (the variant id; the pool's priority key).
        run: called in the job's own thread with the device ids it was given
            (``()`` when ``need`` is 0); its return value is the job's result.
        need: devices to lease before running (0 = none: e.g. a config's thread,
            whose variants lease their own).
    """

    key: str
    run: Callable[[tuple[str, ...]], T]
    need: int = 0
    error: BaseException | None = field(default=None, init=False)


def _stop_servers() -> None:
    _server.processes().signal_all(signal.SIGTERM)


def run_jobs(jobs: Sequence[Job[T]], pool: DevicePool) -> list[T]:
    """Run every job in its own thread on ``pool``; return their results in job order.

    Raises:
        BaseException: the first job error that is not :class:`PoolCancelled` (after
            every thread ended and every live server was sent SIGTERM), or the
            KeyboardInterrupt the calling thread received (same teardown).
        PoolCancelled: the pool was cancelled elsewhere and no job here failed otherwise.
    """
    finished = [threading.Event() for _ in jobs]
    results: dict[int, T] = {}  # by job index, each written by that job's own thread

    def body(i: int, job: Job[T], done: threading.Event) -> None:
        try:
            if job.need:
                with pool.lease(job.key, job.need) as devices:
                    results[i] = job.run(devices)
            else:
                if pool.cancelled.is_set():
                    raise PoolCancelled(job.key)
                results[i] = job.run(())
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            job.error = e
            if not isinstance(e, PoolCancelled):
                pool.cancel()
                _stop_servers()
        finally:
            if job.need:
                pool.withdraw([job.key])
            done.set()

    pool.expect({j.key: j.need for j in jobs if j.need})

    threads = [threading.Thread(target=body, args=(i, j, d), name=f"evalrun {j.key}", daemon=True)
               for i, (j, d) in enumerate(zip(jobs, finished))]
    interrupt: BaseException | None = None
    for t, d in zip(threads, finished):
        if interrupt is not None:
            d.set()  # never started
            continue
        try:
            t.start()
        except BaseException as e:  # noqa: BLE001 - KeyboardInterrupt while starting: stop, wait, re-raise
            interrupt = e
            pool.cancel()
            if not t.is_alive():
                d.set()
    # polled with sleeps, not Thread.join: a KeyboardInterrupt inside join can leave a
    # thread looking finished while it still runs (CPython), and the servers must be gone first
    while not all(d.is_set() for d in finished):
        try:
            time.sleep(RESIGNAL_SECONDS)
            if pool.cancelled.is_set():
                _stop_servers()  # a server launched while stopping is caught here
        except BaseException as e:  # noqa: BLE001 - KeyboardInterrupt: stop everything, then re-raise
            interrupt = interrupt or e
            pool.cancel()
            _stop_servers()
    if interrupt is not None:
        raise interrupt
    errors = [j.error for j in jobs if j.error is not None]
    real = [e for e in errors if not isinstance(e, PoolCancelled)]
    if real:
        raise real[0]
    if errors or pool.cancelled.is_set():
        raise PoolCancelled("the run was stopped")
    return [results[i] for i in range(len(jobs))]


def new_pool(plan: ServerPlan) -> DevicePool:
    """The pool of ``plan``: its devices, LPT order of its items, its server cap; every
    item announced (:meth:`DevicePool.expect`), so the plan order holds across configs
    whose threads reach their variants at different times (each config withdraws the
    variants it will not run)."""
    pool = DevicePool(plan.devices, [it.key for it in lpt_order(plan.items)], plan.max_servers)
    pool.expect({it.key: it.need for it in plan.items})
    return pool
