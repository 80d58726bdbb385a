"""``evalrun selfcheck``: prove the gates have teeth.

Runs a config whose variants are the clean engine and the engine with faults injected
by evalrun's vLLM plugin (:mod:`harness.faults.plugin`), then checks every verdict against
what each fault must do:

* clean variants (no ``fault``): every one of their gates passes;
* a fault's variant: its patched code ran and changed a value ("exercised"), and the
  gate kinds its module declares (``Fault.expectation``, one module per fault in
  :mod:`harness.faults.catalog`; the table in docs/FAULTS.md) fail or pass; e.g.
  ``draft-input`` fails ``min_acceptance_length`` and passes ``min_output_match``;
* an async-path fault under synchronous scheduling: its patched code runs or not, as
  declared, and every gate passes.

Exit code 0 when every expectation holds, 1 when a gate that should fail passed or a
clean gate failed, 2 when the run could not be made.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.config.gates import GateBase, declaration
from harness.config.loader import load_config
from harness.config.model_list import CONFIGS_DIR
from harness.config.schema import ConfigError, ModelConfig
from harness.config.types import DirPath, Name, OptionalPath, PositiveCount, RunId, cli_type
from harness.faults.fault import EVERY_KIND, GateRef
from harness.faults.plugin import FAULTS
from harness.records.atomic import write_atomic
from harness.records.run_record import PluginReport, RunRecord, VariantResult


@dataclass(frozen=True)
class GateSelector:
    """Gates a fault's expectation names: one kind (None: every kind) on the plain tasks
    (every task but ``kind: shape``) or on the traffic-shape tasks."""

    kind: type[GateBase] | None
    on_shapes: bool

    def label(self) -> str:
        """``kind`` or ``*``, prefixed ``shape:`` on the shape tasks (messages)."""
        return ("shape:" if self.on_shapes else "") + (self.kind.KIND if self.kind else EVERY_KIND)


@dataclass(frozen=True)
class FaultExpectation:
    """What the self-check requires of one fault's variant (from the fault's module,
    :attr:`harness.faults.fault.Fault.expectation`), in gate kinds.

    Attributes:
        must_fail: gates that must FAIL in the fault's own scheduling mode.
        must_pass: gates that must PASS there.
        sync_executes: an async-path fault run with synchronous scheduling: whether its
            patched code must run (every gate must pass either way).
    """

    must_fail: tuple[GateSelector, ...]
    must_pass: tuple[GateSelector, ...]
    sync_executes: bool


def _selector(ref: GateRef) -> GateSelector:
    """A fault module's gate reference as gate kinds (their spec classes, found in the
    registry: :func:`harness.config.gates.declaration`); ValueError on a kind that is not
    declared."""
    return GateSelector(None if ref.kind == EVERY_KIND else declaration(ref.kind).spec, ref.tasks == "shape")


def fault_expectations() -> dict[str, FaultExpectation]:
    """Every fault's expectation, read from its module (:data:`harness.faults.plugin.FAULTS`).

    Measured, not assumed: docs/FAULTS.md ("Measured") holds the run.

    Raises:
        ValueError: a fault names a gate kind that is not declared (the nearest are named).
    """
    return {name: FaultExpectation(tuple(_selector(r) for r in f.expectation.must_fail),
                                   tuple(_selector(r) for r in f.expectation.must_pass),
                                   f.expectation.sync_executes is not False)
            for name, f in FAULTS.items()}


#: What each fault must do in its own scheduling mode (comparison gates are attributed to
#: their candidate variant), and an async-path fault under synchronous scheduling.
EXPECTATIONS: dict[str, FaultExpectation] = fault_expectations()

DEFAULT_CONFIG = CONFIGS_DIR / "selfcheck-cpu.yaml"


@dataclass(frozen=True)
class Check:
    """One expectation and whether it held.

    Attributes:
        variant: the variant judged.
        fault: its fault (None = clean).
        gate: the gate id.
        expected: ``PASS`` or ``FAIL``.
        actual: the gate's verdict (``PASS``, ``FAIL``, ``NOT RUN``).
        held: expected == actual.
        detail: the gate's numbers.
    """

    variant: str
    fault: str | None
    gate: str
    expected: str
    actual: str
    held: bool
    detail: str


def judge_selfcheck(record: RunRecord, faults: dict[str, str | None],
                    shape_tasks: frozenset[str] = frozenset()) -> list[Check]:
    """Check a run record's gates against :data:`EXPECTATIONS`.

    Args:
        record: a run record with one config.
        faults: variant name -> fault name (None for clean variants).
        shape_tasks: the config's ``kind: shape`` tasks (expectations tell them apart).

    Returns:
        One :class:`Check` per expectation: every gate of a clean variant (expected
        PASS), and per faulty variant the gates named in its fault's expectations.

    Raises:
        ValueError: a variant's fault has no expectations, or a required gate is
            missing from the record (e.g. no ``min_acceptance_length`` configured).
    """
    checks: list[Check] = []
    gates = record.gates()
    variants = {k: v for c in record.configs for k, v in c.variants.items()}
    faults = {v: f for v, f in faults.items() if v in variants}  # --variant may select a subset
    for variant, fault in faults.items():
        mine = [g for g in gates if g.variant == variant]
        if fault is None:
            involved_faulty = {v for v, f in faults.items() if f is not None}
            for g in mine:
                if g.baseline in involved_faulty:
                    continue
                if g.baseline and g.baseline not in faults:
                    continue  # its baseline variant was not selected
                checks.append(Check(variant, None, g.id, "PASS", g.verdict, g.verdict == "PASS", g.detail))
            continue
        if fault not in EXPECTATIONS:
            raise ValueError(f"variant {variant}: fault {fault!r} has no self-check expectations "
                             f"(known: {', '.join(sorted(EXPECTATIONS))})")
        vrec = variants[variant]
        plugin = vrec.plugin or PluginReport()
        counts = plugin.counts
        ex_detail = (", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k.startswith(f"{fault}."))
                     or "no executions counted")
        sync_run = _async_effective(vrec) is False and FAULTS[fault].scheduling == "async"
        if sync_run:
            # the same async-path patch under synchronous scheduling: measured contrast
            ran = int(counts.get(f"{fault}.executions", 0)) > 0
            want = "EXECUTED" if EXPECTATIONS[fault].sync_executes else "NOT EXECUTED"
            got = "EXECUTED" if ran else "NOT EXECUTED"
            checks.append(Check(variant, fault, f"{variant}/plugin/executions (sync scheduling)", want, got,
                                want == got, ex_detail))
            for g in mine:
                if g.baseline in {v for v, f in faults.items() if f is not None}:
                    continue
                checks.append(Check(variant, fault, g.id, "PASS", g.verdict, g.verdict == "PASS", g.detail))
            continue
        exercised = plugin.exercised
        checks.append(Check(variant, fault, f"{variant}/plugin/exercised", "EXERCISED",
                            "EXERCISED" if exercised else "NOT EXERCISED", bool(exercised),
                            ex_detail if exercised else (plugin.not_exercised_reason or "no plugin report")))
        if not exercised:
            continue  # "fault not exercised": its gates' verdicts would be for the wrong reason
        exp = EXPECTATIONS[fault]
        for want, selectors in (("FAIL", exp.must_fail), ("PASS", exp.must_pass)):
            for selector in selectors:
                hits = _expected_gates(mine, selector, shape_tasks)
                if not hits:
                    raise ValueError(f"variant {variant} ({fault}): the config defines no {selector.label()} gate; "
                                     "the self-check needs it")
                for g in hits:
                    checks.append(Check(variant, fault, g.id, want, g.verdict, g.verdict == want, g.detail))
    return checks


def _expected_gates(gates: list, want: GateSelector, shape_tasks: frozenset[str]) -> list:
    """The gates an expectation names (:data:`EXPECTATIONS`): its kind (or every kind) on
    the plain tasks or on the shape tasks."""
    return [g for g in gates if (g.task in shape_tasks) == want.on_shapes
            and (want.kind is None or want.kind.KIND == g.kind)]


def _async_effective(vrec: VariantResult) -> bool | None:
    """The variant's effective async scheduling (engine facts), else the requested value."""
    if vrec.engine is not None and vrec.engine.async_scheduling is not None:
        return bool(vrec.engine.async_scheduling)
    return vrec.requested.async_scheduling


