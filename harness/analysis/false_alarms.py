"""The realized false-fail rate of clean nights: how often an unchanged build fails.

A *night* is one run of a model list on a build known to be good (a repeat of ``evalrun
calibrate``, or a simulated night of :mod:`harness.analysis.night_simulation`). Its gates'
verdicts say whether it would have been red. Over ``n`` nights this module counts, for each
gate, each gate kind, each gate kind within a config, each config and the whole list, the
nights in which at least one of its gates failed the run (:attr:`GateResult.fails_run`:
FAIL, or XPASS of a strict expected failure; NOT RUN is not a failure here, it is counted
apart), and gives the share with its exact interval.

The interval is Clopper and Pearson's (Biometrika 26 (1934) 404-413): the set of rates p for
which the observed count is not in either 2.5% tail of Binomial(n, p); its ends are beta
quantiles, ``lower = Beta(alpha/2; k, n - k + 1)``, ``upper = Beta(1 - alpha/2; k + 1, n -
k)`` (0 and 1 at k = 0 and k = n), computed by ``scipy.stats.binomtest(k, n)
.proportion_ci(method="exact")``. It holds its coverage for every p and n, which matters
here: false-fail rates are near 0 or near 1 and nights are few.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypedDict, TypeVar

from harness.records.run_record import GateResult

__all__ = ["CONFIDENCE", "ConfigKindRateJson", "FalseAlarmRates", "FalseAlarmsJson", "Rate", "RateJson",
           "clopper_pearson", "false_alarm_rates", "rate"]

#: the confidence level of every interval here
CONFIDENCE = 0.95

#: one night: config name -> its gates' verdicts
Night = Mapping[str, Sequence[GateResult]]


def clopper_pearson(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided interval of a binomial rate (module docstring).

    Args:
        k: successes (here: nights that failed), ``0 <= k <= n``.
        n: trials (nights), ``n >= 1``.
        confidence: the interval's level, in (0, 1).

    Returns:
        ``(lower, upper)``, fractions.

    Raises:
        ValueError: ``n < 1``, ``k`` outside ``0..n`` or ``confidence`` outside (0, 1).
    """
    from scipy.stats import binomtest

    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"clopper_pearson: need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    if not 0 < confidence < 1:
        raise ValueError(f"clopper_pearson: confidence must be in (0, 1), got {confidence}")
    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


class RateJson(TypedDict):
    """:meth:`Rate.as_dict`: nights failed, nights, nights not judged, the rate and its
    exact 95% interval ``[lower, upper]``."""

    failed: int
    nights: int
    not_judged: int
    rate: float
    ci95: list[float]


class ConfigKindRateJson(RateJson):
    """A :class:`RateJson` of one gate kind within one config."""

    config: str
    kind: str


#: :meth:`FalseAlarmRates.as_dict` (``list`` is the whole list's rate)
FalseAlarmsJson = TypedDict("FalseAlarmsJson", {
    "nights": int, "confidence": float, "interval": str, "list": RateJson, "configs": dict[str, RateJson],
    "kinds": dict[str, RateJson], "config_kinds": list[ConfigKindRateJson], "gates": dict[str, RateJson]})


@dataclass(frozen=True)
class Rate:
    """How often something failed over the nights it was judged in.

    Attributes:
        failed: nights in which it failed the run.
        nights: nights in which it was present (the denominator).
        not_judged: of those, nights in which none of its gates was judged (all NOT RUN).
        rate: ``failed / nights``.
        ci: the exact 95% interval of the rate (:func:`clopper_pearson`).
    """

    failed: int
    nights: int
    not_judged: int
    rate: float
    ci: tuple[float, float]

    def as_dict(self) -> RateJson:
        """The rate as JSON-ready values (``ci`` a two-item list)."""
        return {"failed": self.failed, "nights": self.nights, "not_judged": self.not_judged,
                "rate": self.rate, "ci95": list(self.ci)}


def rate(failed: int, nights: int, not_judged: int = 0) -> Rate:
    """A :class:`Rate` of ``failed`` of ``nights`` with its exact interval.

    Raises:
        ValueError: as :func:`clopper_pearson`.
    """
    return Rate(failed, nights, not_judged, failed / nights if nights else 0.0, clopper_pearson(failed, nights))


