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


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` (retraining the tiny model, 10 to 20 minutes on 2 cores) run
    only when asked for: ``-m slow`` (or an expression naming ``slow`` positively) or
    ``EVALRUN_RUN_SLOW=1``. ``make test`` (CI) leaves them out."""
    import os

    expr = config.getoption("-m") or ""
    wanted = os.environ.get("EVALRUN_RUN_SLOW") == "1" or ("slow" in expr and "not slow" not in expr)
    if wanted:
        return
    skip = pytest.mark.skip(reason="slow (retrains the tiny model); run with -m slow or EVALRUN_RUN_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
