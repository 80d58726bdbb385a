"""``evalrun diff`` never says "Gates failing in B: none" of a FAILED run: a gate failing in a
config only B ran is listed, and a FAILED run whose gates all pass says what it is."""

from __future__ import annotations

from pathlib import Path

from harness.records.run_record import write_run
from harness.report.diff import diff_runs
from harness.report.diff_render import render_diff_markdown
from tests.record_factory import typed


def _run(folder: Path, run_id: str, configs: dict[str, bool], passed: bool) -> Path:
    rec = typed({"run_id": run_id, "status": "completed", "passed": passed, "exit_code": 0 if passed else 1,
                 "configs": [{"name": c, "variants": {}, "gates": [
                     {"id": f"{c}/v/t/error_rate", "variant": "v", "passed": ok}]} for c, ok in configs.items()]})
    write_run(folder / run_id, rec)
    return folder / run_id


def _failing_section(md: str) -> str:
    return md.split("## Gates failing in B", 1)[1].split("\n## ", 1)[0]


def test_a_gate_failing_in_a_config_only_b_ran_is_listed(tmp_path: Path):
    a = _run(tmp_path, "a", {"x": True}, passed=True)
    b = _run(tmp_path, "b", {"x": True, "y": False}, passed=False)
    sec = _failing_section(render_diff_markdown(diff_runs(a, b)))
    assert "y/v/t/error_rate" in sec and "none" not in sec


def test_a_failed_run_without_a_failing_gate_says_so(tmp_path: Path):
    a = _run(tmp_path, "a", {"x": True}, passed=True)
    b = _run(tmp_path, "b", {"x": True}, passed=False)  # failed for something else than its gates
    sec = _failing_section(render_diff_markdown(diff_runs(a, b)))
    assert "FAILED" in sec and sec.strip() != "none"
    sec_a = _failing_section(render_diff_markdown(diff_runs(b, a)))
    assert sec_a.strip().splitlines()[0] == "none"
