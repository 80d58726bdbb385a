"""``evalrun diff`` as Markdown (fit for a pull-request comment), rendered from the typed
:class:`harness.report.diff.DiffResult`."""

from __future__ import annotations

from typing import Sequence

from harness.records.run_record import outcome_word
from harness.report.diff import ComparisonEntry, Difference, DiffResult, GateChanges, TaskEntry
from harness.report.diff_sides import SideHead
from harness.report.summary import fmt

__all__ = ["render_diff_markdown"]


def _f(x: object, d: int = 3) -> str:
    return fmt(x, d)


def _ci(ci: Sequence[float] | None, d: int = 3) -> str:
    return f" [{ci[0]:.{d}f}, {ci[1]:.{d}f}]" if ci else ""


def _signed(x: float | None, d: int = 3) -> str:
    return "-" if x is None else f"{x:+.{d}f}"


def _p(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _esc(s: object) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _table(headers: list[str], rows: Sequence[Sequence[object]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(_esc(c) for c in r) + " |" for r in rows]
    return out


def _fence(text: str) -> list[str]:
    ticks = 3
    while "`" * ticks in text:
        ticks += 1
    return ["`" * ticks + "text", text, "`" * ticks]


def _render_differences(diffs: list[Difference]) -> list[str]:
    """The "read this first" section: what differs besides the build, and which
    comparisons are unpaired because of it."""
    if not diffs:
        return []
    L = ["", "## Read first: A and B differ in more than the build", ""]
    L += _table(["config", "what", "where", "setting", "A", "B"],
                [[x.config, x.kind, x.where, x.field, x.a, x.b] for x in diffs])
    unp = sorted({(x.config, x.where) for x in diffs if x.unpairs})
    if unp:
        L.append("")
        L.append("The prompts differ, so questions cannot be paired where their prompts changed: "
                 + "; ".join(f"{c} {w}" for c, w in unp)
                 + ". Those accuracy changes are unpaired (Newcombe's interval, Fisher's exact test) "
                 "and output changes skip those questions; what can still be compared follows.")
    kinds = {x.kind for x in diffs}
    if kinds & {"config", "engine"}:
        L.append("")
        L.append("The config content or the engine differs: every change below mixes the build's effect "
                 "with these differences.")
    return L


def _render_gates(g: GateChanges, b: SideHead | None = None) -> list[str]:
    """Markdown lines: the gates failing in B and the verdicts that changed; when no gate
    fails but B's outcome is not PASSED, what B's outcome is (a run is FAILED, INCOMPLETE
    or ERROR for more than its gates)."""
    L: list[str] = []
    L += ["", "## Gates failing in B", ""]
    if not g.failing_in_b:
        word = b.outcome.upper() if b is not None else "PASSED"
        L.append("none" if word in ("PASSED", "BASELINE") else
                 f"no gate of B fails, yet B is **{word}** (status {b.status if b else '?'}): what else B "
                 "recorded decides it (a variant or task that could not run, a gate not judged, a strict "
                 "expected failure); see its summary.md")
    for fg in g.failing_in_b:
        x = fg.to_json()
        lim = f" (limit {x['op']} {_f(x['limit'], 4)})" if x.get("limit") is not None else ""
        L.append(f"- **{x['id']}** (A: {x.get('verdict_a') or 'absent'}): observed {_f(x.get('observed'), 4)}{lim}: "
                 f"{x.get('detail')}")
        qs = x.get("questions")
        if qs:
            assert isinstance(qs, list)
            L.append(f"  - questions: {', '.join(map(str, qs[:50]))}" + (f" ... ({len(qs)} in all)" if len(qs) > 50
                                                                          else ""))
    if g.expected_in_b:
        L += ["", "### Expected failures in B (declared known engine bugs; they do not fail B)", ""]
    for fg in g.expected_in_b:
        xf = fg.gate.expected_failure
        L.append(f"- **{fg.gate.verdict}** {fg.gate.id} (A: {fg.verdict_a or 'absent'}): observed "
                 f"{_f(fg.gate.observed, 4)}: {fg.gate.detail}" + (f"; {xf.describe()}" if xf else ""))
    if g.changed:
        L += ["", "### Gate verdicts that changed", ""]
        L += _table(["gate", "A", "B", "observed A", "observed B", "limit B"],
                    [[c.id, c.verdict_a, c.verdict_b, _f(c.observed_a, 4), _f(c.observed_b, 4),
                      _f(c.limit_b, 4)] for c in g.changed])
    return L


def _render_accuracy(tasks: list[TaskEntry], missing: list[TaskEntry]) -> list[str]:
    """Markdown lines: accuracy per task and pipeline, tasks of one side only, failed requests."""
    L: list[str] = []
    L += ["", "## Accuracy", ""]
    rows = []
    for t in tasks:
        for pipe, x in t.accuracy.items():
            rows.append([
                t.config, t.variant, t.task, pipe + (" (gated)" if pipe == t.pipeline else ""),
                f"{_f(x.a)}{_ci(x.a_ci)} ({x.a_correct}/{x.a_scored})",
                f"{_f(x.b)}{_ci(x.b_ci)} ({x.b_correct}/{x.b_scored})",
                f"{_signed(x.change)}{_ci(x.change_ci)}"
                + (f" on {x.n_paired} paired" if x.paired else " (unpaired)"),
                f"{_p(x.p_value)} ({x.test}); B worse: {_p(x.one_sided_p_value_b_worse)}",
                f"-{len(x.lost)} / +{len(x.gained)}",
            ])
    L += _table(["config", "variant", "task", "pipeline", "A [95% CI]", "B [95% CI]", "change [95% CI]",
                 "p (test)", "flipped lost/gained"], rows)
    for t in missing:
        L.append(f"- {t.config}/{t.variant}/{t.task}: only in {'A' if t.in_a else 'B'}")
    for t in [t for t in tasks if t.errors.a or t.errors.b]:
        L.append(f"- {t.config}/{t.variant}/{t.task}: failed requests A "
                 f"{t.errors.a}/{t.num_requests.a}, "
                 f"B {t.errors.b}/{t.num_requests.b} (not scored)")
    return L


def _render_acceptance(tasks: list[TaskEntry]) -> list[str]:
    """Markdown lines: the acceptance figures of both sides, when any task has them."""
    L: list[str] = []
    acc_rows = []
    for t in tasks:
        x = t.acceptance
        if not x:
            continue
        mal, rate, pp = x.mean_acceptance_length, x.acceptance_rate, x.per_position_acceptance
        acc_rows.append([
            t.config, t.variant, t.task,
            _f(mal.a) + _ci(mal.a_ci), _f(mal.b) + _ci(mal.b_ci), _signed(mal.change),
            _f(rate.a) + _ci(rate.a_ci), _f(rate.b) + _ci(rate.b_ci), _signed(rate.change),
            " ".join(_f(v, 3) for v in pp.a or []) or "-", " ".join(_f(v, 3) for v in pp.b or []) or "-",
        ])
    if acc_rows:
        L += ["", "## Speculative decoding", ""]
        L += _table(["config", "variant", "task", "mean accept. len A", "B", "change", "accept. rate A", "B",
                     "change", "per-position A", "per-position B"], acc_rows)
        reasons = {r for t in tasks if t.acceptance for r in (t.acceptance.ci_reason.a, t.acceptance.ci_reason.b)
                   if r}
        for r in sorted(reasons):
            L.append(f"- intervals: {r}")
    return L


def _mismatch_cell(x: ComparisonEntry) -> str:
    nm = x.newly_mismatched
    if nm is None:
        return "-"
    return (", ".join(m.question_id + (f"@{m.first_divergence}" if m.first_divergence is not None else "")
                      for m in nm[:20]) + (" ..." if len(nm) > 20 else "") or "none")


def _render_comparisons(comparisons: list[ComparisonEntry]) -> list[str]:
    """Markdown lines: in-run output match of both sides and the noise each was judged against."""
    L: list[str] = []
    if comparisons:
        L += ["", "## Output match between variants", ""]
        rows = []
        for x in comparisons:
            rows.append([
                x.config, f"{x.baseline} -> {x.candidate}", x.task,
                f"{_f(x.a)} ({x.a_counts[0]}/{x.a_counts[1]})",
                f"{_f(x.b)} ({x.b_counts[0]}/{x.b_counts[1]})",
                _signed(x.change),
                _mismatch_cell(x),
                "-" if x.matching_again is None else (", ".join(x.matching_again[:20]) or "none"),
            ])
        L += _table(["config", "pair", "task", "A", "B", "change", "newly mismatched in B (@first divergent token)",
                     "matching again in B"], rows)
        for x in comparisons:
            for side, nz in (("a", x.noise_a), ("b", x.noise_b)):
                if nz:
                    L.append(f"- {x.config} {x.baseline} -> {x.candidate} {x.task} ({side.upper()}): "
                             "judged against "
                             f"noise {_f(nz.noise_rate)} ({nz.source}); candidate mismatch rate "
                             f"{_f(nz.candidate_rate)}, one-sided p={_p(nz.p_value)}")
    return L


def _render_outputs(tasks: list[TaskEntry]) -> list[str]:
    """Markdown lines: per task the questions whose completion changed between A and B."""
    L: list[str] = []
    L += ["", "## Outputs changed between A and B (same variant)", ""]
    rows = []
    for t in tasks:
        o = t.outputs
        firsts = ", ".join(
            f"{c.question_id}@{c.first_divergence}" + ("c" if c.unit == "character" else "")
            for c in o.changes[:10]) + (" ..." if o.changed > 10 else "")
        rows.append([t.config, t.variant, t.task, o.compared, o.changed, firsts or "-"])
    L += _table(["config", "variant", "task", "compared", "changed", "first divergence (token; c = character)"], rows)
    return L


def _render_flipped(tasks: list[TaskEntry], max_flipped: int) -> list[str]:
    """Markdown lines: the flipped questions with both completions (at most ``max_flipped`` per group)."""
    L: list[str] = []
    flipped = [t for t in tasks if t.flipped]
    if flipped:
        L += ["", "## Flipped questions", ""]
    for t in flipped:
        lost = [f for f in t.flipped if f.direction == "lost"]
        gained = [f for f in t.flipped if f.direction == "gained"]
        L += [f"### {t.config} / {t.variant} / {t.task} ({t.pipeline}): "
              f"{len(lost)} right in A and wrong in B, {len(gained)} wrong in A and right in B", ""]
        for group, name in ((lost, "lost"), (gained, "gained")):
            if not group:
                continue
            L.append(f"{name}: {', '.join(f.question_id for f in group)}")
            L.append("")
            for f in group[:max_flipped]:
                L.append(f"<details><summary>{f.question_id} ({name}): gold {f.gold}, "
                         f"A answered {f.a_answer}, B answered {f.b_answer}</summary>")
                L.append("")
                L.append("A:")
                L += _fence(f.a_completion or "")
                L.append("B:")
                L += _fence(f.b_completion or "")
                L += ["</details>", ""]
            if len(group) > max_flipped:
                L += [f"({len(group) - max_flipped} more {name} questions in the JSON form)", ""]
    return L


def _verdict(side: SideHead) -> str:
    """The side's run outcome word (a baseline was a passed run)."""
    fallback = "incomplete" if side.passed is None else ("passed" if side.passed else "failed")
    return outcome_word(side.outcome or fallback)


def render_diff_markdown(d: DiffResult, max_flipped: int = 20) -> str:
    """The diff as Markdown (fit for a pull-request comment).

    Args:
        d: :func:`harness.report.diff.diff_runs` output.
        max_flipped: flipped questions shown with completions per task and direction
            (the JSON form has all).
    """
    a, b = d.a, d.b
    L = [
        "# evalrun diff",
        "",
        f"- A: `{a.path}` ({a.kind} {a.id}, {_verdict(a)})",
        f"- B: `{b.path}` ({b.kind} {b.id}, {_verdict(b)})",
        "- changes are B - A; accuracy intervals are 95% Wilson, changes 95% paired Wald over the "
        "questions with the same id and prompt on both sides (McNemar p, exact below 25 discordant "
        "pairs; one-sided p for B worse), else Newcombe's hybrid interval with Fisher's exact p",
    ]
    for label, only in (("A", d.configs_only_in_a), ("B", d.configs_only_in_b)):
        if only:
            L.append(f"- configs only in {label}: {', '.join(only)}")
    L += _render_differences(d.differences)
    L += _render_gates(d.gates, b)
    tasks = [t for t in d.tasks if t.in_a and t.in_b]
    missing = [t for t in d.tasks if not (t.in_a and t.in_b)]
    if not tasks:
        L += ["", "No config, variant and task ran on both sides: nothing to compare."]
    L += _render_accuracy(tasks, missing)
    L += _render_acceptance(tasks)
    L += _render_comparisons(d.comparisons)
    L += _render_outputs(tasks)
    L += _render_flipped(tasks, max_flipped)
    return "\n".join(L) + "\n"
