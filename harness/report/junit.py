"""JUnit XML of a run: one test case per gate, for CI systems that read test reports.

Format (the JUnit XML that Jenkins, GitHub Actions test reporters, Buildkite Test
Analytics and GitLab read, Ant's ``junitreport`` dialect)::

    <testsuites name="evalrun <run id>" tests failures errors skipped time>
      <testsuite name="<config>" tests failures errors skipped time timestamp>
        <testcase classname="evalrun.<config>" name="<config>/<variant>/<task>/<gate>">
          <failure message="<gate detail with numbers>" type="<gate kind>">observed, limit, questions</failure>
          | <skipped message="NOT RUN: <reason>"/>
          | <skipped type="pytest.xfail" message="<declared reason>">  (XFAIL)
          | <failure message="[XPASS(strict)] <declared reason>">      (XPASS of a strict declaration)
          | <error message="...">   (a config or variant that could not run at all)

``<variant>`` is ``baseline->candidate`` for comparison gates and ``<task>`` is ``*`` for
gates that are not per task (``variant_effective``). A gate that could not be judged
(NOT RUN) is *skipped*, never passed; a config whose model could not be prepared and a
variant whose server failed are *errors*. A declared expected failure follows pytest's
JUnit writer (``_pytest/junitxml.py``): XFAIL is *skipped* with ``type="pytest.xfail"`` and
the declared reason; a non-strict XPASS is a passed case (its ``system-out`` says XPASS);
a strict XPASS is a *failure* ``[XPASS(strict)] <reason>``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from harness.records.run_record import GateResult, RunRecord, outcome_word
from harness.records.text import clean_text

__all__ = ["testcase_name", "render_junit", "write_junit"]


def testcase_name(g: GateResult) -> str:
    """``<config>/<variant>/<task>/<gate kind>`` of one gate result."""
    variant = f"{g.baseline}->{g.variant}" if g.baseline and "->" in g.id else g.variant
    return f"{g.config}/{variant}/{g.task or '*'}/{g.kind}"


def _num(x: object) -> str:
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
            ET.SubElement(tc, "error", message=(msg.splitlines() or [""])[0][:500], type="could_not_run").text = msg
            counts["tests"] += 1
            counts["errors"] += 1
        for g in c.gates:
            tc = ET.SubElement(suite, "testcase", classname=cls, name=testcase_name(g), time="0")
            counts["tests"] += 1
            body = f"gate {g.id}: observed {_num(g.observed)}, limit {g.op} {_num(g.limit)}\n{g.detail}"
            if g.questions:
                body += "\nquestions: " + ", ".join(g.questions)
            xf = g.expected_failure
            if xf is not None:
                body += f"\n{g.verdict}: {xf.describe()}"
            if g.verdict == "XFAIL" and xf is not None:  # as pytest's junitxml writes an xfail
                ET.SubElement(tc, "skipped", type="pytest.xfail", message=xf.reason).text = body
                counts["skipped"] += 1
            elif g.verdict == "XPASS" and xf is not None and xf.strict:  # pytest: a failure
                ET.SubElement(tc, "failure", message=f"[XPASS(strict)] {xf.reason}", type=g.kind).text = body
                counts["failures"] += 1
            elif g.passed is False:
                ET.SubElement(tc, "failure", message=g.detail[:2000], type=g.kind).text = body
                counts["failures"] += 1
            elif g.passed is None:
                ET.SubElement(tc, "skipped", message=f"NOT RUN: {g.detail}")
                counts["skipped"] += 1
            else:
                ET.SubElement(tc, "system-out").text = body
        for k, n in counts.items():
            suite.set(k, str(n))
            totals[k] += n
        suite.set("time", f"{seconds:.2f}")
    _outcome_case(root, record, totals)
    for k, n in totals.items():
        root.set(k, str(n))
    ET.indent(root)
    # one sanitiser for every text (completions, log tails with colour codes, errors):
    # what XML 1.0 forbids cannot survive into the file (harness.records.text)
    return clean_text('<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n")


#: Run outcomes that no gate shows: the JUnit file then has an error case saying so.
_ABNORMAL = ("error", "interrupted", "running")


def _outcome_case(root: ET.Element, record: RunRecord, totals: dict[str, int]) -> None:
    """Every suite carries the run's outcome word as property ``evalrun.outcome`` (and, for
    a run resumed with ``--resume``, ``evalrun.resumed``: what it reused); a run
    that ended ``error``, ``interrupted`` or still ``running`` (a killed job) also gets
    a suite ``evalrun`` with one error case ``<run id>/outcome``, so CI never shows such
    a run as green."""
    word = outcome_word(record.outcome)
    budgets = {c.name: c.false_alarm_budget for c in record.configs}
    for suite in root:
        props = ET.Element("properties")
        ET.SubElement(props, "property", name="evalrun.outcome", value=word)
        budget = budgets.get(suite.get("name") or "")
        if budget is not None:  # the config's false-alarm budget (docs/gates.md)
            ET.SubElement(props, "property", name="evalrun.false_alarm_budget", value=f"{budget:g}")
        if record.resumed is not None:
            ET.SubElement(props, "property", name="evalrun.resumed", value=record.resumed.describe())
        suite.insert(0, props)
    if record.outcome not in _ABNORMAL:
        return
    why = {"error": "an unexpected error stopped the run",
           "interrupted": f"the run was interrupted by {record.interrupted_by or 'a signal'}",
           "running": "the run did not finish (killed before it could write its verdict)"}[record.outcome]
    suite = ET.SubElement(root, "testsuite", name="evalrun", tests="1", failures="0", errors="1", skipped="0",
                          time="0", timestamp=(record.provenance.started_at or "")[:19])
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="evalrun.outcome", value=word)
    tc = ET.SubElement(suite, "testcase", classname="evalrun", name=f"{record.run_id}/outcome", time="0")
    ET.SubElement(tc, "error", message=f"{word}: {why}", type=record.outcome).text = (
        f"{word}: {why}; exit code {record.exit_code}")
    totals["tests"] += 1
    totals["errors"] += 1


def write_junit(record: RunRecord, path: Path) -> Path:
    """Write :func:`render_junit` to ``path`` (parents created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    from harness.records.atomic import write_atomic  # noqa: PLC0415 - looked up per call (tests replace it)

    write_atomic(path, render_junit(record))
    return path
