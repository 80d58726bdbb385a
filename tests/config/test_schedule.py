"""The plan of a run's servers (harness/config/schedule.py): LPT list scheduling on
disjoint device sets; expected times are worked out by hand in each test."""

import pytest

from harness.config.schedule import (
    Item,
    ScheduleError,
    check_fits,
    lpt_order,
    pick_devices,
    plan_schedule,
    simulate,
)

EIGHT = tuple(str(i) for i in range(8))


def test_two_tp4_configs_run_two_at_a_time_on_disjoint_halves():
    items = [Item(f"c{c}/{v}", 4, 10.0) for c in (1, 2) for v in ("reference", "spec_sync", "spec_async")]
    sim = simulate(items, EIGHT)
    # six equal 10 s items, two at a time: three rounds of 10 s
    assert sim.wall == 30.0
    assert sim.gpu_seconds == 6 * 10.0 * 4
    assert sim.lower_bound == 30.0  # 240 GPU-s / 8 GPUs
    assert sim.together() == [["c1/reference", "c1/spec_sync"], ["c1/spec_async", "c2/reference"],
                              ["c2/spec_sync", "c2/spec_async"]]
    for t in (0.0, 10.0, 20.0):
        alive = [s for s in sim.slots if s.start == t]
        assert len(alive) == 2
        assert {alive[0].devices, alive[1].devices} == {("0", "1", "2", "3"), ("4", "5", "6", "7")}


def test_tp8_items_run_one_after_another_on_all_eight():
    sim = simulate([Item("a", 8, 5.0), Item("b", 8, 7.0)], EIGHT)
    assert [s.key for s in sim.slots] == ["b", "a"]  # longest first
    assert [(s.start, s.end) for s in sim.slots] == [(0.0, 7.0), (7.0, 12.0)]
    assert all(s.devices == EIGHT for s in sim.slots)


def test_longest_first_fills_the_gaps():
    # one 8 s item of 4 devices, four 4 s items of 4 devices: LPT puts the 8 s item at 0
    # with one 4 s item beside it, then a second 4 s one, and the last two together
    items = [Item("s1", 4, 4.0), Item("s2", 4, 4.0), Item("long", 4, 8.0), Item("s3", 4, 4.0), Item("s4", 4, 4.0)]
    sim = simulate(items, EIGHT)
    starts = {s.key: s.start for s in sim.slots}
    assert starts == {"long": 0.0, "s1": 0.0, "s2": 4.0, "s3": 8.0, "s4": 8.0}
    assert sim.wall == 12.0


def test_max_servers_caps_the_servers_alive():
    items = [Item(f"v{i}", 1, 3.0) for i in range(4)]
    assert simulate(items, EIGHT, max_servers=1).wall == 12.0
    assert simulate(items, EIGHT, max_servers=2).wall == 6.0
    assert simulate(items, EIGHT).wall == 3.0


def test_cpu_host_runs_one_at_a_time_in_the_given_order():
    sim = simulate([Item("a", 4, 1.0), Item("b", 8, 5.0), Item("c", 1, 2.0)], ())
    assert [(s.key, s.start, s.end, s.devices) for s in sim.slots] == [
        ("a", 0.0, 1.0, ()), ("b", 1.0, 6.0, ()), ("c", 6.0, 8.0, ())]
    assert sim.wall == 8.0 and sim.gpu_seconds == 0.0


def test_an_item_needing_more_devices_than_there_are_is_refused_by_name():
    with pytest.raises(ScheduleError, match="cfg/spec_sync: needs 16 devices, only 8"):
        plan_schedule([Item("cfg/reference", 8, 1.0), Item("cfg/spec_sync", 16, 1.0)], EIGHT)
    check_fits([Item("x", 16, 1.0)], ())  # CPU host: no device checks


def test_pick_devices_prefers_an_aligned_block():
    assert pick_devices(("1", "2", "3", "4", "5", "6", "7"), EIGHT, 4) == ("4", "5", "6", "7")
    assert pick_devices(("0", "2", "5", "7"), EIGHT, 2) == ("0", "2")  # no aligned pair free
    assert pick_devices(("0", "1"), EIGHT, 4) is None


def test_lpt_order_keeps_ties_in_order():
    items = [Item("a", 1, 1.0), Item("b", 1, 2.0), Item("c", 1, 1.0)]
    assert [i.key for i in lpt_order(items)] == ["b", "a", "c"]
