"""Start-up checks (``startup_rpc_checks``) in a run on the FAKE server (tests/fake_vllm.py
answers ``POST /collective_rpc`` in dev mode as vLLM does): a worker's message fails the
gate, every worker None passes it, and a worker extension the servers' interpreter cannot
import starts no server and leaves the gate NOT RUN with the reason. The fake stands in for
a worker extension whose checks fail on demand (a real one needs EPLB on GPUs)."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.fake_run import run_cli

pytestmark = pytest.mark.integration  # the fake server (tests/README.md)


def cfg(tmp_path, extension: str) -> object:
    p = tmp_path / "rpc.yaml"
    p.write_text(textwrap.dedent(f"""\
        model: fake-model
        false_alarm_budget: null  # a handful of questions: no paired test reaches a share of the budget
        startup_max_wait_seconds: 30
        server_args: --worker-extension-cls {extension}
        startup_rpc_checks: [check_slots]
        variants:
          good: {{env: {{FAKE_RPC_RESULTS: '[null, null]'}}}}
          bad: {{env: {{FAKE_RPC_RESULTS: '[null, "3 redundant expert slots differ from their source"]'}}}}
        tasks:
          arith: {{kind: synthetic, num_questions: 2, num_fewshot: 1, max_tokens: 8}}
        """))
    return p


def test_checks_are_called_once_ready_and_judged(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the servers start here, so the extension's module is found here
    (tmp_path / "rpc_ext.py").write_text("class Ext:\n    def check_slots(self):\n        return None\n")
    code = run_cli(tmp_path, cfg(tmp_path, "rpc_ext.Ext"))
    rec = json.loads((tmp_path / "results" / "r" / "run.json").read_text())
    c = rec["configs"][0]
    [good] = c["variants"]["good"]["startup_checks"]
    assert good["verdict"] == "passed" and good["results"] == [None, None]
    msg = "3 redundant expert slots differ from their source"
    assert c["variants"]["bad"]["startup_checks"][0]["results"] == [None, msg]
    gates = {g["id"]: g for g in c["gates"]}
    assert gates["rpc/good/startup_rpc_check"]["passed"] is True
    bad = gates["rpc/bad/startup_rpc_check"]
    assert bad["passed"] is False and "worker 1: 3 redundant expert slots" in bad["detail"]
    assert rec["passed"] is False and code == 1


def test_a_missing_extension_starts_no_server_and_is_not_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = run_cli(tmp_path, cfg(tmp_path, "no_such_pkg.checks.Ext"))
    run_dir = tmp_path / "results" / "r"
    rec = json.loads((run_dir / "run.json").read_text())
    c = rec["configs"][0]
    for v in ("good", "bad"):
        vr = c["variants"][v]
        assert vr["server"]["status"] == "not_started" and "no_such_pkg.checks" in vr["error"]
        assert [o["verdict"] for o in vr["startup_checks"]] == ["not_run"]
    assert not list((run_dir / "logs").rglob("*.log"))  # no server was started
    assert c["gates"] and all(g["passed"] is None and "not installed" in g["detail"] for g in c["gates"])
    assert rec["passed"] is None and code == 0  # never a pass; as a not-applicable variant (INCOMPLETE)
