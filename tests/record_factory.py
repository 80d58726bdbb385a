"""Complete run records from the few fields a test is about.

Tests that construct records by hand (diff, calibrate, selfcheck) state only the fields
under test; this fills every other required field of the typed record
(:class:`harness.records.run_record.RunRecord`) with neutral values, so the constructed
record validates like one the runner wrote.
"""

from __future__ import annotations

import copy
from typing import Any

from harness.records.run_record import RunRecord

PROVENANCE = {
    "evalrun_version": "0+test", "vllm_version": None, "python": "3.11", "platform": "test",
    "machine": "x86_64", "hostname": "test", "command_line": ["evalrun"], "git_revision": None,
    "configs": [], "datasets": {}, "started_at": "2026-11-30T00:00:00+00:00", "ended_at": None,
}


def complete_record(rec: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``rec`` with every required field present (see the module docstring)."""
    r = copy.deepcopy(rec)
    r["schema_version"] = 2
    r.setdefault("run_id", "test")
    r["provenance"] = {**PROVENANCE, **(r.get("provenance") or {})}
    for c in r.setdefault("configs", []):
        c.setdefault("name", "c")
        c.setdefault("path", f"{c['name']}.yaml")
        c.setdefault("sha256", "0" * 64)
        c.setdefault("form", "native")
        c.setdefault("model", "m")
        c.setdefault("pipeline", "flexible-numeric")
        for g in c.setdefault("gates", []):
            g.setdefault("config", c["name"])
            g.setdefault("kind", g["id"].rsplit("/", 1)[-1])
            g.setdefault("op", "==")
            g.setdefault("detail", "")
            if "passed" not in g and "verdict" in g:
                g["passed"] = {"PASS": True, "FAIL": False}.get(g["verdict"])
        for v in c.setdefault("variants", {}).values():
            v.setdefault("argv", [])
            v.setdefault("log", "logs/test.log")
            for t in v.setdefault("tasks", {}).values():
                t.setdefault("samples", "samples/test.jsonl")
                t.setdefault("seconds", 0.0)
                t.setdefault("error_count", 0)
                # as many requests as the scored ones and the errors (a record's counts fit its total)
                t.setdefault("num_requests", max((t.get("scored") or {}).values(), default=0) + t["error_count"])
                t.setdefault("error_rate", 0.0)
                for k in ("accuracy", "accuracy_ci", "correct", "scored", "invalid_rate"):
                    t.setdefault(k, {})
                sd = t.get("spec_decode")
                if sd is not None:
                    sd.setdefault("drafts", 0.0)
                    sd.setdefault("draft_tokens", 0.0)
                    sd.setdefault("accepted_tokens", 0.0)
        for comp in c.setdefault("comparisons", []):
            comp.setdefault("pipeline", c["pipeline"])
            comp.setdefault("compared", 0)
            comp.setdefault("matched", 0)
            pc = comp.get("paired")
            if pc:
                pc.setdefault("diff", pc["accuracy_b"] - pc["accuracy_a"])
                for k, v in (("diff_ci", [0.0, 0.0]), ("both_correct", 0), ("both_wrong", 0), ("p_value", 1.0),
                             ("test", "test"), ("one_sided_p_value", 1.0), ("confidence", 0.95)):
                    pc.setdefault(k, v)
    return r


def typed(rec: dict[str, Any]):
    """:func:`complete_record` validated into a :class:`RunRecord`."""
    return RunRecord.model_validate(complete_record(rec))
