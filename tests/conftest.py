"""Shared fixtures: where the GSM8K files are (../shared/data/gsm8k beside the repo)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_GSM8K = REPO.parent / "shared" / "data" / "gsm8k"


@pytest.fixture(scope="session")
def gsm8k_dir() -> Path:
    """The real GSM8K folder (test.jsonl, train.jsonl); skips when absent."""
    if not (SHARED_GSM8K / "test.jsonl").is_file():
        pytest.skip(f"GSM8K data not found at {SHARED_GSM8K}")
    return SHARED_GSM8K


def vllm_available() -> bool:
    """True when the engine imports in this interpreter (engine tests skip otherwise)."""
    try:
        import vllm  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken install counts as absent
        return False
    return True
