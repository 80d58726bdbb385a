"""lm-eval's task (harness/tasks/lm_eval_task.py) when lm-eval does not import: its pipelines
are not run, never a crash. The run uses the FAKE server (tests/fake_vllm.py) and the
synthetic task: only lm-eval's import is under test."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from harness.records.run_record import load_run
from tests.fake_run import FAKE, REPO, config


def test_lm_eval_that_does_not_import_is_not_run_never_a_crash(tmp_path):
    """A broken lm-eval (here: its import blocked) makes lm-eval's pipelines NOT RUN;
    evalrun's own pipelines are scored and the run ends normally."""
    cfg = config(tmp_path, gates="gates: {accuracy_pipeline: strict-match, accuracy_threshold: 0.1}\n")
    script = textwrap.dedent(f"""\
        import sys
        sys.modules["lm_eval"] = None          # `import lm_eval` raises ImportError
        from harness.cli import main
        sys.exit(main({["--config", str(cfg), "--python", str(FAKE), "--results-dir", str(tmp_path / "results"),
                        "--run-id", "r", "--quiet", "--no-baseline"]!r}))
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "Traceback" not in p.stderr, p.stderr
    rec = load_run(tmp_path / "results" / "r")
    assert rec.status == "completed" and p.returncode == rec.exit_code
    assert rec.provenance.lm_eval.pipelines == [] and "cannot build its gsm8k task" in rec.provenance.lm_eval.error
    t = rec.configs[0].variants["spec"].tasks["gsm8k"]
    assert "strict-match" not in t.accuracy and t.accuracy["flexible-numeric"] is not None
    reading = [g for g in rec.gates() if "strict-match" in g.detail]
    assert reading and all(g.passed is None for g in reading), [(g.id, g.passed, g.detail) for g in rec.gates()]
