"""evalrun's pytest plugin (entry point ``pytest11``): vLLM's GSM8K test workflow.

vLLM runs its GSM8K configs as ``pytest tests/evals/gsm8k/test_gsm8k_correctness.py
--config-list-file=configs/models-h200.txt -k <config stem>``. With evalrun installed,
the same command line works on evalrun's test module::

    pytest --pyargs harness.test_gsm8k_correctness \\
        --config-list-file=model_lists/models-h200.txt -k Nemotron-3-Super-120B-A12B-BF16 \\
        --junitxml=results/junit.xml

Each config of the list becomes one test item named as vLLM's current conftest
(``tests/evals/gsm8k/conftest.py``, as of December 2025, "Generalize gsm8k test args")
names it, by the bare config file stem:
``test_gsm8k_correctness[Nemotron-3-Super-120B-A12B-BF16]``, so ``-k``, node ids, JUnit
names and ``--deselect`` lines written for vLLM's test carry over. That conftest has no
``--tp-size`` any more (a config's parallelism is its ``server_args``); evalrun keeps
the option only to refuse it with a usage error saying so, because a silently ignored
``--tp-size 4`` in a migrated CI script would name runs that do not happen.
An item runs its config through the same runner as ``evalrun --config`` and
writes the run record as usual (``<results>/<run id>-<stem>/``); a failing gate fails
the test with the gate table as the message, and a config that could not be judged
fails too (fail closed).

The list is read as vLLM's conftest reads it (:mod:`harness.config.vllm_list`): a relative
path is looked for in the test's own folder (vLLM's ``tests/evals/gsm8k/`` seen from the
working directory, or ``--evalrun-vllm-test-dir``), then the working directory, so vLLM's
CI spelling ``--config-list-file=configs/<list>`` from vLLM's ``tests/`` collects what
vLLM's conftest collects; entries are taken beside the list only, a missing one is printed
as vLLM prints it and is not a test, and evalrun's own lists and configs are never a
substitute. Node ids are evalrun's (``.../harness/test_gsm8k_correctness.py::...``); vLLM's
(``evals/gsm8k/test_gsm8k_correctness.py::test_gsm8k_correctness[<stem>]``, with or
without ``tests/``) are mapped: a ``--deselect`` written for vLLM's test deselects the
same config here, and the JUnit ``classname`` is vLLM's (:data:`VLLM_CLASSNAME`).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from harness.config.vllm_list import VllmListRead
    from harness.records.run_record import RunRecord

#: The fixture each config is given to.
FIXTURE = "evalrun_config"


def _add_options(parser: pytest.Parser) -> None:
    """``--config-list-file`` and evalrun's run options; an option that a conftest
    already defines (vLLM's ``tests/evals/gsm8k/conftest.py`` defines
    ``--config-list-file`` too) is left as that conftest defined it."""
    g = parser.getgroup("evalrun", "evalrun (speculative-decoding accuracy gates on a vLLM server)")
    options = [
        ("--config-list-file", "LIST",
         "model list (models-*.txt) or one config YAML; one test per config, named by its stem"),
        ("--evalrun-results-dir", "DIR", "where run records are written (default: evalrun's results/)"),
        ("--evalrun-data-dir", "DIR",
         "GSM8K folder with test.jsonl and train.jsonl (default: $EVALRUN_DATA_DIR, else the hub)"),
        ("--evalrun-python", "PYTHON", "interpreter with vLLM installed, for the server command (default: this one)"),
        ("--evalrun-baseline-dir", "DIR", "folder of stored baselines to gate against (default: none)"),
        ("--evalrun-vllm-test-dir", "DIR",
         "the folder a relative --config-list-file is first looked for in, as vLLM's conftest looks in its "
         "own (default: vLLM's tests/evals/gsm8k seen from the working directory, else evalrun's root)"),
        ("--tp-size", "N", "refused: vLLM's GSM8K conftest removed it in December 2025; set "
                           "--tensor-parallel-size in the config's server_args"),
    ]
    from harness.config.types import DirPath, cli_type

    folder = cli_type(DirPath, "a folder")  # the value types of evalrun's own commands
    for name, metavar, text in options:
        try:
            g.addoption(name, default=None, metavar=metavar, help=text,
                        **({"type": folder} if metavar == "DIR" else {}))
        except ValueError:  # already defined by a conftest: both read it as a string
            continue
        if name == "--tp-size":
            TP_SIZE_OWNER["evalrun"] = True


@pytest.hookimpl(hookwrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser,  # noqa: ARG001 - pytest passes
                                  args: list[str]) -> Generator[None, None, None]:  # noqa: ARG001 - hook arguments by name
    """Add evalrun's options AFTER the initial conftests, so that a pytest session that
    also loads vLLM's own GSM8K conftest (which defines ``--config-list-file``) does not
    fail with a duplicate option: installing evalrun must not break vLLM's test suite."""
    yield
    _add_options(parser)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize :data:`FIXTURE` with the list's config paths, ids = file stems, the
    list read as vLLM's conftest reads it (:mod:`harness.config.vllm_list`: the test's
    own folder, then the working directory; entries beside the list only). vLLM's
    conftest prints what it looks at; so does this (``-s`` shows it). An entry missing
    beside its list is printed as vLLM prints it (``  ✗ Missing: <path>``), is not a test
    (as there) and is also a warning; it is never taken from anywhere else.

    Raises:
        pytest.UsageError: no list at the path vLLM's conftest looks at, or no config of
            it exists (vLLM's test would then have nothing to run): naming the paths looked
            at, and evalrun's own list of that name when there is one.
    """
    if FIXTURE not in metafunc.fixturenames:
        return
    lst = metafunc.config.getoption("--config-list-file")
    if not lst:
        raise pytest.UsageError(f"{metafunc.function.__name__}: pass --config-list-file=LIST (a models-*.txt)")
    raw_tp = metafunc.config.getoption("--tp-size")
    if raw_tp is not None and TP_SIZE_OWNER.get("evalrun"):
        raise pytest.UsageError(TP_SIZE_REMOVED.format(value=raw_tp))
    read = read_list(metafunc.config)
    print("\n".join(read.log))
    for lineno, path in read.missing:
        warnings.warn(pytest.PytestCollectionWarning(
            f"--config-list-file={lst}: {read.list_path}:{lineno}: {path} does not exist beside the list; "
            "as in vLLM's conftest it is not a test (and no other file of that name is used)"), stacklevel=1)
    if not read.configs:
        raise pytest.UsageError(no_test_message(lst, read))
    metafunc.parametrize(FIXTURE, read.configs, ids=[test_id(p) for p in read.configs])


def read_list(config: pytest.Config) -> VllmListRead:
    """``--config-list-file`` read as vLLM's conftest reads it, "the test's own folder"
    being ``--evalrun-vllm-test-dir``, else vLLM's GSM8K test folder seen from the working
    directory (:func:`harness.config.vllm_list.vllm_test_dir`), else evalrun's project root."""
    from harness.config.model_list import PROJECT_ROOT
    from harness.config.vllm_list import read_as_vllm, vllm_test_dir

    cwd = Path.cwd()
    given = config.getoption("--evalrun-vllm-test-dir")
    test_dir = Path(given) if given else (vllm_test_dir(cwd) or PROJECT_ROOT)
    return read_as_vllm(str(config.getoption("--config-list-file")), test_dir, cwd)


def no_test_message(lst: str, read: VllmListRead) -> str:
    """The usage error for a list that gives no test, naming what vLLM's conftest looked
    at and evalrun's own list of that name if there is one (never used in its place)."""
    from harness.config.model_list import MODEL_LISTS_DIR

    what = (f"cannot be read ({read.unreadable})" if read.unreadable
            else "names no config that exists beside it" if read.found else "not found")
    own = MODEL_LISTS_DIR / Path(lst).name
    hint = (f"; evalrun's own list of that name is {own}: pass that path to run it" if own.is_file()
            and own.resolve() != read.list_path.resolve() else "")
    return (f"--config-list-file={lst}: {what}, read as vLLM's GSM8K conftest reads it (the test's own "
            "folder, then the working directory; entries beside the list):\n  "
            + "\n  ".join(read.log) + hint)


#: vLLM's node id of the item for config ``{stem}``, as vLLM's CI writes it from vLLM's
#: ``tests/`` (``--deselect evals/gsm8k/test_gsm8k_correctness.py::test_gsm8k_correctness[<stem>]``)
#: and from the repository root; its JUnit classname is :data:`VLLM_CLASSNAME`.
VLLM_NODE_IDS = ("evals/gsm8k/test_gsm8k_correctness.py::test_gsm8k_correctness[{stem}]",
                 "tests/evals/gsm8k/test_gsm8k_correctness.py::test_gsm8k_correctness[{stem}]")
#: The JUnit ``classname`` of vLLM's items run from vLLM's ``tests/`` (pytest's
#: ``mangle_test_address`` of :data:`VLLM_NODE_IDS`' first form).
VLLM_CLASSNAME = "evals.gsm8k.test_gsm8k_correctness"


def vllm_node_ids(item: pytest.Item) -> list[str]:
    """vLLM's node ids of an evalrun item (:data:`VLLM_NODE_IDS`), or [] for another item."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or FIXTURE not in callspec.params:
        return []
    return [f.format(stem=callspec.id) for f in VLLM_NODE_IDS]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--deselect`` lines written for vLLM's test deselect evalrun's item of that config:
    a prefix of one of its vLLM node ids (:func:`vllm_node_ids`) deselects it, as pytest
    deselects by node id prefix (its own ``--deselect`` still applies to evalrun's ids)."""
    prefixes = tuple(config.getoption("deselect") or [])
    if not prefixes:
        return
    gone = [it for it in items if any(v.startswith(prefixes) for v in vllm_node_ids(it))]
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = [it for it in items if it not in gone]


#: The usage error for ``--tp-size``: vLLM's conftest no longer has it.
TP_SIZE_REMOVED = (
    "--tp-size={value}: vLLM's GSM8K conftest removed --tp-size in December 2025 "
    "(\"Generalize gsm8k test args\"), and evalrun follows that conftest: tests are named by the "
    "bare config stem (test_gsm8k_correctness[<stem>]) and each server runs with the "
    "--tensor-parallel-size written in its config's server_args. Drop --tp-size (and any "
    "-tp<N> suffix in -k, --deselect or node ids); to run at another tensor parallel size, "
    "write a config with that --tensor-parallel-size."
)
#: Whether evalrun registered ``--tp-size`` itself (an older conftest of vLLM loaded in the
#: same session may define it, with a default; then it is that conftest's option).
TP_SIZE_OWNER: dict[str, bool] = {}


def test_id(path: Path) -> str:
    """The test id vLLM's current conftest gives a config: its bare file stem."""
    return path.stem


def gate_table(record: RunRecord) -> str:
    """The gate verdicts of a run record as a plain-text table (one line per gate:
    verdict, gate id, observed, limit, detail), failed and not-run gates first, then
    the config and variant errors."""
    from harness.report.summary import listing_order

    rows = sorted((g for c in record.configs for g in c.gates), key=listing_order)

    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.4g}" if isinstance(x, float) else str(x)

    lines = [f"{'verdict':8} {'gate':60} {'observed':>9} {'limit':>8}  detail"]
    for g in rows:
        xf = f" [{g.expected_failure.describe()}]" if g.expected_failure is not None else ""
        lines.append(f"{g.verdict:8} {g.id:60} {num(g.observed):>9} {num(g.limit):>8}  {g.detail}{xf}")
    errs = [f"{c.name}: {c.error}" for c in record.configs if c.error]
    errs += [f"{c.name}/{v}: {vr.error}" for c in record.configs for v, vr in c.variants.items() if vr.error]
    return "\n".join(lines + [f"error: {e}" for e in errs])


