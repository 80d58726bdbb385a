"""The dry run's measured figures: what ``evalrun calibrate`` measured on repeated clean runs
(``calibration.json``, :mod:`harness.report.calibration`), used by ``--dry-run`` in place of a
comparison's assumed settings wherever the calibration measured the same config, comparison
and task (docs/gates.md, "Detectable drop in the dry run").

Read from ``calibration.json`` (through the one reader, :mod:`harness.records.files`):

* per (config, baseline, candidate, task): the **discordance** (b + c)/n, the mean over the
  repeats that measured it (at least 1/n of the calibration's questions, as calibrate's own
  ``expected_discordance`` recommendation), and the **divergence rate** 1 - mean output match
  (the share of questions whose completion differs);
* per (config, variant, task): the run-to-run standard deviation of **mean acceptance
  length** (tokens, over the repeats);
* with ``--simulate-nights``: the fitted run spread of acceptance ``sd_run`` (logit scale,
  pooled over the list: :mod:`harness.analysis.night_model`), the figure
  ``gates.acceptance_run_sd`` stands for.

Each figure names its source: ``measured: calibrate <path>, <k> repeats``; a figure the
calibration did not measure stays the config's, ``assumed: <key> <value>, the default`` or
``, set by the config``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.config.schema import ComparisonSpec, GateSpec, ModelConfig
from harness.config.types import Count, Probability
from harness.records.files import MAX_RECORD_BYTES, UnreadableFile, read_text

__all__ = ["CalibrationFileError", "Measured", "MeasuredFigures", "assumed", "discordance_of", "family_discordance",
           "find_calibration",
           "measured_json", "read_measured", "render_measured"]

#: The file ``evalrun calibrate`` writes in its folder (``harness/cli/calibrate.py``).
CALIBRATION_FILE = "calibration.json"


class CalibrationFileError(ValueError):
    """A ``calibration.json`` cannot be read or is not calibrate's shape; the message names
    the file and the key."""


class _Loose(BaseModel):
    """calibrate's keys this module reads; its other keys are left alone (extra ignored)."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True, allow_inf_nan=False)


class _Spread(_Loose):
    n_runs: Count
    mean: float | None = None
    sd: float | None = Field(default=None, ge=0.0)


class _ShareSpread(_Spread):
    mean: Probability | None = None


class _Comparison(_Loose):
    baseline: str
    candidate: str
    task: str
    n: int | None = Field(default=None, ge=1)
    discordance: _ShareSpread
    output_match_rate: _ShareSpread


class _Task(_Loose):
    variant: str
    task: str
    mean_acceptance_length: _Spread | None = None


class _Config(_Loose):
    name: str
    tasks: list[_Task]
    comparisons: list[_Comparison]


class _Acceptance(_Loose):
    sd_run: float = Field(ge=0.0)
    source: str = ""


class _Model(_Loose):
    acceptance: _Acceptance | None = None
    runs: Count = 0


class _Nights(_Loose):
    model: _Model


class _Summary(_Loose):
    runs: list[dict[str, Any]]
    configs: list[_Config]
    simulated_nights: _Nights | None = None


@dataclass(frozen=True)
class Measured:
    """One measured figure: its ``value``, the ``repeats`` that measured it and ``source``
    (``measured: calibrate <path>, <repeats> repeats``, plus how it was floored, if it was)."""

    value: float
    repeats: int
    source: str


@dataclass(frozen=True)
class MeasuredFigures:
    """What one ``calibration.json`` measured (module docstring), keyed by names.

    Attributes:
        path: the file read.
        repeats: the calibration's repeats (``runs``).
        discordance: (config, baseline, candidate, task) -> share of questions right in
            exactly one variant.
        divergence: (config, baseline, candidate, task) -> share of questions whose
            completions differ (1 - output match).
        acceptance_sd: (config, variant, task) -> run-to-run sd of mean acceptance length (tokens).
        acceptance_run_sd: the fitted run spread of acceptance (logit), None without
            ``--simulate-nights``.
    """

    path: Path
    repeats: int
    discordance: Mapping[tuple[str, str, str, str], Measured]
    divergence: Mapping[tuple[str, str, str, str], Measured]
    acceptance_sd: Mapping[tuple[str, str, str], Measured]
    acceptance_run_sd: Measured | None

    def configs(self) -> set[str]:
        """The config names the calibration measured."""
        return {k[0] for k in (*self.discordance, *self.divergence)} | {k[0] for k in self.acceptance_sd}

    def discordance_for(self, config: ModelConfig, comp: ComparisonSpec, task: str) -> tuple[float, str]:
        """The discordance the dry run uses for ``comp`` on ``task`` and its source: measured
        when calibrated, else the comparison's ``expected_discordance`` (:func:`assumed`)."""
        m = self.discordance.get((config.name, comp.baseline, comp.candidate, task))
        if m is None:
            return comp.expected_discordance, assumed(comp, "expected_discordance")
        return m.value, m.source


