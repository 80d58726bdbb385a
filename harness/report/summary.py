"""Reports of a run record: terminal tables (rich) and the Markdown summary (``summary.md``).

Both read only the run record dict written by :mod:`harness.records.run_record` (and, for
the completions of flipped questions, the samples beside it), so a report can be
regenerated from disk.

Layout, for the places CI shows it:

* ``summary.md``: the verdict line; **failing gates first**, each with its numbers, the
  questions that flipped (both completions side by side) or diverged; gates that could
  not be judged with their reasons; then the scores, speculative decoding and
  comparisons tables; the passing gates folded in ``<details>``.
* terminal: one accuracy table and one speculative-decoding table per config (the config
  name is the title, not a column), narrow enough for 100 columns; cells wrap, never cut
  to ``tiny-q…``. In a non-terminal log (CI) the tables take their natural width (under
  about 100 columns) and text lines are printed unwrapped.
"""

from __future__ import annotations

import html
import shlex
from pathlib import Path
from typing import TypedDict

from rich import box
from rich.console import Console
from rich.table import Table

from harness.analysis.gatekinds.accuracy_floor import AccuracyFloor
from harness.analysis.gatekinds.drafts_observed import DraftsObserved
from harness.records.run_record import ConfigResult, GateResult, RunRecord, outcome_word
from harness.records.text import clean_text
from harness.report.cells import ci_text as _ci
from harness.report.cells import fmt
from harness.report.comparisons import (  # noqa: F401 - re-exported
    ComparisonRow,
    FlippedExample,
    comparison_rows,
    divergence_rows,
    flipped_examples,
)
from harness.report.per_request import per_request_lines
from harness.report.shapes import shape_lines
from harness.tasks.answers import GSM8K_PIPELINES as PIPELINES

#: What each run outcome means, in the words of the exit-code table (``evalrun --help``).
OUTCOME_MEANING = {
    "passed": "every gate was judged and passed (or failed as a declared expected failure, XFAIL), report-only "
              "gates aside (too small to test at their share of the false-alarm budget; listed as NOT RUN)",
    "failed": "at least one gate failed (or passed against a strict expected failure)",
    "incomplete": "no gate failed, but not every gate could be judged",
    "error": "an unexpected error stopped the run",
    "interrupted": "a signal stopped the run",
    "running": "the run has not finished (or was killed before it could say so)",
}


#: Column titles of the answer pipelines (lm-eval's are marked as lm-eval's).
PIPELINE_TITLES = {"strict-numeric": "strict-numeric", "flexible-numeric": "flexible-numeric",
                   "strict-match": "lm-eval strict-match", "flexible-extract": "lm-eval flexible-extract"}


def _pipelines(record: RunRecord) -> list[str]:
    """Pipelines present in any task of the record: the GSM8K ones in report order,
    then others (an lm_eval task's ``acc``, ...) in order of appearance."""
    seen: list[str] = []
    for c in record.configs:
        for v in c.variants.values():
            for t in v.tasks.values():
                for p in t.accuracy:
                    if p not in seen:
                        seen.append(p)
    return [p for p in PIPELINES if p in seen] + [p for p in seen if p not in PIPELINES]


class ScoreRow(TypedDict, total=False):
    """A row of :func:`score_rows`. A variant that did not run has only ``config``,
    ``variant``, ``task`` (``-``) and ``status``; a task that ran has every key, its cells
    formatted for a table (``accuracy``: per pipeline ``"0.970 [0.915, 0.990]"``) and
    ``truncated_count`` / ``speculative`` as values."""

    config: str
    variant: str
    task: str
    status: str
    pipeline: str
    async_scheduling: str
    n: str
    errors: str
    truncated: str
    truncated_count: int
    speculative: bool
    acceptance_rate: str
    mean_acceptance_length: str
    per_position: str
    spec_error: str
    accuracy: dict[str, str]


