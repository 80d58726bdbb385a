"""JUnit XML of a run, read back with junitparser (a JUnit-reading library, not evalrun code)."""

from __future__ import annotations

import pytest

from harness.report.junit import write_junit

from ..record_factory import typed

junitparser = pytest.importorskip("junitparser")


def gate(gid, kind, variant, task, passed, detail, baseline=None, questions=()):
    return {"id": gid, "kind": kind, "config": "cfg", "variant": variant, "task": task, "baseline": baseline,
            "op": ">=", "observed": 0.5, "limit": 0.8, "passed": passed, "detail": detail,
            "questions": list(questions), "verdict": {True: "PASS", False: "FAIL", None: "NOT RUN"}[passed]}


RECORD = typed({
    "run_id": "r1", "status": "completed", "passed": False, "exit_code": 1,
    "provenance": {"started_at": "2026-11-30T19:00:00+00:00"},
    "configs": [
        {"name": "cfg", "error": None,
         "variants": {"reference": {"error": None, "tasks": {"t": {"seconds": 2.5}}},
                      "spec": {"error": "cfg/spec: server failed to start", "tasks": {}}},
         "gates": [
             gate("cfg/reference/variant_effective", "variant_effective", "reference", None, True, "ok"),
             gate("cfg/reference/t/accuracy_floor", "accuracy_floor", "reference", "t", False,
                  "flexible-numeric accuracy 0.5000 (5/10) vs floor 0.8000", questions=["t/test/1", "t/test/2"]),
             gate("cfg/reference->spec/t/min_output_match", "min_output_match", "spec", "t", None,
                  "not run: server failed", baseline="reference"),
         ]},
        {"name": "other", "error": "model org/x: cannot be prepared", "variants": {}, "gates": []},
    ],
})


def test_junit_cases_verdicts_and_counts(tmp_path):
    path = write_junit(RECORD, tmp_path / "junit.xml")
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = {s.name: s for s in xml}
    assert set(suites) == {"cfg", "other"}
    cases = {c.name: c for c in suites["cfg"]}
    assert set(cases) == {"cfg/reference/*/variant_effective", "cfg/reference/t/accuracy_floor",
                          "cfg/reference->spec/t/min_output_match", "cfg/spec/*/server"}
    assert cases["cfg/reference/*/variant_effective"].is_passed
    fail = cases["cfg/reference/t/accuracy_floor"]
    assert isinstance(fail.result[0], junitparser.Failure)
    assert fail.result[0].message == "flexible-numeric accuracy 0.5000 (5/10) vs floor 0.8000"
    assert "t/test/1, t/test/2" in fail.result[0].text
    skip = cases["cfg/reference->spec/t/min_output_match"]
    assert skip.is_skipped and "not run: server failed" in skip.result[0].message
    assert isinstance(cases["cfg/spec/*/server"].result[0], junitparser.Error)
    s = suites["cfg"]
    assert (s.tests, s.failures, s.skipped, s.errors) == (4, 1, 1, 1)
    assert s.time == pytest.approx(2.5)
    other = list(suites["other"])
    assert [c.name for c in other] == ["other/*/*/run"] and isinstance(other[0].result[0], junitparser.Error)
    xml.update_statistics()                         # junitparser recounts from the cases: must agree
    assert (xml.tests, xml.failures, xml.skipped, xml.errors) == (5, 1, 1, 2)