@dataclass(frozen=True)
class FalseAlarmRates:
    """The realized false-fail rates over ``nights`` clean nights (:func:`false_alarm_rates`).

    Attributes:
        nights: how many nights.
        gates: gate id -> :class:`Rate`.
        kinds: gate kind -> :class:`Rate` (a night fails a kind when any gate of it failed,
            in any config).
        config_kinds: ``(config, kind)`` -> :class:`Rate`.
        configs: config -> :class:`Rate` (any of its gates failed).
        whole_list: :class:`Rate` of the list (any gate of any config failed: a red night).
    """

    nights: int
    gates: dict[str, Rate]
    kinds: dict[str, Rate]
    config_kinds: dict[tuple[str, str], Rate]
    configs: dict[str, Rate]
    whole_list: Rate

    def as_dict(self) -> FalseAlarmsJson:
        """JSON-ready: ``{"nights", "confidence", "interval", "list", "configs", "kinds",
        "config_kinds", "gates"}`` (config kinds as ``{"config", "kind", ...}`` rows)."""
        return {
            "nights": self.nights, "confidence": CONFIDENCE,
            "interval": "Clopper-Pearson exact (scipy.stats.binomtest(...).proportion_ci(method='exact'))",
            "list": self.whole_list.as_dict(),
            "configs": {c: r.as_dict() for c, r in self.configs.items()},
            "kinds": {k: r.as_dict() for k, r in self.kinds.items()},
            "config_kinds": [ConfigKindRateJson(config=c, kind=k, **r.as_dict())
                             for (c, k), r in self.config_kinds.items()],
            "gates": {g: r.as_dict() for g, r in self.gates.items()},
        }


K = TypeVar("K")


class _Tally(Generic[K]):
    """Per key: nights present, nights failed, nights with nothing judged."""

    def __init__(self) -> None:
        self.present: dict[K, int] = {}
        self.failed: dict[K, int] = {}
        self.unjudged: dict[K, int] = {}

    def add(self, key: K, gates: Sequence[GateResult]) -> None:
        self.present[key] = self.present.get(key, 0) + 1
        self.failed[key] = self.failed.get(key, 0) + any(g.fails_run for g in gates)
        self.unjudged[key] = self.unjudged.get(key, 0) + all(g.passed is None for g in gates)

    def rates(self) -> dict[K, Rate]:
        return {k: rate(self.failed[k], n, self.unjudged[k]) for k, n in self.present.items()}


def false_alarm_rates(nights: Sequence[Night]) -> FalseAlarmRates:
    """Count failed nights per gate, kind, config and kind, config and the whole list.

    Args:
        nights: one mapping per clean night, config name -> its gate results (the
            record's ``configs[i].gates``); keys keep first-seen order.

    Returns:
        :class:`FalseAlarmRates`; an entity's denominator is the nights it appeared in.

    Raises:
        ValueError: no nights.
    """
    if not nights:
        raise ValueError("false_alarm_rates needs at least one night")
    gates: _Tally[str] = _Tally()
    kinds: _Tally[str] = _Tally()
    config_kinds: _Tally[tuple[str, str]] = _Tally()
    configs: _Tally[str] = _Tally()
    whole: _Tally[str] = _Tally()
    for night in nights:
        every: list[GateResult] = []
        by_kind: dict[str, list[GateResult]] = {}
        for cname, results in night.items():
            configs.add(cname, results)
            every += results
            by_ck: dict[str, list[GateResult]] = {}
            for g in results:
                gates.add(g.id, [g])
                by_ck.setdefault(g.kind, []).append(g)
                by_kind.setdefault(g.kind, []).append(g)
            for kind, gs in by_ck.items():
                config_kinds.add((cname, kind), gs)
        for kind, gs in by_kind.items():
            kinds.add(kind, gs)
        whole.add("list", every)
    return FalseAlarmRates(
        nights=len(nights), gates=gates.rates(), kinds=kinds.rates(), config_kinds=config_kinds.rates(),
        configs=configs.rates(), whole_list=whole.rates()["list"])
