"""Reports of a run record: a terminal table (rich) and a Markdown summary.

Both read only the typed run record (:class:`~harness.records.run_record.RunRecord`) written by :mod:`harness.records.run_record`, so a report can
be regenerated from disk.
"""

from __future__ import annotations

from typing import Any

import shlex

from rich.console import Console
from rich.table import Table

from harness.records.run_record import ComparisonResult, GateResult, RunRecord


def fmt(x: Any, digits: int = 3) -> str:
    """A value for a table: ``-`` for None, floats with ``digits`` decimals."""
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _limit(g: GateResult) -> str:
    """``op limit`` of a gate result, counts as integers; empty for yes/no gates."""
    if g.limit is None:
        return ""
    lim = int(g.limit) if float(g.limit).is_integer() and g.kind in ("drafts_observed",) else g.limit
    return f"{g.op} {fmt(lim, 4)}"


def _ci(ci: Any) -> str:
    if not ci:
        return ""
    return f" [{ci[0]:.3f}, {ci[1]:.3f}]"


def score_rows(record: RunRecord) -> list[dict[str, str]]:
    """One row per config x variant x task: accuracy per pipeline (with 95% Wilson
    interval), errors, acceptance rate, mean acceptance length, per-position acceptance."""
    rows = []
    for c in record.configs:
        for vname, v in c.variants.items():
            if v.error and not v.tasks:
                st = v.server.status
                rows.append({"config": c.name, "variant": vname, "task": "-",
                             "status": "NOT RUN" + (f" (server {st})" if st else "") + ": " + v.error.splitlines()[0][:100]})
                continue
            for tname, t in v.tasks.items():
                sd = t.spec_decode
                rows.append(
                    {
                        "status": "ran",
                        "config": c.name,
                        "variant": vname,
                        "task": tname,
                        "async": fmt(v.engine.async_scheduling if v.engine else None),
                        "strict-match": fmt(t.accuracy.get("strict-match")) + _ci(t.accuracy_ci.get("strict-match")),
                        "flexible-extract": fmt(t.accuracy.get("flexible-extract")) + _ci(t.accuracy_ci.get("flexible-extract")),
                        "n": str(t.num_requests),
                        "errors": str(t.error_count),
                        "truncated": "-" if t.truncated_rate is None else f"{t.truncated_rate:.3f} ({t.truncated})",
                        "acceptance_rate": (fmt(sd.acceptance_rate) if sd else "-") + _ci(t.acceptance_rate_ci),
                        "mean_acceptance_length": (fmt(sd.mean_acceptance_length) if sd else "-") + _ci(t.mean_acceptance_length_ci),
                        "per_position": " ".join(fmt(x, 2) for x in (sd.per_position_acceptance if sd else [])) or "-",
                        "spec_error": t.spec_decode_error or "",
                    }
                )
    return rows


COLUMNS = [
    ("config", "config"), ("variant", "variant"), ("task", "task"), ("async", "async sched."),
    ("strict-match", "strict-match [95% CI]"), ("flexible-extract", "flexible-extract [95% CI]"),
    ("n", "n"), ("errors", "errors"), ("truncated", "truncated (max_tokens)"), ("acceptance_rate", "accept. rate"),
    ("mean_acceptance_length", "mean accept. len"), ("per_position", "per-position"),
]


def acceptance_ci_notes(record: RunRecord) -> list[str]:
    """Why acceptance intervals are missing or how they were computed, one line per
    distinct reason/method (speculative variants only)."""
    notes: dict[str, list[str]] = {}
    for c in record.configs:
        for vname, v in c.variants.items():
            for tname, t in v.tasks.items():
                if not t.spec_decode:
                    continue
                why = t.acceptance_ci_reason or t.acceptance_ci_method
                if why:
                    notes.setdefault(why, []).append(f"{c.name}/{vname}/{tname}")
    return [f"acceptance intervals ({', '.join(ids)}): {why}" for why, ids in notes.items()]


def _noise_text(comp: ComparisonResult) -> str:
    nz = comp.noise
    if not nz:
        return ""
    if nz.source == "rerun":
        src = f"noise {comp.baseline} rerun {fmt(nz.noise_rate)} ({nz.noise_mismatched}/{nz.noise_compared} differ)"
    else:
        src = f"stored noise {fmt(nz.noise_rate)}"
    return f"; {src}, one-sided p={fmt(nz.p_value, 4)}"