def render_checks(checks: list[Check], record: RunRecord) -> str:
    """Markdown: per variant the expectation, the verdict and the numbers, then a summary
    of acceptance length and output match per variant."""
    lines = ["# evalrun selfcheck", "", "| variant | fault | gate | expected | actual | held | numbers |",
             "|---|---|---|---|---|---|---|"]
    for c in checks:
        lines.append(f"| {c.variant} | {c.fault or 'clean'} | {c.gate.split('/', 1)[1]} | {c.expected} | {c.actual} | "
                     f"{'yes' if c.held else '**NO**'} | {c.detail.replace('|', '/')} |")
    lines += ["",
              "| variant | task | accuracy (flexible-numeric) | mean acceptance length | per-position acceptance | "
              "output match vs reference |", "|---|---|---|---|---|---|"]
    for cfg in record.configs:
        om = {(x.candidate, x.task): x for x in cfg.comparisons if x.baseline == "reference"}
        for vname, v in cfg.variants.items():
            for tname, t in v.tasks.items():
                sd = t.spec_decode
                acc = t.accuracy["flexible-numeric"]
                o = om.get((vname, tname))
                mal = sd.mean_acceptance_length if sd else None
                om_txt = ("-" if o is None or o.output_match_rate is None
                          else f"{o.output_match_rate:.3f} ({o.matched}/{o.compared})")
                pp = " ".join("-" if p is None else f"{p:.2f}" for p in (sd.per_position_acceptance if sd else []))
                lines.append(
                    f"| {vname} | {tname} | {'-' if acc is None else f'{acc:.3f}'} | "
                    f"{'-' if mal is None else f'{mal:.3f}'} | "
                    f"{pp or '-'} | "
                    f"{om_txt} |"
                )
    held = sum(c.held for c in checks)
    lines += ["", f"{held}/{len(checks)} expectations held."]
    return "\n".join(lines) + "\n"