def expected_reason(record: RunRecord, verdict: str) -> str:
    """The declared reasons of the run's gates with ``verdict`` (``XFAIL`` / ``XPASS``),
    each once, with the gates: ``<reason> (<gate id>, ...)``; empty when there is none."""
    by: dict[str, list[str]] = {}
    for g in record.gates():
        if g.verdict == verdict and g.expected_failure is not None:
            by.setdefault(g.expected_failure.reason, []).append(g.id)
    return "; ".join(f"{verdict} {why} ({', '.join(ids)})" for why, ids in by.items())


#: The platform of each server interpreter, asked once per session (:func:`platform_skip`).
PLATFORMS: dict[str, object] = {}


def platform_skip(path: Path, config: pytest.Config) -> str | None:
    """vLLM's reason to skip the config at ``path`` on the platform the servers' vLLM
    detects (:mod:`harness.engine.platform_skips`), or None. The platform is asked only
    for a config one of vLLM's skips concerns, once per interpreter.

    Raises:
        pytest.fail.Exception: a skip concerns the config and the platform cannot be
            known (fail closed: neither run nor skip on a guess).
    """
    from harness.config.loader import load_config
    from harness.engine.platform_skips import PlatformUnknown, applicable_rules, probe_platform, skip_reason

    cfg = load_config(path)
    if not applicable_rules(cfg.model, path.name):
        return None
    python = config.getoption("--evalrun-python") or sys.executable
    if python not in PLATFORMS:
        try:
            PLATFORMS[python] = probe_platform(python)
        except PlatformUnknown as e:
            PLATFORMS[python] = e
    got = PLATFORMS[python]
    if isinstance(got, PlatformUnknown):
        pytest.fail(f"{path.stem}: vLLM's test skips this config on some platforms, and the platform "
                    f"is unknown: {got}", pytrace=False)
    from harness.engine.platform_skips import PlatformFacts

    assert isinstance(got, PlatformFacts)
    return skip_reason(cfg.model, path.name, got)