def comparison_rows(record: RunRecord) -> list[dict[str, Any]]:
    """One row per comparison and task: output match (with the noise it is judged
    against, when any), paired accuracy difference, p-value, flipped question ids."""
    rows = []
    for c in record.configs:
        for comp in c.comparisons:
            p = comp.paired
            cut = set(comp.truncated.baseline) | set(comp.truncated.candidate) if comp.truncated else set()

            def mark(ids: list[str]) -> list[str]:
                return [q + " (truncated)" if q in cut else q for q in ids]

            rows.append(
                {
                    "config": c.name,
                    "pair": f"{comp.baseline} -> {comp.candidate}",
                    "task": comp.task,
                    "lost_ids": mark(list(p.a_only)) if p else [],
                    "gained_ids": mark(list(p.b_only)) if p else [],
                    "output_match": f"{fmt(comp.output_match_rate)} ({comp.matched}/{comp.compared})"
                    + (f"; {len(comp.past_stop)} only up to the stop" if comp.past_stop else "")
                    + _noise_text(comp),
                    "diff": (fmt(p.diff) + _ci(p.diff_ci)) if p else "-",
                    "flipped": f"-{len(p.a_only)} / +{len(p.b_only)}" if p else "-",
                    "p": fmt(p.p_value, 4) if p else "-",
                }
            )
    return rows


def render_terminal(record: RunRecord, console: Console | None = None) -> None:
    """Print the scores table, the comparisons table and the gate list to the terminal."""
    if console is None:
        console = Console()
        if not console.is_terminal:  # CI logs: do not squeeze tables into 80 columns
            console = Console(width=200)
    t = Table(title=f"evalrun {record.run_id}: scores", show_lines=False)
    for _, title in COLUMNS:
        t.add_column(title)
    for r in score_rows(record):
        if r["status"] != "ran":
            t.add_row(r["config"], r["variant"], r["task"], f"[yellow]{r['status']}[/yellow]", *[""] * (len(COLUMNS) - 4))
        else:
            t.add_row(*[r.get(k, "") for k, _ in COLUMNS])
    console.print(t)
    crow = comparison_rows(record)
    if crow:
        ct = Table(title="comparisons (paired over the same questions)")
        for h in ("config", "pair", "task", "output match", "accuracy diff [95% CI]", "flipped (lost/gained)", "McNemar p"):
            ct.add_column(h)
        for r in crow:
            ct.add_row(r["config"], r["pair"], r["task"], r["output_match"], r["diff"], r["flipped"], r["p"])
        console.print(ct)
        for line in _flipped_lines(crow):
            console.print(line, markup=False)
    for line in acceptance_ci_notes(record) + run_warnings(record):
        console.print(line, markup=False)
    gt = Table(title="gates (" + ", ".join(c.name for c in record.configs) + ")")
    for h in ("verdict", "gate", "observed", "limit", "detail"):
        gt.add_column(h, overflow="fold")
    for g in record.gates():
        color = {"PASS": "green", "FAIL": "red"}.get(g.verdict, "yellow")
        gt.add_row(f"[{color}]{g.verdict}[/{color}]", g.id.split("/", 1)[1], fmt(g.observed, 4),
                   _limit(g), g.detail)
    console.print(gt)
    for line in server_lines(record):
        if not line.endswith(": ready") and ": ready (" not in line:
            from rich.markup import escape

            console.print(f"[yellow]server[/yellow] {escape(line)}", highlight=False, markup=True)
    status = {True: "[green]all gates passed[/green]", False: "[red]gates failed[/red]", None: "[yellow]not every gate could be judged[/yellow]"}[record.passed]
    console.print(f"{status}; exit code {record.exit_code}; record: {record.path or ''}")


def run_warnings(record: RunRecord) -> list[str]:
    """Warnings a reader must see next to the scores: tasks smaller than their
    threshold's calibration set (``subset_warnings``), contaminated data run anyway."""
    out = [f"warning: {c.name}: {w.message}" for c in record.configs for w in c.subset_warnings]
    for tid, d in record.provenance.datasets.items():
        if d.contamination:
            out.append(f"warning: {tid}: contaminated data run with --allow-contamination: {d.contamination}")
    return out