def score_rows(record: RunRecord) -> list[ScoreRow]:
    """One row per config x variant x task: accuracy per pipeline (with 95% Wilson
    interval), errors, acceptance rate, mean acceptance length, per-position acceptance.

    Returns:
        :class:`ScoreRow` with ``status`` ``ran`` or ``NOT RUN: reason``, ``pipeline``
        the task's gate pipeline, ``async_scheduling`` the effective one.
    """
    rows: list[ScoreRow] = []
    for c in record.configs:
        for vname, v in c.variants.items():
            if v.error and not v.tasks:
                st = v.server.status
                rows.append({"config": c.name, "variant": vname, "task": "-",
                             "status": "NOT RUN" + (f" (server {st})" if st else "") + ": "
                             + v.error.splitlines()[0][:100]})
                continue
            for tname, t in v.tasks.items():
                sd = t.spec_decode
                rows.append({
                    "config": c.name, "variant": vname, "task": tname, "status": "ran",
                    "pipeline": task_pipeline(c, vname, tname),
                    "async_scheduling": fmt(v.engine.async_scheduling if v.engine else None),
                    "n": str(t.num_requests), "errors": str(t.error_count),
                    "truncated": "-" if t.truncated_rate is None else f"{t.truncated_rate:.3f} ({t.truncated})",
                    "truncated_count": t.truncated or 0,
                    "speculative": sd is not None,
                    "acceptance_rate": (fmt(sd.acceptance_rate) if sd else "-") + _ci(t.acceptance_rate_ci),
                    "mean_acceptance_length": ((fmt(sd.mean_acceptance_length) if sd else "-")
                                               + _ci(t.mean_acceptance_length_ci)),
                    "per_position": " ".join(fmt(x, 2) for x in (sd.per_position_acceptance if sd else [])) or "-",
                    "spec_error": t.spec_decode_error or "",
                    "accuracy": {p: fmt(t.accuracy.get(p)) + _ci(t.accuracy_ci.get(p)) for p in t.accuracy},
                })
    return rows


def task_pipeline(config: ConfigResult, variant: str, task: str) -> str:
    """The pipeline the gates of a task read (a task may override the config's): the
    task's comparison names it; else the task's accuracy-floor gate, whose detail starts
    with it; else the config's."""
    comp = next((x for x in config.comparisons if x.task == task), None)
    if comp:
        return comp.pipeline
    t = config.variants[variant].tasks[task]
    for g in config.gates:
        if g.task == task and g.kind == AccuracyFloor.KIND and g.detail.split(" ", 1)[0] in t.accuracy:
            return g.detail.split(" ", 1)[0]
    return config.pipeline


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


# ------------------------------------------------------------------ terminal


def _table(headers: list[str]) -> Table:
    """A table without vertical rules (two spaces between columns), cells folded rather
    than cut when a terminal is narrower than the table."""
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for h in headers:
        t.add_column(h, overflow="fold")
    return t


#: Two-line column heads of the pipelines in the terminal.
_TERMINAL_HEADS = {"strict-numeric": "strict-\nnumeric", "flexible-numeric": "flexible-\nnumeric",
                   "strict-match": "lm-eval\nstrict-match", "flexible-extract": "lm-eval\nflexible-extract"}


