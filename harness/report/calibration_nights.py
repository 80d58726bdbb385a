"""``evalrun calibrate --simulate-nights N``: clean nights simulated from the repeats' behaviour,
validated against the repeats, and optionally for another list (``--simulate-list``).

The behaviour is measured from the repeats (:func:`harness.analysis.night_model.fit_night_model`);
the nights are simulated and judged by evalrun's gates
(:func:`harness.analysis.night_simulation.simulate_nights`). Validation: for the calibrated
list itself, the simulated false-fail rate of every config and every gate kind is set beside
the realized rate of the real repeats with its exact interval; a simulated rate outside that
interval says the simulation misses something the repeats show (with few repeats the
interval is wide, so agreement is a weak check and disagreement a strong one).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.analysis.false_alarms import FalseAlarmsJson, RateJson
from harness.analysis.night_model import fit_night_model
from harness.analysis.night_simulation import NOT_SIMULATED, simulate_nights
from harness.config.schema import ModelConfig
from harness.records.run_record import RunRecord
from harness.report.calibration_types import OtherListNights, SimulatedNights, ValidationRow

__all__ = ["simulated_nights", "validation_rows"]


def validation_rows(real: FalseAlarmsJson, simulated: FalseAlarmsJson) -> list[ValidationRow]:
    """Per config and per simulated gate kind present in both: the real rate, the simulated
    rate, and whether the simulated rate lies in the real rate's exact interval."""
    rows: list[ValidationRow] = []
    pairs: list[tuple[str, str, RateJson, RateJson]] = [("list", "list", real["list"], simulated["list"])]
    pairs += [("config", c, r, simulated["configs"][c]) for c, r in real["configs"].items()
              if c in simulated["configs"]]
    pairs += [("kind", k, r, simulated["kinds"][k]) for k, r in real["kinds"].items()
              if k in simulated["kinds"] and k not in NOT_SIMULATED]
    for level, name, r, s in pairs:
        lo, hi = r["ci95"]
        rows.append({"level": level, "name": name, "real": r, "simulated": s,
                     "within_real_ci": lo <= s["rate"] <= hi})
    return rows


def simulated_nights(runs: Sequence[tuple[RunRecord, Path]], configs: Sequence[ModelConfig], real: FalseAlarmsJson,
                     nights: int, seed: int = 0, other: tuple[str, Sequence[ModelConfig]] | None = None
                     ) -> SimulatedNights:
    """The ``simulated_nights`` section of the calibration summary.

    Args:
        runs: the repeats, ``(record, run folder)`` each.
        configs: the calibrated list's configs.
        real: the repeats' realized rates (the summary's ``false_alarms``).
        nights: simulated nights per list (>= 1).
        seed: the simulation's seed.
        other: ``(list path, its configs)`` to simulate too, each task's modal accuracy
            drawn with its config's ``accuracy_threshold``; None: none.

    Raises:
        ValueError: the repeats have no question to fit (:func:`fit_night_model`), ``nights < 1``.
    """
    model = fit_night_model(runs)
    rates = simulate_nights(configs, model, nights, seed=seed).as_dict()
    other_nights: OtherListNights | None = None
    if other is not None:
        other_rates = simulate_nights(other[1], model, nights, seed=seed, accuracy_from_config=True)
        other_nights = {"list": other[0], "accuracy_from_config": True, "rates": other_rates.as_dict()}
    return {"nights": nights, "seed": seed, "model": model.summary(), "rates": rates,
            "validation": validation_rows(real, rates), "other_list": other_nights}
