"""Which variants run together, on which devices: the plan of a run's servers.

Pure functions (no processes, no clocks), shared by the runtime pool
(:mod:`harness.engine.pool`) and the dry run's schedule display.

API (what a caller needs)::

    items = [Item(key="cfg/reference", need=4, seconds=300.0), ...]
    slots = plan_schedule(items, devices=("0", "1", ..., "7"), max_servers=None)
    sim = simulate(items, devices, max_servers)   # Simulation: slots, wall, gpu_seconds, lower_bound

* ``Item.key``: any unique name (evalrun uses the variant id ``config/variant``).
* ``Item.need``: devices the server needs (:func:`harness.engine.devices.variant_need`);
  ignored when ``devices`` is empty.
* ``Item.seconds``: the caller's estimate of the server's lifetime (start-up plus
  requests); :func:`default_seconds` when nothing better is known.
* ``devices``: the device ids evalrun may use (:func:`harness.engine.devices.available_devices`);
  empty on a CPU host, where items run one at a time in the order given (today's order).
* ``max_servers``: at most this many servers alive at once (None = no cap beyond the devices).

The policy is LPT list scheduling (Graham 1969, "Bounds on multiprocessing timing
anomalies"): items are ordered by estimated seconds, longest first (ties: the order
given), and whenever devices free up, every waiting item that fits starts, in that order.
An item gets a disjoint device set of its need: an aligned block of consecutive devices
when one is free (``need`` 4 on 8 devices: ``0-3`` or ``4-7``, the NVLink-friendly
halves), else the lowest free ones.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

#: Seconds per request of :func:`default_seconds` (an order of magnitude, only used to
#: rank items when no earlier run says how long they take).
SECONDS_PER_REQUEST = 1.0
#: Start-up seconds of :func:`default_seconds`.
STARTUP_SECONDS = 60.0


class ScheduleError(ValueError):
    """An item cannot be placed (it needs more devices than there are); names the item."""


@dataclass(frozen=True)
class Item:
    """One server to place.

    Attributes:
        key: unique name (e.g. ``config/variant``).
        need: devices it needs (>= 1; ignored on a CPU host).
        seconds: estimated lifetime of its server, seconds (>= 0).
    """

    key: str
    need: int = 1
    seconds: float = 0.0


@dataclass(frozen=True)
class Slot:
    """Where and when an item runs in the simulation.

    Attributes:
        key: the item's key.
        devices: the device ids it is given (empty on a CPU host).
        start: simulated start, seconds from the run's start.
        end: ``start + item.seconds``.
    """

    key: str
    devices: tuple[str, ...]
    start: float
    end: float


@dataclass(frozen=True)
class Simulation:
    """The simulated run.

    Attributes:
        slots: one per item, in start order (ties: LPT order).
        wall: seconds until the last item ends.
        gpu_seconds: sum over items of ``seconds x len(devices)`` (0 on a CPU host).
        lower_bound: no schedule can be faster: ``max(gpu_seconds / len(devices),
            longest item)`` on a GPU host; the sum of the items' seconds on a CPU host.
    """

    slots: tuple[Slot, ...]
    wall: float
    gpu_seconds: float
    lower_bound: float

    def together(self) -> list[list[str]]:
        """Groups of keys alive at the same time: one group per start instant, the items
        running at that instant (for a display of "which variants run together")."""
        groups: list[list[str]] = []
        for t in sorted({s.start for s in self.slots}):
            alive = [s.key for s in self.slots if s.start <= t < s.end or (s.start == t == s.end)]
            if alive and alive not in groups:
                groups.append(alive)
        return groups


def default_seconds(num_requests: int, passes: int = 1) -> float:
    """An estimate of a server's lifetime when no earlier run measured it:
    :data:`STARTUP_SECONDS` + ``num_requests x passes x`` :data:`SECONDS_PER_REQUEST`."""
    return STARTUP_SECONDS + num_requests * passes * SECONDS_PER_REQUEST


def lpt_order(items: Sequence[Item]) -> list[Item]:
    """``items`` longest estimated seconds first; equal estimates keep their order."""
    return [it for _, it in sorted(enumerate(items), key=lambda p: (-p[1].seconds, p[0]))]


def pick_devices(free: Sequence[str], devices: Sequence[str], need: int) -> tuple[str, ...] | None:
    """The devices to give an item needing ``need`` of them, or None when fewer are free.

    Args:
        free: the free device ids.
        devices: every device id, in order (positions define the aligned blocks).
        need: how many.

    Returns:
        An aligned block ``devices[k*need:(k+1)*need]`` that is wholly free (lowest k),
        else the ``need`` free devices earliest in ``devices``; None when ``len(free) < need``.
    """
    free_set = set(free)
    if need <= 0 or len(free_set) < need:
        return None if need > 0 else ()
    for k in range(len(devices) // need):
        block = tuple(devices[k * need:(k + 1) * need])
        if all(d in free_set for d in block):
            return block
    return tuple(d for d in devices if d in free_set)[:need]


def check_fits(items: Sequence[Item], devices: Sequence[str]) -> None:
    """Raise :class:`ScheduleError` naming every item needing more than ``len(devices)``
    devices (no check on a CPU host: ``devices`` empty)."""
    if not devices:
        return
    bad = [it for it in items if it.need > len(devices)]
    if bad:
        raise ScheduleError("; ".join(
            f"{it.key}: needs {it.need} devices, only {len(devices)} available ({','.join(devices)})" for it in bad))


def simulate(items: Sequence[Item], devices: Sequence[str], max_servers: int | None = None) -> Simulation:
    """Simulate the run: LPT list scheduling on disjoint device sets (see the module doc).

    Args:
        items: the servers, with their needs and estimated seconds.
        devices: device ids; empty = CPU host: one at a time, in the order given.
        max_servers: at most this many alive at once (None = no cap; values < 1 mean 1).

    Returns:
        the :class:`Simulation`.

    Raises:
        ScheduleError: an item needs more devices than there are (names it).
    """
    check_fits(items, devices)
    if not devices:
        t, one_by_one = 0.0, []
        for it in items:
            one_by_one.append(Slot(it.key, (), t, t + it.seconds))
            t += it.seconds
        return Simulation(tuple(one_by_one), t, 0.0, t)
    cap = len(items) if max_servers is None else max(1, max_servers)
    waiting = lpt_order(items)
    free = list(devices)
    running: list[tuple[float, int, Slot]] = []  # heap of (end, tie, slot)
    slots: list[Slot] = []
    now, tie = 0.0, 0
    while waiting or running:
        for it in list(waiting):
            if len(running) >= cap:
                break
            got = pick_devices(free, devices, it.need)
            if got is None:
                continue
            waiting.remove(it)
            free = [d for d in free if d not in got]
            slot = Slot(it.key, got, now, now + it.seconds)
            slots.append(slot)
            heapq.heappush(running, (slot.end, tie, slot))
            tie += 1
        if not running:  # cannot happen after check_fits; guard against a silent loop
            raise ScheduleError(f"{waiting[0].key}: cannot be placed on {len(devices)} devices")
        end, _, done = heapq.heappop(running)
        now = end
        free = [d for d in devices if d in free or d in done.devices]
        while running and running[0][0] <= now:  # everything ending at the same instant
            _, _, other = heapq.heappop(running)
            free = [d for d in devices if d in free or d in other.devices]
    wall = max((s.end for s in slots), default=0.0)
    gpu = sum((s.end - s.start) * len(s.devices) for s in slots)
    longest = max((it.seconds for it in items), default=0.0)
    return Simulation(tuple(slots), wall, gpu, max(gpu / len(devices), longest))


def plan_schedule(items: Sequence[Item], devices: Sequence[str], max_servers: int | None = None) -> list[Slot]:
    """The assignment of :func:`simulate`: one :class:`Slot` per item (devices, planned
    start and end), in start order. Raises :class:`ScheduleError` as :func:`simulate`."""
    return list(simulate(items, devices, max_servers).slots)
