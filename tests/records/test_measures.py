"""harness.records.measures: the measured types analysis and engine return are the record's own.

Expected values are written out by hand from the inputs.
"""

from __future__ import annotations

import importlib
import json
import pkgutil

import pytest
from pydantic import ValidationError

import harness.analysis
import harness.engine
from harness.analysis import scoring, stats
from harness.engine import metrics
from harness.records import engine_measures, measures, run_record
from harness.records.measures import DivergenceReportRecord, PairedRecord, SpecDecodeCountersRecord


def test_analysis_and_engine_return_the_record_types():
    """One name per measured noun: every record type the analysis and engine stages hold is
    the records' class under its own name (no second name, no twin class)."""
    record_types = {obj for src in (measures, engine_measures) for obj in vars(src).values()
                    if isinstance(obj, type) and obj.__module__ == src.__name__}
    seen = 0
    for pkg in (harness.analysis, harness.engine):
        for info_ in pkgutil.iter_modules(pkg.__path__):
            mod = importlib.import_module(f"{pkg.__name__}.{info_.name}")
            for name, obj in vars(mod).items():
                if isinstance(obj, type) and obj in record_types:
                    seen += 1
                    assert name == obj.__name__, f"{mod.__name__}.{name} is a second name of {obj.__name__}"
    assert seen >= 10  # the stages do use the record types
    assert not hasattr(scoring, "OutputMatch") and not hasattr(metrics, "SpecDecodeCounters")
    assert run_record.OutputMatchRecord is measures.OutputMatchRecord
    pc = stats.paired_comparison({"q1": True, "q2": True}, {"q1": True, "q2": False})
    assert isinstance(pc, PairedRecord) and pc.a_only == ("q2",) and pc.diff == -0.5


def test_positional_fields_follow_declaration_order_and_refuse_doubles():
    c = SpecDecodeCountersRecord(10, 20, 5, (3, 2))
    assert (c.drafts, c.draft_tokens, c.accepted_tokens, c.accepted_per_pos) == (10.0, 20.0, 5.0, (3.0, 2.0))
    with pytest.raises(TypeError, match="given twice"):
        SpecDecodeCountersRecord(10, drafts=3, draft_tokens=1, accepted_tokens=0)
    with pytest.raises(TypeError, match="at most 4"):
        SpecDecodeCountersRecord(1, 2, 3, (), 5)


def test_counter_equality_ignores_the_per_engine_parts():
    parts = {"0": SpecDecodeCountersRecord(4, 8, 2, (2,)), "1": SpecDecodeCountersRecord(6, 12, 3, (3,))}
    total = SpecDecodeCountersRecord.summed(parts)
    assert total == SpecDecodeCountersRecord(10, 20, 5, (5,))
    assert set(total.per_engine) == {"0", "1"} and "per_engine" not in total.model_dump()


def _div(qid, verdict):
    return {"question_id": qid, "position": 1, "verdict": verdict, "source": "reference", "reason": "r"}


def test_divergence_report_stores_counts_and_checks_them_on_reading():
    doc = {"reference": "ref", "near_tie_nats": 0.5, "compared": 4, "unexplained": 2, "explained": 1, "noise": 0,
           "rerun_available": False, "divergences": [_div("a", "unexplained"), _div("b", "unexplained"),
                                                     _div("c", "explained")]}
    r = DivergenceReportRecord.model_validate(doc)
    assert [d.question_id for d in r.unexplained] == ["a", "b"] and [d.question_id for d in r.explained] == ["c"]
    out = json.loads(r.model_dump_json())
    assert list(out) == ["reference", "near_tie_nats", "compared", "unexplained", "explained", "noise",
                         "rerun_available", "divergences"]
    assert (out["unexplained"], out["explained"], out["noise"]) == (2, 1, 0)
    with pytest.raises(ValidationError, match="unexplained: 1 stored, but 2"):
        DivergenceReportRecord.model_validate({**doc, "unexplained": 1})