def render_terminal(record: RunRecord, console: Console | None = None) -> None:
    """Print, per config, an accuracy table and a speculative-decoding table, then the
    comparisons and the gates (failing first; passing gates counted, not listed).

    Without a terminal (CI logs) the console is 160 columns wide so no table is squeezed
    into 80; the tables themselves stay under about 100 columns; text lines are never
    wrapped (``soft_wrap``).
    """
    # long: a renderer, one table after the other in the order they are printed
    if console is None:
        console = Console()
        if not console.is_terminal:  # CI logs: natural table widths, no 80-column wrapping
            console = Console(width=160)
    rows = score_rows(record)
    pipes = _pipelines(record)
    crow = comparison_rows(record)

    def title(text: str) -> None:
        console.print(f"[bold]{text}[/bold]", soft_wrap=True, highlight=False)

    for c in record.configs:
        crows = [r for r in rows if r["config"] == c.name]
        title(f"== {c.name}")
        if c.error:
            console.print(f"  could not run: {c.error}", markup=False, soft_wrap=True)
        if crows:
            title("accuracy (the gate pipeline of each task with its 95% Wilson interval)")
            t = _table(["variant", "task", "n", *[_TERMINAL_HEADS.get(p, p) for p in pipes]])
            for r in crows:
                if r["status"] != "ran":
                    t.add_row(r["variant"], r["task"], "", f"[yellow]{r['status']}[/yellow]", *[""] * (len(pipes) - 1))
                    continue
                cells = []
                for p in pipes:
                    v = r["accuracy"].get(p, "-")
                    cells.append(v.replace(" [", "\n[", 1) if p == r.get("pipeline") else v.split(" [")[0])
                n = r["n"] + (f"\n{r['errors']} err" if r["errors"] not in ("0", "None") else "") \
                    + (f"\n{r['truncated_count']} cut" if r.get("truncated_count") else "")
                t.add_row(r["variant"], r["task"], n, *cells)
            console.print(t)
        spec = [r for r in crows if r.get("speculative")]
        if spec:
            title("speculative decoding")
            st = _table(["variant", "task", "async", "acceptance rate", "mean acceptance length", "per-position"])
            for r in spec:
                st.add_row(r["variant"], r["task"], r["async_scheduling"], r["acceptance_rate"],
                           r["mean_acceptance_length"], r["per_position"])
            console.print(st)
        mine = [r for r in crow if r["config"] == c.name]
        if mine:
            title("comparisons (paired over the same questions)")
            ct = _table(["pair", "task", "output match", "accuracy diff\n[95% CI]", "lost /\ngained", "McNemar p"])
            for cr in mine:
                ct.add_row(cr["pair"].replace(" -> ", " ->\n"), cr["task"], cr["output_match"],
                           cr["diff"].replace(" [", "\n[", 1),
                           cr["flipped"], cr["p"])
            console.print(ct)
            for line in _flipped_lines(mine):
                console.print(line, markup=False, soft_wrap=True)
            drows = [dr for dr in divergence_rows(record) if dr["config"] == c.name]
            if drows:
                title("divergences judged by the reference's distribution (worst first)")
                dt = _table(["pair", "task", "question @ token", "tokens", "gap (nats)", "verdict"])
                for dr in drows[:10]:
                    dt.add_row(dr["pair"].replace(" -> ", " ->\n"), dr["task"], f"{dr['question']} @ {dr['position']}",
                               dr["tokens"], dr["gap"], dr["verdict"])
                console.print(dt)
                if len(drows) > 10:
                    console.print(f"  ... {len(drows) - 10} more in summary.md / run.json", markup=False)
    for line in acceptance_ci_notes(record) + run_warnings(record):
        console.print(line, markup=False, soft_wrap=True)
    for w in record.merge_warnings:
        console.print(f"WARNING: shards of different builds or lists merged: {w}", markup=False, soft_wrap=True)
    if record.resumed is not None:
        console.print(record.resumed.describe(), markup=False, soft_wrap=True, highlight=False)
    for line in server_lines(record):
        if not line.endswith(": ready") and ": ready (" not in line:
            console.print(f"server {line}", markup=False, soft_wrap=True, highlight=False)
    gates = record.gates()
    bad = sorted((g for g in gates if g.verdict != "PASS"), key=listing_order)
    for g in bad:
        color = "red" if g.fails_run else "magenta" if g.verdict == "XPASS" else "yellow"
        word = g.verdict + (" (strict: fails the run)" if g.verdict == "XPASS" and g.fails_run else "")
        console.print(f"[{color}]{word}[/{color}] {g.id}: observed {fmt(g.observed, 4)}, "
                      f"limit {_limit(g) or '-'}", soft_wrap=True, highlight=False)
        console.print(f"    {g.detail}", markup=False, soft_wrap=True, highlight=False)
        if g.expected_failure is not None:
            console.print(f"    {g.expected_failure.describe()}", markup=False, soft_wrap=True, highlight=False)
    for line in unapplied_lines(record, only_passed=True):
        console.print(line, markup=False, soft_wrap=True, highlight=False)
    console.print(f"{len(gates) - len(bad)} of {len(gates)} gates passed{expected_counts(gates)}", soft_wrap=True)
    color = {"passed": "green", "failed": "red"}.get(record.outcome, "yellow")
    status = f"[{color}]{outcome_word(record.outcome)}[/{color}]: {OUTCOME_MEANING[record.outcome]}"
    console.print(f"{status}; exit code {record.exit_code}; record: {record.path or ''}", soft_wrap=True)


#: The order gates are listed in: what fails the run first, then what was not judged,
#: then unexpected passes, then expected failures.
_ORDER = {"FAIL": 0, "XPASS": 2, "NOT RUN": 1, "XFAIL": 3, "PASS": 4}


def listing_order(gate: GateResult) -> int:
    """A gate's place in a listing (:data:`_ORDER`; a strict XPASS first, with the failures)."""
    return -1 if gate.fails_run and gate.verdict == "XPASS" else _ORDER[gate.verdict]


