"""JUnit XML of a run: one test case per gate, for CI systems that read test reports.

Format (the JUnit XML that Jenkins, GitHub Actions test reporters, Buildkite Test
Analytics and GitLab read, Ant's ``junitreport`` dialect)::

    <testsuites name="evalrun <run id>" tests failures errors skipped time>
      <testsuite name="<config>" tests failures errors skipped time timestamp>
        <testcase classname="evalrun.<config>" name="<config>/<variant>/<task>/<gate>">
          <failure message="<gate detail with numbers>" type="<gate kind>">observed, limit, questions</failure>
          | <skipped message="NOT RUN: <reason>"/>
          | <error message="...">   (a config or variant that could not run at all)

``<variant>`` is ``baseline->candidate`` for comparison gates and ``<task>`` is ``*`` for
gates that are not per task (``variant_effective``). A gate that could not be judged
(NOT RUN) is *skipped*, never passed; a config whose model could not be prepared and a
variant whose server failed are *errors*.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from harness.records.run_record import GateResult, RunRecord

__all__ = ["testcase_name", "render_junit", "write_junit"]


def testcase_name(g: GateResult) -> str:
    """``<config>/<variant>/<task>/<gate kind>`` of one gate result."""
    variant = f"{g.baseline}->{g.variant}" if g.baseline and "->" in g.id else g.variant
    return f"{g.config}/{variant}/{g.task or '*'}/{g.kind}"


def _num(x: Any) -> str:
    return "-" if x is None else (f"{x:.6g}" if isinstance(x, float) else str(x))


def render_junit(record: RunRecord) -> str:
    """The run record's gates as a JUnit XML document (UTF-8 text with declaration).

    Args:
        record: the run record (its configs' gates, config errors and variant errors).

    Returns:
        The XML text. Counts: ``tests`` = test cases, ``failures`` = gates that failed,
        ``skipped`` = gates not run, ``errors`` = configs / variants that could not run.
    """
    root = ET.Element("testsuites", name=f"evalrun {record.run_id}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    started = record.provenance.started_at or ""
    for c in record.configs:
        suite = ET.SubElement(root, "testsuite", name=c.name, timestamp=started[:19])
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        seconds = sum(t.seconds or 0 for v in c.variants.values() for t in v.tasks.values())
        cls = f"evalrun.{c.name}"
        problems = []
        if c.error:
            problems.append((f"{c.name}/*/*/run", c.error))
        for vname, v in c.variants.items():
            if v.error:
                problems.append((f"{c.name}/{vname}/*/server", v.error))
        for name, msg in problems:
            tc = ET.SubElement(suite, "testcase", classname=cls, name=name, time="0")
            ET.SubElement(tc, "error", message=msg.splitlines()[0][:500], type="could_not_run").text = msg
            counts["tests"] += 1
            counts["errors"] += 1
        for g in c.gates:
            tc = ET.SubElement(suite, "testcase", classname=cls, name=testcase_name(g), time="0")
            counts["tests"] += 1
            body = f"gate {g.id}: observed {_num(g.observed)}, limit {g.op} {_num(g.limit)}\n{g.detail}"
            if g.questions:
                body += "\nquestions: " + ", ".join(g.questions)
            if g.passed is False:
                ET.SubElement(tc, "failure", message=g.detail, type=g.kind).text = body
                counts["failures"] += 1
            elif g.passed is None:
                ET.SubElement(tc, "skipped", message=f"NOT RUN: {g.detail}")
                counts["skipped"] += 1
            else:
                ET.SubElement(tc, "system-out").text = body
        for k, v in counts.items():
            suite.set(k, str(v))
            totals[k] += v
        suite.set("time", f"{seconds:.2f}")
    for k, v in totals.items():
        root.set(k, str(v))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(record: RunRecord, path: Path) -> Path:
    """Write :func:`render_junit` to ``path`` (parents created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    from harness.records.atomic import write_atomic

    write_atomic(path, render_junit(record))
    return path
