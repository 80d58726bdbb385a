"""One verdict, one name: every report prints the run's outcome with
the same word; plus the form of a default run id."""

from __future__ import annotations

import re

import pytest

from harness.records.provenance import new_run_id
from harness.report.diff import DiffResult
from harness.report.diff_render import render_diff_markdown
from harness.report.diff_sides import SideHead
from harness.report.html import render_html
from harness.report.junit import render_junit
from harness.report.summary import render_markdown

from ..record_factory import typed

CASES = [  # (status, passed, exit code) -> word, by the exit-code table in the README
    (("completed", True, 0), "PASSED"),
    (("completed", False, 1), "FAILED"),
    (("incomplete", False, 1), "FAILED"),
    (("completed", None, 0), "INCOMPLETE"),     # an optional task could not run
    (("incomplete", None, 2), "INCOMPLETE"),
    (("interrupted", None, 2), "INTERRUPTED"),
    (("error", None, 2), "ERROR"),
    (("running", None, None), "RUNNING"),
]


def record(status, passed, code):
    rec = typed({"run_id": "r", "passed": passed, "exit_code": code, "configs": [{"name": "c", "gates": []}]})
    object.__setattr__(rec, "status", status)   # set past validation
    return rec


@pytest.mark.parametrize("fields, word", CASES)
def test_the_same_word_everywhere(fields, word):
    rec = record(*fields)
    assert rec.outcome == word.lower()
    assert render_markdown(rec).startswith(f"# evalrun run r: {word}\n")
    assert f"<title>evalrun r: {word}</title>" in render_html(rec)
    assert f'<property name="evalrun.outcome" value="{word}" />' in render_junit(rec)
    side = SideHead(path="p", kind="run", id="r", passed=rec.passed, status=rec.status, outcome=rec.outcome)
    md = render_diff_markdown(DiffResult(a=side, b=side))
    assert f"(run r, {word})" in md


def test_abnormal_ends_are_an_error_case_in_junit():
    for status in ("interrupted", "error", "running"):
        xml = render_junit(record(status, None, 2))
        assert 'name="r/outcome"' in xml and f'type="{status}"' in xml
    assert 'name="r/outcome"' not in render_junit(record("completed", True, 0))


def test_default_run_ids_sort_by_time_and_carry_a_random_part():
    ids = {new_run_id() for _ in range(200)}
    assert len(ids) == 200                                   # same second, same pid: still distinct
    assert all(re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{8}", i) for i in ids)