def _flipped_lines(crow: list[dict[str, Any]], limit: int = 50) -> list[str]:
    def ids(x: list[str]) -> str:
        return ", ".join(x[:limit]) + (f" ... ({len(x)} in all)" if len(x) > limit else "")

    out = []
    for r in crow:
        if r["lost_ids"] or r["gained_ids"]:
            out.append(f"flipped {r['config']} {r['pair']} {r['task']}: "
                       f"right only in {r['pair'].split(' -> ')[0]} (lost): {ids(r['lost_ids']) or '-'}; "
                       f"right only in {r['pair'].split(' -> ')[1]} (gained): {ids(r['gained_ids']) or '-'}")
    return out


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    def esc(s: str) -> str:
        return str(s).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def server_lines(record: RunRecord) -> list[str]:
    """What happened to each variant's server (``VariantResult.server``, issue 10): one
    line per variant, ``config/variant: status (exit code N, after S s)``, plus the
    pre-launch check's problems, servers earlier runs left running, and the signal that
    interrupted the run."""
    out = []
    for pb in record.preflight.problems if record.preflight else []:
        out.append(f"{pb.variant}: {pb.kind} before launch ({pb.config_path}): {pb.message}")
    for c in record.configs:
        for vname, v in c.variants.items():
            srv = v.server
            if srv.status is None:
                continue
            extra = ", ".join(x for x in (
                f"exit code {srv.exit_code}" if srv.exit_code is not None else "",
                f"after {srv.seconds}s" if srv.seconds is not None else "") if x)
            out.append(f"{c.name}/{vname}: {srv.status}" + (f" ({extra})" if extra else ""))
    for lo in record.leftover_servers:
        out.append(f"left by an earlier run and still running: pid {lo.pid}; end it with `{lo.kill_command}`")
    if record.interrupted_by:
        out.append(f"run interrupted by {record.interrupted_by}; every server was stopped before the record was written")
    return out


def render_markdown(record: RunRecord) -> str:
    """The run as Markdown (``summary.md``): scores, comparisons, gates, failures with
    the questions that flipped or diverged, and provenance."""
    prov = record.provenance
    lines = [
        f"# evalrun run {record.run_id}",
        "",
        f"- result: **{ {True: 'PASS', False: 'FAIL', None: 'NOT EVERY GATE JUDGED' if record.status == 'completed' else 'INCOMPLETE'}[record.passed] }** (exit code {record.exit_code})",
        f"- evalrun {prov.evalrun_version}, {prov.vllm_version}, Python {prov.python}, {prov.platform}",
        f"- started {prov.started_at}, ended {prov.ended_at}",
        f"- command: `{shlex.join(prov.command_line)}`",
        "",
        "## Scores",
        "",
    ]
    rows = []
    for r in score_rows(record):
        if r["status"] != "ran":
            rows.append([r["config"], r["variant"], r["task"], r["status"]] + [""] * (len(COLUMNS) - 4))
        else:
            rows.append([r.get(k, "") for k, _ in COLUMNS])
    lines.append(_md_table([t for _, t in COLUMNS], rows))
    notes = acceptance_ci_notes(record)
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    warns = run_warnings(record)
    if warns:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in warns]
    servers = server_lines(record)
    if servers:
        lines += ["", "## Servers", ""] + [f"- {x}" for x in servers]
    for c in record.configs:
        b = c.baseline
        if b and b.found:
            lines.append(f"- {c.name}: gated against baseline `{b.path}` (from run {b.source_run_id}, "
                         f"written {b.written_at})" + (f"; error: {b.error}" if b.error else ""))
    crow = comparison_rows(record)
    if crow:
        lines += ["", "## Comparisons", ""]
        lines.append(_md_table(
            ["config", "pair", "task", "output match", "accuracy diff [95% CI]", "flipped (lost/gained)", "McNemar p"],
            [[r["config"], r["pair"], r["task"], r["output_match"], r["diff"], r["flipped"], r["p"]] for r in crow],
        ))
        flipped = _flipped_lines(crow, limit=200)
        if flipped:
            lines += ["", "### Flipped questions", ""] + [f"- {x}" for x in flipped]
    lines += ["", "## Gates", ""]
    grows = []
    for g in record.gates():
        grows.append([g.verdict, g.id, fmt(g.observed, 4), _limit(g), g.detail])
    lines.append(_md_table(["verdict", "gate", "observed", "limit", "detail"], grows))
    failed = [g for g in record.gates() if g.passed is False]
    if failed:
        lines += ["", "## Failed gates", ""]
        for g in failed:
            lines.append(f"- **{g.id}**: {g.detail}")
            if g.questions:
                lines.append(f"  - questions: {', '.join(g.questions[:50])}" + (" ..." if len(g.questions) > 50 else ""))
    mism_blocks = []
    for c in record.configs:
        for comp in c.comparisons:
            for mm in comp.mismatches[:3]:
                mism_blocks.append(
                    f"- {c.name} {comp.baseline} -> {comp.candidate} {comp.task} "
                    f"`{mm.question_id}` first divergence at token {mm.first_divergence}:\n"
                    f"  - {comp.baseline}: `{mm.baseline_text[:200]!r}`\n"
                    f"  - {comp.candidate}: `{mm.candidate_text[:200]!r}`"
                )
    if mism_blocks:
        lines += ["", "## Output mismatches (first three per comparison)", ""] + mism_blocks
    return "\n".join(lines) + "\n"