def discordance_of(config: ModelConfig, comp: ComparisonSpec, task: str,
                   measured: MeasuredFigures | None) -> tuple[float, str]:
    """The discordance the dry run uses for ``comp`` on ``task`` and its source: without
    ``measured`` the comparison's ``expected_discordance`` and "" (today's output), else
    :meth:`MeasuredFigures.discordance_for`."""
    return (comp.expected_discordance, "") if measured is None else measured.discordance_for(config, comp, task)


def family_discordance(sources: Sequence[Mapping[str, str | float]], m: MeasuredFigures) -> tuple[list[float], str]:
    """The family-wise line's discordances (distinct, rounded to 4 places) and their sources in
    words, from :func:`harness.report.dry_run.family_false_fail_of`'s ``discordance_sources``."""
    disc = sorted({round(float(x["discordance"]), 4) for x in sources})
    k = sum(str(x["source"]).startswith("measured") for x in sources)
    return disc, f"{k} of {len(sources)} gate(s) measured by calibrate {m.path}, the rest expected_discordance"


def assumed(spec: ComparisonSpec | GateSpec, key: str) -> str:
    """``assumed: <key> <value>, the default`` or ``, set by the config``: a figure the dry run
    takes from the config because no calibration measured it."""
    value = getattr(spec, key)
    default = type(spec).model_fields[key].default
    return f"assumed: {key} {value}, {'the default' if value == default else 'set by the config'}"


def _source(path: Path, repeats: int) -> str:
    return f"measured: calibrate {path}, {repeats} repeat{'s' if repeats != 1 else ''}"


def read_measured(path: Path) -> MeasuredFigures:
    """The measured figures of the ``calibration.json`` at ``path`` (module docstring).

    A figure is kept only when at least one repeat measured it (its mean is not None); a
    discordance of 0 is floored at ``1/n`` (n = the calibration's questions), as
    ``evalrun calibrate`` recommends ``expected_discordance`` (:mod:`harness.report.calibration`),
    since a paired test's power needs a positive discordance.

    Raises:
        CalibrationFileError: the file cannot be read (missing, not a regular file, over
            :data:`~harness.records.files.MAX_RECORD_BYTES`), is not JSON, or a key this
            module reads is missing or of the wrong type or range; the message names the
            file and the key.
    """
    try:
        text = read_text(path, MAX_RECORD_BYTES, "calibration summary")
        raw = json.loads(text)
    except UnreadableFile as e:
        raise CalibrationFileError(str(e)) from None
    except json.JSONDecodeError as e:
        raise CalibrationFileError(f"{path}: not JSON: {e}") from None
    try:
        s = _Summary.model_validate(raw)
    except ValidationError as e:
        where = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()[:5])
        raise CalibrationFileError(f"{path}: not evalrun calibrate's calibration.json: {where}") from None
    disc: dict[tuple[str, str, str, str], Measured] = {}
    div: dict[tuple[str, str, str, str], Measured] = {}
    acc: dict[tuple[str, str, str], Measured] = {}
    for c in s.configs:
        for x in c.comparisons:
            key = (c.name, x.baseline, x.candidate, x.task)
            if x.discordance.mean is not None and x.discordance.n_runs:
                value, src = x.discordance.mean, _source(path, x.discordance.n_runs)
                if x.n is not None and value < 1.0 / x.n:
                    value, src = 1.0 / x.n, f"{src}; mean {x.discordance.mean:g} floored at 1/n = 1/{x.n}"
                disc[key] = Measured(value, x.discordance.n_runs, src)
            om = x.output_match_rate
            if om.mean is not None and om.n_runs:
                div[key] = Measured(1.0 - om.mean, om.n_runs, _source(path, om.n_runs))
        for t in c.tasks:
            al = t.mean_acceptance_length
            if al is not None and al.sd is not None and al.n_runs >= 2:
                acc[(c.name, t.variant, t.task)] = Measured(al.sd, al.n_runs, _source(path, al.n_runs))
    run_sd = None
    if s.simulated_nights is not None and (a := s.simulated_nights.model.acceptance) is not None:
        reps = s.simulated_nights.model.runs or len(s.runs)
        run_sd = Measured(a.sd_run, reps, f"{_source(path, reps)} (--simulate-nights model, {a.source})")
    return MeasuredFigures(path, len(s.runs), disc, div, acc, run_sd)


