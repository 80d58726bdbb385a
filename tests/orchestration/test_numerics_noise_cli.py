"""A bad ``EVALRUN_NUMERICS_NOISE`` is refused before any run folder or server exists
(exit 2, the variable named); docs/numerics.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli.app import main
from harness.faults.noise import NOISE_ENV, NOISE_SEED_ENV

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("env", [{NOISE_ENV: "loud"}, {NOISE_ENV: "-0.5"}, {NOISE_ENV: "gpu", NOISE_SEED_ENV: "-1"}])
def test_bad_noise_setting_is_refused_before_the_run_folder(monkeypatch, tmp_path, capsys, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    code = main(["--config", str(REPO / "configs" / "tiny-qwen3next-mtp-cpu.yaml"), "--results-dir",
                 str(tmp_path / "results"), "--run-id", "bad-noise", "--no-baseline", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert next(iter(env)) in err or NOISE_SEED_ENV in err
    assert not (tmp_path / "results" / "bad-noise").exists()
