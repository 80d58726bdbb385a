"""The CPU config cut to an A/B over two engine builds (the real two-build test and its
manual twin): ``arith`` only with 40 questions, ``reference`` and ``spec_sync``."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CPU_CONFIG = REPO / "configs" / "tiny-qwen3next-mtp-cpu.yaml"


def write_ab_config(folder: Path, baseline: str, candidate: str, questions: int = 40) -> Path:
    """``ab.yaml`` in ``folder``: configs/tiny-qwen3next-mtp-cpu.yaml with only the
    ``arith`` task (``questions``), the variants ``reference`` and ``spec_sync`` and their
    comparison, and ``builds: {baseline, candidate}``. Returns its path."""
    doc = yaml.safe_load(CPU_CONFIG.read_text(encoding="utf-8"))
    doc["name"] = "tiny-ab"
    doc["variants"] = {k: doc["variants"][k] for k in ("reference", "spec_sync")}
    doc["tasks"] = {"arith": {**doc["tasks"]["arith"], "num_questions": questions}}
    doc["gates"].pop("calibration_questions", None)
    doc["comparisons"] = [c for c in doc["comparisons"] if c["candidate"] == "spec_sync"]
    doc["builds"] = {"baseline": baseline, "candidate": candidate}
    p = folder / "ab.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return p
