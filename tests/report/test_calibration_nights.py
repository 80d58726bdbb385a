"""harness.report.calibration_nights: the validation of simulated nights against the real
repeats (a simulated rate inside or outside the real rate's exact interval), and the
Markdown of both sections, on hand-built rates."""

from __future__ import annotations

from harness.analysis.false_alarms import rate
from harness.report.calibration_nights import validation_rows
from harness.report.calibration_render import list_false_alarm_lines


def _fa(nights, lst, configs, kinds):
    return {"nights": nights, "confidence": 0.95, "interval": "Clopper-Pearson exact", "list": lst.as_dict(),
            "configs": {c: r.as_dict() for c, r in configs.items()},
            "kinds": {k: r.as_dict() for k, r in kinds.items()},
            "config_kinds": [], "gates": {}}


def test_validation_rows_say_whether_the_simulated_rate_is_in_the_real_interval():
    # 3 of 10 real: exact interval [0.0667, 0.6525]; 0 of 10: [0, 0.3085]
    real = _fa(10, rate(3, 10), {"a": rate(3, 10)},
               {"max_accuracy_drop": rate(0, 10), "variant_effective": rate(0, 10)})
    sim = _fa(200, rate(134, 200), {"a": rate(60, 200)}, {"max_accuracy_drop": rate(80, 200)})
    rows = {(r["level"], r["name"]): r for r in validation_rows(real, sim)}
    assert rows[("list", "list")]["within_real_ci"] is False  # 0.67 > 0.6525
    assert rows[("config", "a")]["within_real_ci"] is True  # 0.30
    assert rows[("kind", "max_accuracy_drop")]["within_real_ci"] is False  # 0.40 > 0.3085
    assert ("kind", "variant_effective") not in rows  # not simulated


def test_the_list_section_names_every_rate_with_its_interval():
    fa = _fa(10, rate(3, 10), {"a": rate(3, 10)}, {"max_accuracy_drop": rate(1, 10)})
    text = "\n".join(list_false_alarm_lines(fa))
    assert "| the whole list (a red night) | 3/10 | 0.300 | [0.067, 0.652] |" in text
    assert "| kind `max_accuracy_drop` (any config) | 1/10 | 0.100 | [0.003, 0.445] |" in text
