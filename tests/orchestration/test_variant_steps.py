"""A variant's steps (harness/run/variant_steps.py, its servers harness/run/serving.py) where
the runner's sequence does not reach
them in tests/orchestration/test_runner.py: a rerun for noise whose server does not start
again. The FAKE server (tests/fake_vllm.py) stands in for the engine because a real one
cannot be made to start once and then refuse to start a second time; the rerun's session
alone is given the fake's ``exit_on_start`` mode.
"""

from __future__ import annotations

import pytest

import harness.run.serving as serving

from .test_runner import config, run_cli, starts

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)


def test_a_rerun_whose_server_does_not_start_leaves_the_rerun_missing_and_says_why(tmp_path, monkeypatch):
    real = serving.make_session
    names: list[str] = []

    def session(run, vp, name, argv, env, log_path, speculative=None):
        names.append(name)
        if name.endswith("(rerun)"):
            env = {**env, "FAKE_MODE": "exit_on_start"}
        return real(run, vp, name, argv, env, log_path, speculative)

    monkeypatch.setattr(serving, "make_session", session)
    cfg, log = config(tmp_path, "corrupt", "noise_runs: 2, noise_runs_when: unexplained, near_tie_nats: null")
    code, rec = run_cli(tmp_path, cfg)
    assert code == 1  # the corrupt candidate still fails its gates: the missing rerun hides nothing
    assert names == ["fake/reference", "fake/spec", "fake/reference (rerun)"]  # one session per server start
    c = rec["configs"][0]
    ref = c["variants"]["reference"]
    assert "rerun for noise could not run" in ref["error"]
    assert ref["tasks"]["gsm8k"]["rerun"] is None and ref["tasks"]["gsm8k"]["num_requests"] == 6
    assert "could not be started again" in c["comparisons"][0]["rerun_reason"]
    assert starts(log) == {"reference": 1, "spec": 1}  # the rerun's server exited before serving
    assert (tmp_path / "results" / "r" / "logs" / "fake" / "reference.rerun.log").is_file()