def expected_counts(gates: list[GateResult]) -> str:
    """``; 2 XFAIL (expected failures), 1 XPASS (unexpected passes)`` for the gates'
    declared expected failures that applied; empty when none did."""
    xf = sum(g.verdict == "XFAIL" for g in gates)
    xp = sum(g.verdict == "XPASS" for g in gates)
    parts = ([f"{xf} XFAIL (expected failure{'s' if xf != 1 else ''}, known engine bug)"] if xf else []) + (
        [f"{xp} XPASS (unexpected pass{'es' if xp != 1 else ''})"] if xp else [])
    return "; " + ", ".join(parts) if parts else ""


def unapplied_lines(record: RunRecord, only_passed: bool = False) -> list[str]:
    """One line per gate named by a declared expected failure that did not apply to this
    run's engine build (it was judged as usual); ``only_passed``: only the PASS ones (a
    FAIL is listed with its declaration already)."""
    return [f"note: {g.id} ({g.verdict}): {g.expected_failure.describe()}" for g in record.gates()
            if g.expected_failure is not None and not g.expected_failure.applies
            and (g.verdict == "PASS" or not only_passed)]


def _limit(g: GateResult) -> str:
    """``op limit`` of a gate result, counts as integers; empty for yes/no gates."""
    if g.limit is None:
        return ""
    lim = int(g.limit) if float(g.limit).is_integer() and g.kind == DraftsObserved.KIND else g.limit
    return f"{g.op} {fmt(lim, 4)}"


def run_warnings(record: RunRecord) -> list[str]:
    """Warnings a reader must see next to the scores: tasks smaller than their
    threshold's calibration set (``subset_warnings``), contaminated data run anyway."""
    out = [f"warning: {c.name}: {w.message}" for c in record.configs for w in c.subset_warnings]
    for tid, d in record.provenance.datasets.items():
        if d.contamination:
            out.append(f"warning: {tid}: contaminated data run with --allow-contamination: {d.contamination}")
    for c in record.configs:  # a declaration covering every gate (``gates: ["*"]``) leaves nothing gated
        covered = [g for g in c.gates if g.expected_failure is not None and g.expected_failure.applies]
        xfail = sum(g.verdict == "XFAIL" for g in covered)
        if c.gates and len(covered) == len(c.gates) and xfail:
            pats = sorted({p for g in covered for p in g.expected_failure.gates})  # type: ignore[union-attr]
            out.append(f"warning: {c.name}: EVERY gate is a declared expected failure on this build "
                       f"(expected_failures gates {', '.join(pats)}): {xfail} of {len(c.gates)} failed as XFAIL and "
                       "the config still counts as passed: nothing of it is gated; narrow the declaration to the "
                       "gates the bug fails")
    return out


def _flipped_lines(crow: list[ComparisonRow], limit: int = 50) -> list[str]:
    def ids(x: list[str]) -> str:
        return ", ".join(x[:limit]) + (f" ... ({len(x)} in all)" if len(x) > limit else "")

    out = []
    for r in crow:
        if r["lost_ids"] or r["gained_ids"]:
            out.append(f"flipped {r['config']} {r['pair']} {r['task']}: "
                       f"right only in {r['pair'].split(' -> ')[0]} (lost): {ids(r['lost_ids']) or '-'}; "
                       f"right only in {r['pair'].split(' -> ')[1]} (gained): {ids(r['gained_ids']) or '-'}")
    return out


# ------------------------------------------------------------------ Markdown


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    def esc(s: str) -> str:
        return str(s).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def server_lines(record: RunRecord) -> list[str]:
    """What happened to each variant's server (``VariantResult.server``): one
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
            mr = v.model_runner
            out.append(f"{c.name}/{vname}: {srv.status}" + (f" ({extra})" if extra else "")
                       + (f"; model runner {mr.runner}" + (f" ({mr.source})" if mr.source else f": {mr.detail}")
                          if mr is not None else ""))
    for lo in record.leftover_servers:
        if lo.verdict == "leftover" and lo.kill_command:
            out.append(f"left by an earlier run and still running: pid {lo.pid}; end it with `{lo.kill_command}`")
        elif lo.verdict == "cannot_tell":
            out.append(f"{lo.pid_file}: cannot tell whether live process {lo.pid} is the server it records "
                       f"({lo.reason}); no command suggested")
        else:
            out.append(f"{lo.pid_file}: ignored ({lo.reason}); no command suggested")
    if record.interrupted_by:
        out.append(f"run interrupted by {record.interrupted_by}; "
                   "every server was stopped before the record was written")
    if record.status == "error" and record.error is not None:
        out.append(f"run ended on an unexpected exception, {record.error.describe()}; every server was stopped; "
                   "the traceback is in run.json and logs/evalrun-error.log")
    return out


def _md_code(text: str) -> str:
    """Inline-safe rendering of a completion for a table cell (``<code>``, escaped)."""
    return "<code>" + html.escape(text[:300]).replace("|", "&#124;").replace("\n", "⏎") + "</code>"


def _verdict_word(record: RunRecord) -> str:
    """The run's outcome word (:attr:`RunRecord.outcome`), as every report prints it."""
    return outcome_word(record.outcome)


