"""One config's steps before and after its variants run: the variants chosen, the tasks
prepared, the model resolved, and the gates judged (with the stored baseline's). Each
takes the config's run (:class:`harness.run.context.ConfigRun`) and fills its records in
place; the runner (:mod:`harness.run.runner`) calls them in order.
"""

from __future__ import annotations

from pathlib import Path

from harness.analysis.expected import mark_expected
from harness.analysis.gates import baseline_notes, evaluate_gates, judge_config
from harness.analysis.measurements import Measurements
from harness.config.plan import VariantPlan
from harness.config.reader import present
from harness.models.resolve import resolve_model
from harness.records.baselines import BaselineError, baseline_path, load_baseline
from harness.records.provenance import DatasetRef, EngineBuild
from harness.records.results import unstarted_variant
from harness.records.run_record import BaselineInfo, ConfigResult, GateResult, RunRecord
from harness.run.context import ConfigRun
from harness.tasks import ContaminationError, DataUnavailableError, ShortDataError, prepare_task, task_for

__all__ = ["select_variants", "prepare_tasks", "prepare_model", "judge_gates", "stored_baseline"]


def select_variants(run: ConfigRun) -> list[VariantPlan]:
    """The config's warnings said and recorded; the variants that will run (selected
    with ``--variant`` and applicable). Unselected ones are NOT RUN; not applicable ones
    get a record naming why (never a pass)."""
    p, config_plan, m, crec = run.progress, run.plan, run.measured, run.result
    crec.config_warnings = list(config_plan.config.warnings)
    for w in config_plan.config.warnings:
        p.warn(w.message)
    variants = [v for v in config_plan.variants if run.opts.variants is None or v.name in run.opts.variants]
    for name in [v.name for v in config_plan.variants if v not in variants]:
        m.variant_record(name).not_run = "variant not selected (--variant)"
    for v in [v for v in variants if v.not_applicable]:  # the engine cannot run it: never a pass
        m.variant_record(v.name).not_run = f"not applicable: {v.not_applicable}"
        crec.variants[v.name] = unstarted_variant(v, "not_started", f"not applicable: {v.not_applicable}")
    return [v for v in variants if not v.not_applicable]


def prepare_tasks(run: ConfigRun) -> bool:
    """Prepare every task of the config (:func:`harness.tasks.prepare_task`) into
    ``run.prepared``, recording each dataset in ``run.record.provenance.datasets``. A
    task that cannot be prepared is NOT RUN on every variant with the reason. Returns
    whether a required one could not be prepared."""
    p, config_plan, opts = run.progress, run.plan, run.opts
    c = config_plan.config
    could_not_run = False
    for t in config_plan.tasks:
        run.place.at("prepare", config=c.name, variant=None, task=t.name)
        reason = None
        try:
            pt = run.prepared[t.name] = prepare_task(t.name, t.spec, opts.data_dir, opts.allow_contamination,
                                                     base_dir=Path(c.path).parent)
            run.record.provenance.datasets[t.id] = DatasetRef(
                sha256=pt.dataset_hash, source=pt.source, num_requests=len(pt.requests), stop=list(pt.stop),
                contamination=pt.contamination,
            )
            kind = task_for(t.spec.kind)
            if not kind.generates_text(pt):
                run.measured.prompt_only[t.name] = kind.not_text_reason(pt)
            if pt.contamination:
                p.warn(f"{c.name}: task {t.name}: contaminated data run anyway (--allow-contamination): "
                       f"{pt.contamination}")
        except ContaminationError as e:
            could_not_run |= t.spec.required
            p.error(f"{c.name}: {e}")
            reason = "contaminated data refused (test questions among the few-shot examples or the train split)"
        except ShortDataError as e:  # counted only now (an lm-eval task, hub data): refused all the same
            could_not_run = True
            p.error(f"{c.name}: {e}")
            reason = "short data: fewer questions than num_questions asks"
        except DataUnavailableError as e:
            msg = f"task {t.name}: data not available: {e}"
            if t.spec.required:
                could_not_run = True
                p.error(f"{c.name}: {msg}")
            else:
                p.warn(f"{c.name}: NOT RUN (optional task): {msg}")
            reason = f"data not available ({'required' if t.spec.required else 'optional'} task)"
        if reason is not None:
            for v in config_plan.variants:
                run.measured.task_record(v.name, t.name).not_run = reason
    return could_not_run


def prepare_model(run: ConfigRun) -> str | None:
    """The config's model made available (:func:`harness.models.resolve.resolve_model`);
    None when it cannot be (``run.result.error`` says why, every variant NOT RUN)."""
    c, p, crec = run.plan.config, run.progress, run.result
    run.place.at("model", variant=None, task=None)
    try:
        model_ref = resolve_model(c.model, p)
        crec.model_path = model_ref
        return model_ref
    except Exception as e:  # noqa: BLE001 - any build failure stops this config, recorded
        crec.error = f"model {c.model}: cannot be prepared: {type(e).__name__}: {e}"
        p.error(f"{c.name}: {crec.error}")
        for v in run.plan.variants:
            run.measured.variant_record(v.name).not_run = "model not available"
        return None


def judge_gates(run: ConfigRun) -> None:
    """The config's gates, and its gates against the stored baseline when there is one
    (``run.opts.baseline_dir``)."""
    config_plan, m, crec = run.plan, run.measured, run.result
    run.place.at("gates", config=config_plan.config.name, variant=None, task=None)
    crec.gates = evaluate_gates(config_plan.gates, m)
    if run.opts.baseline_dir is not None:
        run.place.at("baseline")
        crec.baseline = stored_baseline(run.opts.baseline_dir, config_plan.config.name, m)
        crec.gates = judge_config(config_plan.gates, config_plan.baseline_gates, m)  # one false-alarm family
        if crec.baseline.found and m.baseline is not None:
            crec.baseline.notes = baseline_notes(config_plan.baseline_gates, m)
    # known engine bugs the config declares: XFAIL / XPASS on the build that ran
    crec.gates = mark_expected(crec.gates, config_plan.config, lambda g: gate_builds(g, crec, run.record))


def gate_builds(g: GateResult, crec: ConfigResult, record: RunRecord) -> list[EngineBuild | None]:
    """The engine builds a gate's variants ran on (its variant, and the variant it
    compares with when that is one of the config's): each variant's own ``build``, the
    run's ``provenance.build`` for a variant recorded without one."""
    names = [g.variant] + ([g.baseline] if g.baseline in crec.variants else [])
    out: list[EngineBuild | None] = []
    for name in names:
        v = crec.variants.get(name)
        out.append(v.build if v is not None and v.build is not None else record.provenance.build)
    return out


def stored_baseline(baseline_dir: Path, config: str, m: Measurements) -> BaselineInfo:
    """Read ``<baseline_dir>/<config>.json`` into ``m.baseline`` (or ``m.baseline_error``)."""
    path = baseline_path(baseline_dir, config)
    info = BaselineInfo(path=str(path), found=present(path))  # a pipe there is read, and refused by name
    if not info.found:
        return info
    try:
        m.baseline = load_baseline(path)
    except BaselineError as e:
        m.baseline_error = info.error = str(e)
        return info
    info.source_run_id = m.baseline.source_run.run_id
    info.written_at = m.baseline.written_at
    return info
