"""summary.md and the terminal tables on a constructed run folder (values written by hand); counts print as integers."""

from __future__ import annotations

import io

from rich.console import Console

from harness.analysis.gates import evaluate_gates
from harness.analysis.measurements import Measurements
from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.records.measures import SpecDecodeCountersRecord, SpecDecodeRecord
from harness.records.run_record import write_run
from harness.records.samples import Sample, write_jsonl
from harness.report.summary import render_markdown, render_terminal

from ..record_factory import typed

CFG = "tiny-qwen3next-mtp-cpu-with-a-long-name"
P = "flexible-numeric"


def gate(gid, kind, variant, task, passed, detail, baseline=None, questions=(), observed=0.5, limit=0.05):
    return {"id": gid, "kind": kind, "config": CFG, "variant": variant, "task": task, "baseline": baseline,
            "op": "<=", "observed": observed, "limit": limit, "passed": passed, "detail": detail,
            "questions": list(questions), "verdict": {True: "PASS", False: "FAIL", None: "NOT RUN"}[passed]}


def make_run(tmp_path):
    """reference right on q0..q3, spec_state_rollback right on q0 only: q1..q3 lost."""
    run = tmp_path / "run"
    samples = {}
    for v, right in (("reference", [1, 1, 1, 1]), ("spec_state_rollback", [1, 0, 0, 0])):
        xs = [Sample(CFG, v, "arith", f"arith/test/{i}", f"h{i}", str(i),
                     completion=f"{v} answer {i if r else 9} #### {i if r else 9}", token_ids=(i, r),
                     finish_reason="stop", answers={P: str(i if r else 9)}, correct={P: bool(r)})
              for i, r in enumerate(right)]
        rel = f"samples/{CFG}/{v}/arith.jsonl"
        write_jsonl(run / rel, xs)
        samples[v] = rel
    task = lambda v, acc: {"status": "ran", "samples": samples[v], "num_requests": 4, "error_count": 0,  # noqa: E731
                           "accuracy": {P: acc}, "accuracy_ci": {P: [0.2, 1.0]}, "seconds": 1.0,
                           "spec_decode": None if v == "reference" else
                           {"acceptance_rate": 0.29, "mean_acceptance_length": 1.584,
                            "per_position_acceptance": [0.4, 0.18]}}
    rec = typed({
        "run_id": "r", "status": "completed", "passed": False, "exit_code": 1,
        "provenance": {"evalrun_version": "0.1.0", "command_line": ["evalrun"], "started_at": "t0", "ended_at": "t1"},
        "configs": [{
            "name": CFG, "pipeline": P,
            "variants": {"reference": {"engine": {"async_scheduling": False},
                                       "tasks": {"arith": task("reference", 1.0)}},
                         "spec_state_rollback": {"engine": {"async_scheduling": False},
                                                 "tasks": {"arith": task("spec_state_rollback", 0.25)}}},
            "comparisons": [{"baseline": "reference", "candidate": "spec_state_rollback", "task": "arith",
                             "pipeline": P,
                             "compared": 4, "matched": 1, "output_match_rate": 0.25, "mismatches": [],
                             "paired": {"n": 4, "accuracy_a": 1.0, "accuracy_b": 0.25,
                                        "a_only": ["arith/test/1", "arith/test/2", "arith/test/3"], "b_only": [],
                                        "diff": -0.75, "diff_ci": [-1.0, -0.3], "p_value": 0.25}}],
            "gates": [
                gate(f"{CFG}/reference/arith/max_error_rate", "max_error_rate", "reference", "arith", True,
                     "0 of 4 requests failed"),
                gate(f"{CFG}/reference->spec_state_rollback/arith/max_accuracy_drop", "max_accuracy_drop",
                     "spec_state_rollback", "arith", False,
                     "reference 1.0000 -> spec_state_rollback 0.2500 on 4 paired questions",
                     baseline="reference", questions=["arith/test/1", "arith/test/2", "arith/test/3"], observed=0.75),
                gate(f"{CFG}/spec_state_rollback/arith/min_acceptance_length", "min_acceptance_length",
                     "spec_state_rollback", "arith", None, "not run: speculative metrics missing"),
            ]}],
    })
    write_run(run, rec)
    return rec


def test_markdown_failing_first_flipped_side_by_side_passing_folded(tmp_path):
    rec = make_run(tmp_path)
    md = render_markdown(rec)
    assert md.index("## Failed gates (1)") < md.index("## Not run (1)") < md.index("## Scores") < md.index("<details>")
    fail_block = md[md.index("## Failed gates"):md.index("## Not run")]
    assert "observed 0.7500, limit <= 0.0500" in fail_block
    # the three lost questions, each with both completions in one table row
    for i in (1, 2, 3):
        row = next(x for x in fail_block.splitlines() if x.startswith(f"| arith/test/{i} |"))
        assert (
            f"reference answer {i} #### {i}" in row
            and "spec_state_rollback answer 9 #### 9" in row
            and "| lost |" in row
        )
    details = md[md.index("<details>") : md.index("</details>")]
    assert "1 passing gate(s)" in details and "reference/arith/max_error_rate" in details
    assert "max_accuracy_drop" not in details
    assert "not run: speculative metrics missing" in md[md.index("## Not run") : md.index("## Scores")]


def test_terminal_fits_100_columns_and_never_cuts(tmp_path):
    rec = make_run(tmp_path)
    buf = io.StringIO()
    render_terminal(rec, Console(file=buf, width=100, force_terminal=False, color_system=None))
    out = buf.getvalue()
    assert "…" not in out
    table_lines = [
        x
        for x in out.splitlines()
        if x and not x.startswith(("FAIL", "NOT RUN", "    ", "acceptance", "flipped", "1 of", "gates"))
    ]
    assert max(len(x) for x in table_lines) <= 100
    assert "spec_state_rollback" in out and CFG in out


def test_non_terminal_log_lines_are_not_wrapped(tmp_path):
    """Without a terminal (CI) long text lines stay one line, and tables are not 200 wide."""
    rec = make_run(tmp_path)
    g = rec.configs[0].gates[1]
    rec.configs[0].gates[1] = g.model_copy(update={"detail": g.detail + " " + "x" * 150})
    buf = io.StringIO()
    render_terminal(rec, Console(file=buf, width=160, force_terminal=False, color_system=None))
    lines = buf.getvalue().splitlines()
    detail = [x for x in lines if "x" * 150 in x]
    assert len(detail) == 1 and detail[0].endswith("x" * 150)
    assert max(len(x) for x in lines if "─" in x) <= 100


def test_counts_print_as_integers(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("model: m\nvariants:\n  spec: {speculative_config: {method: mtp, num_speculative_tokens: 2}}\n"
                 "tasks:\n  t: {kind: synthetic}\n")
    cp = build_plan([load_config(p)]).configs[0]
    m = Measurements()
    m.task_record("spec", "t").spec = SpecDecodeRecord.from_counters(
        SpecDecodeCountersRecord(935.0, 1870.0, 900.0, (500.0, 400.0)))
    res = [g for g in evaluate_gates(cp.gates, m) if g.kind == "drafts_observed"][0]
    assert res.observed == 935 and isinstance(res.observed, int)
    rec = typed({"run_id": "r", "passed": True, "exit_code": 0, "status": "completed",
                 "configs": [{"name": "c", "variants": {}, "comparisons": [], "gates": [res.model_dump(mode="json")]}]})
    assert rec.configs[0].gates[0].observed == 935 and isinstance(rec.configs[0].gates[0].observed, int)
    md = render_markdown(rec)
    assert "| 935 |" in md and "935.0000" not in md

