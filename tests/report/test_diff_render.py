"""harness.report.diff_render on diff results built by hand: the differences section
first (cells escaped, the unpaired places named), gates failing in B with their numbers,
long question lists cut at 50, verdicts that changed. Expected lines written by hand."""

from __future__ import annotations

from harness.records.run_record import GateResult
from harness.report.diff import Difference, DiffResult, FailingGate, GateChange, GateChanges
from harness.report.diff_render import render_diff_markdown
from harness.report.diff_sides import SideHead

A = SideHead(path="results/a", kind="run", id="a", passed=True, status="completed", outcome="passed")
B = SideHead(path="results/b", kind="run", id="b", passed=False, status="completed", outcome="failed")


def _lines(d: DiffResult) -> list[str]:
    return render_diff_markdown(d).splitlines()


def test_differences_come_first_escaped_and_name_the_unpaired_places():
    d = DiffResult(a=A, b=B, differences=[
        Difference("c", "prompts", "task gsm8k", "stop strings", ["a|b"], ["a"]),
        Difference("c", "prompts", "task gsm8k", "num_fewshot", 5, 8, unpairs=True),
        Difference("c", "engine", "variant spec", "vllm_version", "0.32.0", "0.33.0"),
    ])
    lines = _lines(d)
    head = lines.index("## Read first: A and B differ in more than the build")
    assert head < lines.index("## Gates failing in B")
    assert lines[head + 2] == "| config | what | where | setting | A | B |"
    assert lines[head + 4] == "| c | prompts | task gsm8k | stop strings | ['a\\|b'] | ['a'] |"
    assert lines[head + 5] == "| c | prompts | task gsm8k | num_fewshot | 5 | 8 |"
    text = "\n".join(lines)
    assert "cannot be paired where their prompts changed: c task gsm8k. Those accuracy changes" in text
    assert "The config content or the engine differs" in text


def test_no_differences_no_section():
    lines = _lines(DiffResult(a=A, b=A))
    assert not any(x.startswith("## Read first") for x in lines)
    assert lines[lines.index("## Gates failing in B") + 2] == "none"
    assert "No config, variant and task ran on both sides: nothing to compare." in lines


def test_failing_gates_show_numbers_and_at_most_50_questions():
    qs = tuple(f"q{i}" for i in range(60))
    g = GateResult(id="c/spec/gsm8k/accuracy_floor", kind="accuracy_floor", config="c", variant="spec",
                   task="gsm8k", op=">=", observed=0.81234, limit=0.85, passed=False,
                   detail="flexible-numeric 0.812 < 0.85", questions=qs)
    ch = GateChange(id="c/spec/gsm8k/accuracy_floor", verdict_a="PASS", verdict_b="FAIL",
                    observed_a=0.9, observed_b=0.81234, limit_b=0.85, detail_b="")
    d = DiffResult(a=A, b=B, gates=GateChanges(failing_in_b=[FailingGate(g, "PASS")], changed=[ch]))
    lines = _lines(d)
    i = lines.index("## Gates failing in B")
    assert lines[i + 2] == ("- **c/spec/gsm8k/accuracy_floor** (A: PASS): observed 0.8123 (limit >= 0.8500): "
                            "flexible-numeric 0.812 < 0.85")
    assert lines[i + 3] == "  - questions: " + ", ".join(f"q{k}" for k in range(50)) + " ... (60 in all)"
    j = lines.index("### Gate verdicts that changed")
    assert lines[j + 4] == "| c/spec/gsm8k/accuracy_floor | PASS | FAIL | 0.9000 | 0.8123 | 0.8500 |"
    assert lines[2:4] == ["- A: `results/a` (run a, PASSED)", "- B: `results/b` (run b, FAILED)"]
