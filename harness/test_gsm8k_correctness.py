"""evalrun's GSM8K correctness test, for ``pytest --pyargs harness.test_gsm8k_correctness
--config-list-file=LIST [-k STEM]`` (see :mod:`harness.pytest_plugin`).

One test per config of the list: the config's variants run on a real vLLM server and
every gate must pass. A gate failure fails the test with the gate table; a config that
could not be run or judged (exit code 2) fails as well: what cannot be measured does
not pass.
"""

from __future__ import annotations

import pytest


def test_gsm8k_correctness(evalrun_config, evalrun_run):
    record, run_dir = evalrun_run(evalrun_config)
    from harness.pytest_plugin import gate_table

    code = record.exit_code
    if code == 0 and record.passed is True:
        return
    what = {1: "a gate failed", 2: "could not run or judge every gate"}.get(code, f"exit code {code}")
    if code == 0:
        what = "not every gate was judged"
    if record.status == "error" and record.error is not None:
        what = f"{record.error.describe()}; the traceback is in the record"
    pytest.fail(f"{evalrun_config.stem}: {what} (run record: {run_dir}/run.json)\n{gate_table(record)}",
                pytrace=False)