def _expected_section(expected: list[GateResult], unapplied: list[str]) -> list[str]:
    """summary.md's section of declared expected failures: XFAIL / non-strict XPASS gates
    with their numbers and declaration, then the declarations that did not apply."""
    if not expected and not unapplied:
        return []
    out = ["", f"## Expected failures: known engine bugs ({len(expected)})", ""]
    for g in sorted(expected, key=listing_order):
        xf = g.expected_failure
        assert xf is not None  # XFAIL / XPASS only exist with a declaration
        out.append(f"- **{g.verdict}** {g.id}: observed {fmt(g.observed, 4)}, limit {_limit(g) or '-'}. {g.detail}")
        fixed = (" An unexpected pass: the bug may be fixed on this build; narrow `builds` or drop "
                 "the declaration." if g.verdict == "XPASS" else "")
        out.append(f"  - {xf.describe()}{fixed}")
    return out + [f"- {x.removeprefix('note: ')}" for x in unapplied]


def render_markdown(record: RunRecord, run_dir: str | Path | None = None) -> str:
    """The run as Markdown (``summary.md``), fit for a pull-request comment: failing gates
    first with their numbers and flipped questions (both completions side by side), gates
    not judged with reasons, scores, speculative decoding, comparisons, output
    mismatches, then the passing gates folded in ``<details>``, then provenance.

    Args:
        record: the run record.
        run_dir: the run folder (for the samples of flipped questions); default the
            folder the record was read from or written to.
    """
    # long: a renderer, one section of summary.md after the other in the order they appear
    prov = record.provenance
    gates = [(c, g) for c in record.configs for g in c.gates]
    failed = [(c, g) for c, g in gates if g.fails_run]
    notrun = [(c, g) for c, g in gates if g.passed is None]
    passed = [(c, g) for c, g in gates if g.verdict == "PASS"]
    expected = [g for _, g in gates if g.verdict in ("XFAIL", "XPASS") and not g.fails_run]
    lines = [
        f"# evalrun run {record.run_id}: {_verdict_word(record)}",
        "",
        f"- result: **{_verdict_word(record)}** (exit code {record.exit_code}): {OUTCOME_MEANING[record.outcome]}; "
        f"{len(failed)} gate(s) failed, {len(notrun)} not run, {len(passed)} passed"
        f"{expected_counts([g for _, g in gates])}",
        f"- evalrun {prov.evalrun_version}, {prov.vllm_version}, Python {prov.python}, {prov.platform}",
    ]
    lm = prov.lm_eval
    if lm is not None and lm.version:
        lines.append(f"- lm-eval {lm.version} (gsm8k task version {lm.gsm8k_task_version}): "
                     "`strict-match` / `flexible-extract` are lm-eval's own filters; `strict-numeric` / "
                     "`flexible-numeric` are evalrun's number-aware pipelines")
    own = [f"`{c.name}/{n}`: {v.build.describe() if v.build else 'unknown'} (`{v.build_spec}`)"
           for c in record.configs for n, v in c.variants.items() if v.build_spec]
    if own:
        lines.append("- engine builds the variants name: " + "; ".join(own))
    if record.resumed is not None:
        lines.append(f"- {record.resumed.describe()}")
    if record.numerics_noise is not None:
        lines.append(f"- **{record.numerics_noise.describe()}**")
    budgets = [f"`{c.name}` {c.false_alarm_budget:g}" for c in record.configs if c.false_alarm_budget is not None]
    if budgets:
        lines.append("- false-alarm budget (the probability that an unchanged build fails any gate of a config in "
                     "one night; Holm over its tested gates, docs/gates.md): " + ", ".join(budgets))
    if record.merged_from:
        lines.append("- merged from shards: " + ", ".join(f"{m.shard}: `{m.run_id}`" for m in record.merged_from))
    for w in record.merge_warnings:
        lines.append(f"- **WARNING: shards of different builds or lists merged**: {w}")
    lines += [
        f"- started {prov.started_at}, ended {prov.ended_at}",
        f"- command: `{shlex.join(prov.command_line)}`",
    ]
    if failed:
        lines += ["", f"## Failed gates ({len(failed)})", ""]
        for c, g in failed:
            lines.append(f"- **{g.id}**{' (XPASS, strict)' if g.verdict == 'XPASS' else ''}: observed "
                         f"{fmt(g.observed, 4)}, limit {_limit(g) or '-'}. {g.detail}")
            if g.expected_failure is not None:
                lines.append(f"  - {g.expected_failure.describe()}")
            if g.questions:
                lines.append(f"  - questions: {', '.join(g.questions[:50])}"
                             + (" ..." if len(g.questions) > 50 else ""))
            comp = c.comparison(g.baseline, g.variant, g.task) if g.baseline and g.task else None
            if comp and g.kind == "max_accuracy_drop":
                ex = flipped_examples(record, c.name, comp, limit=10, run_dir=run_dir)
                if ex:
                    lines += ["", _md_table(
                        ["question", "flip", "gold", f"{comp.baseline} completion", f"{comp.candidate} completion"],
                        [[e["question_id"], e["direction"], str(e["gold"]), _md_code(e["baseline_completion"]),
                          _md_code(e["candidate_completion"])] for e in ex]), ""]
            if comp and g.kind == "min_output_match" and comp.mismatches:
                lines += ["", _md_table(
                    ["question", "first divergence (token)", f"{comp.baseline} completion",
                     f"{comp.candidate} completion"],
                    [[mm.question_id, str(mm.first_divergence), _md_code(mm.baseline_text), _md_code(mm.candidate_text)]
                     for mm in comp.mismatches[:5]]), ""]
    if notrun:
        lines += ["", f"## Not run ({len(notrun)})", ""]
        lines += [f"- {g.id}: {g.detail}" for _, g in notrun]
    lines += _expected_section(expected, unapplied_lines(record))
    lines += shape_lines(record, _md_table)
    pipes = _pipelines(record)
    lines += ["", "## Scores", ""]
    srows = []
    for r in score_rows(record):
        if r["status"] != "ran":
            srows.append([r["config"], r["variant"], r["task"], r["status"], "", ""] + [""] * len(pipes))
        else:
            srows.append([r["config"], r["variant"], r["task"], r["n"], r["errors"], r["truncated"]]
                         + [r["accuracy"].get(p, "-") for p in pipes])
    lines.append(_md_table(["config", "variant", "task", "n", "errors", "truncated (max_tokens)"]
                           + [f"{PIPELINE_TITLES.get(p, p)} [95% CI]" for p in pipes], srows))
    spec = [r for r in score_rows(record) if r.get("speculative")]
    if spec:
        lines += ["", "## Speculative decoding", ""]
        lines.append(_md_table(["config", "variant", "task", "async sched.", "acceptance rate",
                                "mean acceptance length", "per-position acceptance"],
                               [[r["config"], r["variant"], r["task"], r["async_scheduling"], r["acceptance_rate"],
                                 r["mean_acceptance_length"], r["per_position"]] for r in spec]))
    notes = acceptance_ci_notes(record)
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    lines += per_request_lines(record, run_dir, _md_table)
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
        drows = divergence_rows(record)
        if drows:
            lines += ["", "### Divergences judged by the reference's distribution (worst first)", "",
                      "At each divergent question's first divergence: the reference's log-probability gap between "
                      "its own token and the candidate's. Near-ties are explained (benign numerics); the output-match "
                      "gates count the unexplained.", ""]
            lines.append(_md_table(["config", "pair", "task", "question", "token", "baseline -> candidate",
                                    "gap (nats)", "verdict", "why"],
                                   [[r["config"], r["pair"], r["task"], r["question"], r["position"], r["tokens"],
                                     r["gap"], r["verdict"], r["reason"]] for r in drows[:100]]))
            if len(drows) > 100:
                lines.append(f"\n... {len(drows) - 100} more in run.json (`comparisons[].divergence`)")
    lines += ["", "## Gates", ""]
    if passed:
        lines += [f"<details><summary>{len(passed)} passing gate(s)</summary>", "",
                  _md_table(["verdict", "gate", "observed", "limit", "detail"],
                            [[g.verdict, g.id, fmt(g.observed, 4), _limit(g), g.detail] for _, g in passed]),
                  "", "</details>"]
    else:
        lines.append("No gate passed.")
    return clean_text("\n".join(lines) + "\n")  # control characters, colour codes, lone surrogates
