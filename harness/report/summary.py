"""Reports of a run record: a terminal table (rich) and a Markdown summary.

Both read only the run record dict written by :mod:`harness.records.run_record`, so a report can
be regenerated from disk.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def fmt(x: Any, digits: int = 3) -> str:
    """A value for a table: ``-`` for None, floats with ``digits`` decimals."""
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _ci(ci: Any) -> str:
    if not ci:
        return ""
    return f" [{ci[0]:.3f}, {ci[1]:.3f}]"


def score_rows(record: dict[str, Any]) -> list[dict[str, str]]:
    """One row per config x variant x task: accuracy per pipeline (with 95% Wilson
    interval), errors, acceptance rate, mean acceptance length, per-position acceptance."""
    rows = []
    for c in record.get("configs", []):
        for vname, v in c.get("variants", {}).items():
            eng = v.get("engine") or {}
            if v.get("error") and not v.get("tasks"):
                st = (v.get("server") or {}).get("status")
                rows.append({"config": c["name"], "variant": vname, "task": "-",
                             "status": "NOT RUN" + (f" (server {st})" if st else "") + ": " + v["error"].splitlines()[0][:100]})
                continue
            for tname, t in v.get("tasks", {}).items():
                if t.get("status") != "ran":
                    rows.append({"config": c["name"], "variant": vname, "task": tname, "status": "NOT RUN: " + str(t.get("reason", ""))[:100]})
                    continue
                acc = t.get("accuracy", {})
                ci = t.get("accuracy_ci", {})
                sd = t.get("spec_decode") or {}
                rows.append(
                    {
                        "config": c["name"],
                        "variant": vname,
                        "task": tname,
                        "status": "ran",
                        "async": fmt(eng.get("async_scheduling")),
                        "strict-match": fmt(acc.get("strict-match")) + _ci(ci.get("strict-match")),
                        "flexible-extract": fmt(acc.get("flexible-extract")) + _ci(ci.get("flexible-extract")),
                        "n": str(t.get("num_requests")),
                        "errors": str(t.get("error_count")),
                        "acceptance_rate": fmt(sd.get("acceptance_rate")) + _ci(t.get("acceptance_rate_ci")),
                        "mean_acceptance_length": fmt(sd.get("mean_acceptance_length")) + _ci(t.get("mean_acceptance_length_ci")),
                        "per_position": " ".join(fmt(p, 2) for p in sd.get("per_position_acceptance", []) or []) or "-",
                        "spec_error": t.get("spec_decode_error") or "",
                    }
                )
    return rows


COLUMNS = [
    ("config", "config"), ("variant", "variant"), ("task", "task"), ("async", "async sched."),
    ("strict-match", "strict-match [95% CI]"), ("flexible-extract", "flexible-extract [95% CI]"),
    ("n", "n"), ("errors", "errors"), ("acceptance_rate", "accept. rate"),
    ("mean_acceptance_length", "mean accept. len"), ("per_position", "per-position"),
]


def acceptance_ci_notes(record: dict[str, Any]) -> list[str]:
    """Why acceptance intervals are missing or how they were computed, one line per
    distinct reason/method (speculative variants only)."""
    notes: dict[str, list[str]] = {}
    for c in record.get("configs", []):
        for vname, v in c.get("variants", {}).items():
            for tname, t in v.get("tasks", {}).items():
                if not t.get("spec_decode"):
                    continue
                why = t.get("acceptance_ci_reason") or t.get("acceptance_ci_method")
                if why:
                    notes.setdefault(why, []).append(f"{c['name']}/{vname}/{tname}")
    return [f"acceptance intervals ({', '.join(ids)}): {why}" for why, ids in notes.items()]


def _noise_text(comp: dict[str, Any]) -> str:
    nz = comp.get("noise")
    if not nz:
        return ""
    if nz.get("source") == "rerun":
        src = f"noise {comp['baseline']} rerun {fmt(nz.get('noise_rate'))} ({nz.get('noise_mismatched')}/{nz.get('noise_compared')} differ)"
    else:
        src = f"stored noise {fmt(nz.get('noise_rate'))}"
    return f"; {src}, one-sided p={fmt(nz.get('p_value'), 4)}"


def comparison_rows(record: dict[str, Any]) -> list[dict[str, str]]:
    """One row per comparison and task: output match (with the noise it is judged
    against, when any), paired accuracy difference, p-value, flipped question ids."""
    rows = []
    for c in record.get("configs", []):
        for comp in c.get("comparisons", []):
            p = comp.get("paired") or {}
            rows.append(
                {
                    "config": c["name"],
                    "pair": f"{comp['baseline']} -> {comp['candidate']}",
                    "task": comp["task"],
                    "lost_ids": list(p.get("a_only", [])),
                    "gained_ids": list(p.get("b_only", [])),
                    "output_match": f"{fmt(comp.get('output_match_rate'))} ({comp.get('matched')}/{comp.get('compared')})" + _noise_text(comp),
                    "diff": (fmt(p.get("diff")) + _ci(p.get("diff_ci"))) if p else "-",
                    "flipped": f"-{len(p.get('a_only', []))} / +{len(p.get('b_only', []))}" if p else "-",
                    "p": fmt(p.get("p_value"), 4) if p else "-",
                }
            )
    return rows


def render_terminal(record: dict[str, Any], console: Console | None = None) -> None:
    """Print the scores table, the comparisons table and the gate list to the terminal."""
    if console is None:
        console = Console()
        if not console.is_terminal:  # CI logs: do not squeeze tables into 80 columns
            console = Console(width=200)
    t = Table(title=f"evalrun {record.get('run_id')}: scores", show_lines=False)
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
    for line in acceptance_ci_notes(record):
        console.print(line, markup=False)
    gt = Table(title="gates (" + ", ".join(c["name"] for c in record.get("configs", [])) + ")")
    for h in ("verdict", "gate", "observed", "limit", "detail"):
        gt.add_column(h, overflow="fold")
    for c in record.get("configs", []):
        for g in c.get("gates", []):
            color = {"PASS": "green", "FAIL": "red"}.get(g["verdict"], "yellow")
            gt.add_row(f"[{color}]{g['verdict']}[/{color}]", g["id"].split("/", 1)[1], fmt(g.get("observed"), 4),
                       (g.get("op", "") + " " + fmt(g.get("limit"), 4)) if g.get("limit") is not None else "", g.get("detail", ""))
    console.print(gt)
    for line in server_lines(record):
        if not line.endswith(": ready") and ": ready (" not in line:
            from rich.markup import escape

            console.print(f"[yellow]server[/yellow] {escape(line)}", highlight=False, markup=True)
    status = {True: "[green]all gates passed[/green]", False: "[red]gates failed[/red]", None: "[yellow]not every gate could be judged[/yellow]"}[record.get("passed")]
    console.print(f"{status}; exit code {record.get('exit_code')}; record: {record.get('_path', '')}")


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


def server_lines(record: dict[str, Any]) -> list[str]:
    """What happened to each variant's server (``variants[v]["server"]``, issue 10):
    one line per variant, ``config/variant: status (exit code N, after S s)``, plus the
    pre-launch check's problems, leftover servers of earlier runs, and the signal that
    interrupted the run. Empty for a record without these fields."""
    out = []
    for pb in (record.get("preflight") or {}).get("problems", []):
        out.append(f"{pb['variant']}: {pb['kind']} before launch ({pb['config_path']}): {pb['message']}")
    for c in record.get("configs", []):
        for vname, v in c.get("variants", {}).items():
            srv = v.get("server") or {}
            if not srv.get("status"):
                continue
            extra = [f"exit code {srv['exit_code']}" if srv.get("exit_code") is not None else "",
                     f"after {srv['seconds']}s" if srv.get("seconds") is not None else ""]
            extra = ", ".join(x for x in extra if x)
            out.append(f"{c['name']}/{vname}: {srv['status']}" + (f" ({extra})" if extra else ""))
    for lo in record.get("leftover_servers") or []:
        out.append(f"left by an earlier run and still running: pid {lo['pid']}; end it with `{lo['kill_command']}`")
    if record.get("interrupted_by"):
        out.append(f"run interrupted by {record['interrupted_by']}; every server was stopped before the record was written")
    return out


def render_markdown(record: dict[str, Any]) -> str:
    """The run as Markdown (``summary.md``): scores, comparisons, gates, failures with
    the questions that flipped or diverged, and provenance."""
    prov = record.get("provenance", {})
    lines = [
        f"# evalrun run {record.get('run_id')}",
        "",
        f"- result: **{ {True: 'PASS', False: 'FAIL', None: 'NOT EVERY GATE JUDGED' if record.get('status') == 'completed' else 'INCOMPLETE'}[record.get('passed')] }** (exit code {record.get('exit_code')})",
        f"- evalrun {prov.get('evalrun_version')}, {prov.get('vllm_version')}, Python {prov.get('python')}, {prov.get('platform')}",
        f"- started {prov.get('started_at')}, ended {prov.get('ended_at')}",
        f"- command: `{' '.join(prov.get('command_line', []))}`",
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
    servers = server_lines(record)
    if servers:
        lines += ["", "## Servers", ""] + [f"- {x}" for x in servers]
    for c in record.get("configs", []):
        b = c.get("baseline")
        if b and b.get("found"):
            lines.append(f"- {c['name']}: gated against baseline `{b.get('path')}` (from run {b.get('source_run_id')}, "
                         f"written {b.get('written_at')})" + (f"; error: {b['error']}" if b.get("error") else ""))
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
    for c in record.get("configs", []):
        for g in c.get("gates", []):
            lim = (g.get("op", "") + " " + fmt(g.get("limit"), 4)) if g.get("limit") is not None else ""
            grows.append([g["verdict"], g["id"], fmt(g.get("observed"), 4), lim, g.get("detail", "")])
    lines.append(_md_table(["verdict", "gate", "observed", "limit", "detail"], grows))
    failed = [g for c in record.get("configs", []) for g in c.get("gates", []) if g.get("passed") is False]
    if failed:
        lines += ["", "## Failed gates", ""]
        for g in failed:
            lines.append(f"- **{g['id']}**: {g['detail']}")
            if g.get("questions"):
                lines.append(f"  - questions: {', '.join(g['questions'][:50])}" + (" ..." if len(g["questions"]) > 50 else ""))
    mism_blocks = []
    for c in record.get("configs", []):
        for comp in c.get("comparisons", []):
            for mm in comp.get("mismatches", [])[:3]:
                mism_blocks.append(
                    f"- {c['name']} {comp['baseline']} -> {comp['candidate']} {comp['task']} "
                    f"`{mm['question_id']}` first divergence at token {mm['first_divergence']}:\n"
                    f"  - {comp['baseline']}: `{mm['baseline_text'][:200]!r}`\n"
                    f"  - {comp['candidate']}: `{mm['candidate_text'][:200]!r}`"
                )
    if mism_blocks:
        lines += ["", "## Output mismatches (first three per comparison)", ""] + mism_blocks
    return "\n".join(lines) + "\n"
