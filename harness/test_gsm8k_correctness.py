"""evalrun's GSM8K correctness test, for ``pytest --pyargs harness.test_gsm8k_correctness
--config-list-file=LIST [-k STEM]`` (see :mod:`harness.pytest_plugin`).

One test per config of the list: the config's variants run on a real vLLM server and
every gate must pass. A gate failure fails the test with the gate table; a config that
could not be run or judged (exit code 2) fails as well: what cannot be measured does
not pass. Declared expected failures (known engine bugs) map to pytest's own xfail: a
run that passed with an XFAIL gate is an xfailed test (``pytest.xfail`` with the
declared reasons); one that passed with only non-strict XPASS gates is marked
``xfail(strict=False)`` and passes, so pytest reports it XPASS; a strict XPASS failed
the run (exit code 1), so the test fails, as pytest's ``[XPASS(strict)]``. A config vLLM's
test skips on this platform (:mod:`harness.engine.platform_skips`) is skipped with vLLM's
reason before any server starts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from harness.records.run_record import RunRecord


# the JUnit classname vLLM's dashboards know (harness.pytest_plugin.VLLM_CLASSNAME), set with
# pytest's record_xml_attribute, which warns that it is experimental and not of xunit2
@pytest.mark.filterwarnings("ignore:record_xml_attribute")
def test_gsm8k_correctness(evalrun_config: Path, evalrun_run: Callable[[str | Path], tuple[RunRecord, Path]],
                           request: pytest.FixtureRequest, record_xml_attribute: Callable[[str, object], None]) -> None:
    from harness.pytest_plugin import VLLM_CLASSNAME, expected_reason, gate_table, platform_skip

    record_xml_attribute("classname", VLLM_CLASSNAME)
    why = platform_skip(evalrun_config, request.config)
    if why:  # vLLM's own skip, before any server starts, as vLLM's test
        pytest.skip(why)
    record, run_dir = evalrun_run(evalrun_config)

    code = record.exit_code
    if code == 0 and record.passed is True:
        why = expected_reason(record, "XFAIL")
        if why:
            pytest.xfail(f"{why} (run record: {run_dir}/run.json)")
        why = expected_reason(record, "XPASS")
        if why:  # the run passed: pytest reports a passing test marked xfail as XPASS
            request.node.add_marker(pytest.mark.xfail(reason=why, strict=False))
        return
    failures: dict[int | None, str] = {1: "a gate failed", 2: "could not run or judge every gate"}
    what = failures.get(code, f"exit code {code}")
    if code == 0:
        what = "not every gate was judged"
    if record.status == "error" and record.error is not None:
        what = f"{record.error.describe()}; the traceback is in the record"
    pytest.fail(f"{evalrun_config.stem}: {what} (run record: {run_dir}/run.json)\n{gate_table(record)}",
                pytrace=False)