def find_calibration(results_dir: Path) -> Path | None:
    """The newest ``calibration.json`` among the folders directly inside ``results_dir``
    (where ``evalrun calibrate`` writes ``<results dir>/<calibration id>/calibration.json``),
    by modification time; None when there is none, or when two are equally newest (which
    one is meant is then unclear). One listing of ``results_dir``, no deeper walk."""
    found: list[tuple[float, Path]] = []
    try:
        with os.scandir(results_dir) as it:
            for entry in it:
                p = Path(entry.path) / CALIBRATION_FILE
                try:
                    if entry.is_dir() and p.is_file():
                        found.append((p.stat().st_mtime, p))
                except OSError:
                    continue
    except OSError:
        return None
    found.sort(reverse=True)
    if not found or (len(found) > 1 and found[0][0] == found[1][0]):
        return None
    return found[0][1]


class DivergenceJson(TypedDict):
    """A comparison's measured output divergence on one task, with its source."""

    baseline: str
    candidate: str
    task: str
    divergence_rate: float
    source: str


class AcceptanceSdJson(TypedDict):
    """A variant's measured run-to-run sd of mean acceptance length on one task (tokens)."""

    variant: str
    task: str
    sd_tokens: float
    source: str


class RunSpreadJson(TypedDict):
    """The acceptance run spread (logit sd): measured, or the config's ``acceptance_run_sd``;
    ``config`` is the config's value when a measured one is shown beside it."""

    value: float
    source: str
    config: NotRequired[float]


class MeasuredJson(TypedDict):
    """One config's ``measured_figures`` in ``--dry-run --json`` (:func:`measured_json`)."""

    calibration: str
    repeats: int
    divergence: list[DivergenceJson]
    acceptance_length_sd: list[AcceptanceSdJson]
    acceptance_run_sd: RunSpreadJson


def measured_json(config: ModelConfig, m: MeasuredFigures) -> MeasuredJson:
    """``config``'s measured output divergence (per comparison and task) and acceptance
    dispersion (per variant and task; the run spread against ``gates.acceptance_run_sd``),
    each with its source; figures of comparisons, variants or tasks not in ``config`` are left out, and
    the divergence of a task that samples (its output is not compared: ``sampling_notes``)."""
    comps = {(x.baseline, x.candidate) for x in config.comparisons}
    div = [DivergenceJson(baseline=b, candidate=c, task=t, divergence_rate=v.value, source=v.source)
           for (cn, b, c, t), v in m.divergence.items()
           if cn == config.name and (b, c) in comps and t in config.tasks and not config.tasks[t].samples]
    acc = [AcceptanceSdJson(variant=vn, task=t, sd_tokens=v.value, source=v.source)
           for (cn, vn, t), v in m.acceptance_sd.items()
           if cn == config.name and vn in config.variants and t in config.tasks]
    g = config.gates
    run_sd = (RunSpreadJson(value=m.acceptance_run_sd.value, source=m.acceptance_run_sd.source,
                            config=g.acceptance_run_sd) if m.acceptance_run_sd is not None else
              RunSpreadJson(value=g.acceptance_run_sd, source=assumed(g, "acceptance_run_sd")))
    return {"calibration": str(m.path), "repeats": m.repeats, "divergence": div, "acceptance_length_sd": acc,
            "acceptance_run_sd": run_sd}


def render_measured(config: ModelConfig, m: MeasuredFigures) -> list[str]:
    """The dry run's lines on :func:`measured_json`: what the calibration measured of ``config``
    beyond the discordance (which the detectable drops and the family-wise figure use)."""
    j = measured_json(config, m)
    lines = [f"  measured figures: calibrate {j['calibration']} ({j['repeats']} repeats); discordance replaces "
             "expected_discordance where measured"]
    for d in j["divergence"]:
        lines.append(f"    output divergence {d['baseline']} -> {d['candidate']}, task {d['task']}: "
                     f"{d['divergence_rate']:.3f} of questions differ (1 - output match; {d['source']})")
    for a in j["acceptance_length_sd"]:
        lines.append(f"    acceptance length run-to-run sd, {a['variant']}, task {a['task']}: "
                     f"{a['sd_tokens']:.4f} tokens ({a['source']})")
    r = j["acceptance_run_sd"]
    lines.append(f"    acceptance run spread (logit sd, what gates.acceptance_run_sd stands for): {r['value']:g} "
                 f"({r['source']}" + (f"; the config plans with {r['config']:g})" if "config" in r else ")"))
    return lines
