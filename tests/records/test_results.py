"""Record builders of :mod:`harness.records.results`, on the plan of a real config of
this repository (``configs/tiny-qwen3next-mtp-cpu.yaml``)."""

from __future__ import annotations

from pathlib import Path

from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.records.results import COUNTERS_REJECTED, plugin_dir, reject_counters, rel, unstarted_variant
from harness.records.run_record import TaskResult

REPO = Path(__file__).resolve().parents[2]


def test_a_path_inside_the_run_folder_is_relative_and_one_outside_is_kept():
    assert rel(Path("/r/run/logs/a.log"), Path("/r/run")) == "logs/a.log"
    assert rel(Path("/elsewhere/a.log"), Path("/r/run")) == "/elsewhere/a.log"


def test_an_unstarted_variant_keeps_its_planned_command_and_says_why():
    cp = build_plan([load_config(REPO / "configs" / "tiny-qwen3next-mtp-cpu.yaml")]).configs[0]
    vp = next(v for v in cp.variants if v.speculative_config is not None)
    vr = unstarted_variant(vp, "args_rejected", "unrecognized arguments: --x")
    assert vr.argv == list(vp.argv) and vr.env == dict(vp.env)
    assert vr.server.status == "args_rejected" and vr.error == "unrecognized arguments: --x"
    assert vr.tasks == {}


def test_rejected_counters_leave_no_acceptance_figure_for_a_gate():
    trec = TaskResult.model_construct(mean_acceptance_length_ci=[2.0, 2.5], acceptance_rate_ci=[0.5, 0.7],
                                      per_position_acceptance_ci=[[0.8, 0.9]])  # only what it drops
    reject_counters(trec, "accepted tokens 12 > draft tokens 10")
    assert trec.spec_decode is None and trec.spec_decode_error == "accepted tokens 12 > draft tokens 10"
    assert trec.mean_acceptance_length_ci is None and trec.acceptance_rate_ci is None
    assert trec.per_position_acceptance_ci is None and trec.acceptance_ci_reason == COUNTERS_REJECTED


def test_the_plugin_folder_of_a_variant():
    assert plugin_dir(Path("/r/run"), "cfg", "spec_sync") == Path("/r/run/plugin/cfg/spec_sync")