def _one_run(cfg: ModelConfig, faults: dict[str, str | None], args: argparse.Namespace, run_id: str | None,
             argv: list[str]) -> int | tuple[Path, list[Check]]:
    """Run the self-check config once and judge it; returns ``(run_dir, checks)`` or an exit code."""
    from harness import api
    from harness.config.plan import build_plan

    try:  # a stopping signal stops every server and keeps the record (the front door's handlers)
        record, run_dir = api.run(build_plan([cfg], python=args.python), results_dir=args.results_dir,
                                  run_id=run_id, argv=["evalrun", "selfcheck", *argv], variants=args.variant)
    except api.REFUSED as e:
        print(f"evalrun selfcheck: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # a stopping signal: servers stopped, partial record kept
        api.say_interrupted(e, "evalrun selfcheck")
        if getattr(e, "kept", None):  # the run's record kept its verdict; the self-check was not judged
            print(f"evalrun selfcheck: interrupted ({e}) before its checks were judged; INTERRUPTED (exit 2)",
                  file=sys.stderr, flush=True)
        return 2
    if record.status == "error":  # an unexpected exception: nothing to judge the faults by
        print(f"evalrun selfcheck: {record.error.describe() if record.error else 'status error'}; "
              f"record: {run_dir / 'run.json'} (the traceback is in it)", file=sys.stderr)
        return 2
    try:
        checks = judge_selfcheck(record, faults, frozenset(t for t, s in cfg.tasks.items() if s.kind == "shape"))
    except ValueError as e:
        print(f"evalrun selfcheck: {e}", file=sys.stderr)
        return 2
    md = render_checks(checks, record)
    write_atomic(run_dir / "selfcheck.md", md)
    write_atomic(run_dir / "selfcheck.json", json.dumps([asdict(c) for c in checks], indent=2) + "\n")
    print(json.dumps([asdict(c) for c in checks], indent=2) if args.json else md)
    print(f"run folder: {run_dir}", file=sys.stderr)
    return run_dir, checks


def _verdict(checks: list[Check]) -> int:
    if all(c.held for c in checks):
        return 0
    not_run = [c for c in checks if c.actual == "NOT RUN"]
    if not_run and all(c.held or c.actual == "NOT RUN" for c in checks):
        return 2
    return 1


def cli_main(argv: list[str]) -> int:
    """``evalrun selfcheck [--config YAML] [--results-dir DIR] [--run-id ID] [--variant NAME ...]
    [--repeat N] [--python PY] [--json]``."""
    from harness.config.model_list import PROJECT_ROOT

    p = argparse.ArgumentParser(
        prog="evalrun selfcheck",
        description=(
            "Run the tiny trained hybrid model clean and with faults injected into vLLM's "
            "speculative decoding (evalrun's vLLM plugin), and check that the clean engine "
            "passes every gate, each fault's patched code ran and each fault is caught by its gate."
        ),
        epilog="exit codes: 0 every expectation held (in every repeat), 1 one did not, 2 could not run",
    )
    p.add_argument("--config", type=cli_type(OptionalPath, "a config file"), default=DEFAULT_CONFIG,
                   help="self-check config (default: %(default)s)")
    p.add_argument("--results-dir", type=cli_type(DirPath, "a folder"), default=PROJECT_ROOT / "results",
                   help="where the run folder is written (default: %(default)s)")
    p.add_argument("--run-id", default=None, type=cli_type(RunId, "a run id"),
                   help="name of the run folder (default: UTC time and pid); "
                   "with --repeat N the folders are <id>-1 .. <id>-N")
    p.add_argument("--variant", action="append", default=None, metavar="NAME", type=cli_type(Name, "a variant name"),
                   help="run only this variant (repeatable), e.g. the clean ones for --repeat")
    p.add_argument("--repeat", type=cli_type(PositiveCount, "a count >= 1"), default=1, metavar="N",
                   help="run the self-check N times (fresh servers each time) and report how many held")
    p.add_argument("--python", default=None, help="interpreter with vLLM (default: this one)")
    p.add_argument("--json", action="store_true", help="print the checks as JSON instead of Markdown")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be >= 1")

    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(f"evalrun selfcheck: config error:\n{e}", file=sys.stderr)
        return 2
    if args.variant:
        unknown = sorted(set(args.variant) - set(cfg.variants))
        if unknown:
            print(f"evalrun selfcheck: no variant {unknown} in {args.config} "
                  f"(known: {', '.join(cfg.variants)})", file=sys.stderr)
            return 2
    faults = {name: v.fault for name, v in cfg.variants.items()
              if args.variant is None or name in args.variant}
    codes, runs = [], []
    base = args.run_id or None
    for i in range(1, args.repeat + 1):
        rid = base if args.repeat == 1 else (f"{base}-{i}" if base else None)
        out = _one_run(cfg, faults, args, rid, argv)
        if isinstance(out, int):
            return out
        run_dir, checks = out
        runs.append(run_dir)
        codes.append(_verdict(checks))
    if args.repeat > 1:
        held = sum(c == 0 for c in codes)
        print(f"evalrun selfcheck: every expectation held in {held} of {args.repeat} runs: "
              + ", ".join(str(r) for r in runs), file=sys.stderr)
    return max(codes) if 1 not in codes else 1
