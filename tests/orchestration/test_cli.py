"""harness.cli: arguments refused before anything runs."""

from __future__ import annotations

from harness.cli import main


def test_a_run_id_that_is_not_a_folder_name_is_refused(tmp_path, capsys):
    for bad in ("../outside", "a/b", "x" * 300):
        assert main(["--config", "models-cpu.txt", "--run-id", bad, "--results-dir", str(tmp_path)]) == 2
        assert "--run-id: key '--run-id'" in capsys.readouterr().err
        assert main(["merge", str(tmp_path), "--run-id", bad, "--results-dir", str(tmp_path)]) == 2
    assert list(tmp_path.iterdir()) == []