def run_config(path: Path, config: pytest.Config) -> tuple[RunRecord, Path]:
    """Run one config through the front door (:func:`harness.api.run`) with the plugin's
    options; pytest keeps its own signal handling (``stop_signals=False``).

    Returns:
        (the run record, the run folder).
    """
    from harness import api
    from harness.config.loader import load_config
    from harness.config.model_list import PROJECT_ROOT, with_list_budget
    from harness.config.plan import build_plan
    from harness.config.schema import ConfigError
    from harness.records.provenance import new_run_id

    opt = config.getoption
    list_path = read_list(config).list_path.resolve()
    try:  # the list's own budget directive, as evalrun --config applies it
        [cfg] = with_list_budget([load_config(path)], list_path)
    except ConfigError as e:
        pytest.fail(f"{path.stem}: {e}", pytrace=False)
    plan = build_plan([cfg], python=opt("--evalrun-python"), list_path=str(list_path))
    return api.run(
        plan,
        results_dir=Path(opt("--evalrun-results-dir") or PROJECT_ROOT / "results"),
        data_dir=Path(opt("--evalrun-data-dir")) if opt("--evalrun-data-dir") else None,
        run_id=f"{new_run_id()}-{path.stem}",
        argv=["pytest", f"--config-list-file={opt('--config-list-file')}", "-k", path.stem],
        baseline_dir=Path(opt("--evalrun-baseline-dir")) if opt("--evalrun-baseline-dir") else None,
        stop_signals=False,
    )


@pytest.fixture
def evalrun_run(request: pytest.FixtureRequest) -> Callable[[str | Path], tuple[RunRecord, Path]]:
    """A callable ``(config path) -> (record, run folder)`` bound to this session's options."""
    return lambda path: run_config(Path(path), request.config)
