"""The calibration summary's shape (``calibration.json``): typed dicts built by
:func:`harness.report.calibration.summarize` and read by its Markdown rendering
(:mod:`harness.report.calibration_render`) and the recommendation rules."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from harness.analysis.false_alarms import FalseAlarmsJson, RateJson

__all__ = [
    "ValidationRow",
    "OtherListNights",
    "SimulatedNights",
    "Spread",
    "OutputNoise",
    "TaskCalibration",
    "ComparisonCalibration",
    "RecommendedGates",
    "RecommendedComparison",
    "Recommended",
    "ConfigCalibration",
    "RunRef",
    "CalibrationSummary",
    "SpeculativeSpread",
]


class Spread(TypedDict):
    """One figure over the runs (:func:`spread`): the values (None = not measured in
    that run), how many were measured, and their mean, sample standard deviation, its
    one-sided 95% upper bound, min and max (None when not computable)."""

    values: list[float | None]
    n_runs: int
    mean: float | None
    sd: float | None
    sd_upper95: float | None
    min: float | None
    max: float | None


class OutputNoise(TypedDict):
    """Run ``run``'s greedy completions against run 1's of the same variant and task:
    questions compared, how many differ, their share, and ``[question id, first
    divergent token]`` of each."""

    run: int
    compared: int
    mismatched: int
    rate: float | None
    first_divergences: list[list[str | int]]


class TaskCalibration(TypedDict):
    """One variant and task over the runs (:func:`summarize`): ``n`` questions scored
    (mean over runs), accuracy per pipeline, the speculative figures (only for a variant
    with speculative decoding; the sampling standard error of mean acceptance length and
    where it came from), the run-to-run output noise against run 1 and the noise the
    on-demand reruns measured (shares of questions whose completion differs)."""

    variant: str
    task: str
    n: int | None
    accuracy: dict[str, Spread]
    mean_acceptance_length: NotRequired[Spread]
    acceptance_rate: NotRequired[Spread]
    per_position_acceptance: NotRequired[list[Spread]]
    sampling_se_mean_acceptance_length: NotRequired[float | None]
    sampling_se_source: NotRequired[str]
    output_noise: list[OutputNoise]
    output_noise_rate: Spread
    rerun_noise_rate: Spread


class ComparisonCalibration(TypedDict):
    """One comparison and task over the runs (:func:`summarize`): output match, paired
    accuracy drop (baseline - candidate) and discordance (b + c)/n as spreads, the mean
    paired Wald variance, ``n`` questions, the drop in mean acceptance length (two
    speculative variants, else None) and the reference's gaps in nats at every judged
    divergence, sorted."""

    baseline: str
    candidate: str
    task: str
    output_match_rate: Spread
    accuracy_drop: Spread
    discordance: Spread
    wald_variance: float | None
    n: int | None
    acceptance_length_drop: Spread | None
    divergence_gaps: list[float]


class RecommendedGates(TypedDict, total=False):
    """Recommended config-level gate values (:func:`summarize`; the module docstring's rule)."""

    accuracy_threshold: float
    tolerance: float
    calibration_questions: int
    min_acceptance_length: float


class RecommendedComparison(TypedDict):
    """Recommended values of one comparison and task; a key is left out when the runs
    did not measure what it needs."""

    baseline: str
    candidate: str
    task: str
    max_accuracy_drop: NotRequired[float]
    expected_discordance: NotRequired[float]
    max_acceptance_length_drop: NotRequired[float]
    near_tie_nats: NotRequired[float]
    noise_mismatch_rate: NotRequired[float]
    noise_runs: NotRequired[int]
    min_output_match: NotRequired[float]


class Recommended(TypedDict):
    """The recommended gates of one config (:func:`summarize`)."""

    gates: RecommendedGates
    comparisons: list[RecommendedComparison]


class ConfigCalibration(TypedDict):
    """One config over the runs (:func:`summarize`): the pipeline its gates read, per
    variant and task and per comparison the figures, the recommendation and, per
    recommended key, how it was computed."""

    name: str
    pipeline: str
    tasks: list[TaskCalibration]
    comparisons: list[ComparisonCalibration]
    recommended: NotRequired[Recommended]
    explain: NotRequired[dict[str, str]]


class RunRef(TypedDict):
    """One repeat of :func:`summarize`: its run id, folder, exit code, status and error."""

    run_id: str
    path: str
    exit_code: int | None
    status: str
    error: str | None


class ValidationRow(TypedDict):
    """One config or gate kind of the calibrated list: its realized false-fail rate over the
    real repeats (``real``, with its exact interval), the simulated nights' rate, and whether
    the simulated rate lies within the real interval."""

    level: str
    name: str
    real: RateJson
    simulated: RateJson
    within_real_ci: bool


class OtherListNights(TypedDict):
    """Simulated nights of another list (``--simulate-list``): its path, whether each task's
    modal accuracy was its config's ``accuracy_threshold``, and the rates."""

    list: str
    accuracy_from_config: bool
    rates: FalseAlarmsJson


class SimulatedNights(TypedDict):
    """``--simulate-nights N`` (:mod:`harness.report.calibration_nights`): the nights and
    seed, the behaviour measured from the repeats (``model``), the calibrated list's
    simulated rates and their validation against the real repeats, and another list's."""

    nights: int
    seed: int
    model: dict[str, object]
    rates: FalseAlarmsJson
    validation: list[ValidationRow]
    other_list: OtherListNights | None


class CalibrationSummary(TypedDict):
    """:func:`summarize`'s result (``calibration.json``): the repeats, ``sigmas`` k, the
    rule in words, one :class:`ConfigCalibration` per config, the realized false-fail rates
    over the repeats (every gate's verdicts, :func:`harness.analysis.false_alarms.false_alarm_rates`)
    and, with ``--simulate-nights``, the simulated nights."""

    runs: list[RunRef]
    sigmas: float
    rule: str
    configs: list[ConfigCalibration]
    false_alarms: NotRequired[FalseAlarmsJson]
    simulated_nights: NotRequired[SimulatedNights]


class SpeculativeSpread(TypedDict, total=False):
    """The speculative figures of one variant and task over the runs (:func:`summarize`):
    spreads, and the sampling standard error of mean acceptance length with its source;
    all keys or none (no run measured speculative decoding)."""

    mean_acceptance_length: Spread
    acceptance_rate: Spread
    per_position_acceptance: list[Spread]
    sampling_se_mean_acceptance_length: float | None
    sampling_se_source: str
