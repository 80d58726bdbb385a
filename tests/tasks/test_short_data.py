"""Less data than asked fails closed: a test file cut short is refused
before any server starts, naming the file and both counts, unless the config asks for
"up to N"; the dry run shows what the data holds. The FAKE server stands in for the
engine where a run gets that far."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from harness.cli import main
from harness.config.schema import TaskSpec
from harness.tasks import ShortDataError, prepare_task
from harness.tasks.synthetic import DEFAULT_NUM_TEST

from ..conftest import SHARED_GSM8K
from ..orchestration.test_runner_fake_server import FAKE

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)


@pytest.fixture()
def short_dir(tmp_path: Path) -> Path:
    """A GSM8K folder whose test.jsonl holds 20 questions (a download cut short)."""
    if not (SHARED_GSM8K / "test.jsonl").is_file():
        pytest.skip(f"GSM8K data not found at {SHARED_GSM8K}")
    d = tmp_path / "gsm8k"
    d.mkdir()
    lines = (SHARED_GSM8K / "test.jsonl").read_text(encoding="utf-8").splitlines()[:20]
    (d / "test.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return d


def cfg(tmp_path: Path, extra: str = "") -> Path:
    p = tmp_path / "short.yaml"
    p.write_text(textwrap.dedent(f"""\
        model: fake-model
        startup_max_wait_seconds: 30
        variants:
          reference: {{}}
        tasks:
          gsm8k: {{kind: gsm8k, num_questions: 1319, num_fewshot: 0, max_tokens: 8{extra}}}
        """))
    return p


def run(tmp_path: Path, config: Path, data: Path) -> int:
    return main(["--config", str(config), "--python", str(FAKE), "--data-dir", str(data),
                 "--results-dir", str(tmp_path / "results"), "--run-id", "r", "--quiet"])


def test_short_data_is_refused_before_any_server_naming_file_and_counts(tmp_path, short_dir, capsys):
    code = run(tmp_path, cfg(tmp_path), short_dir)
    assert code == 2
    err = capsys.readouterr().err.replace("\n", "")
    assert f"{short_dir / 'test.jsonl'} holds 20 questions" in err and "num_questions: 1319" in err
    run_dir = tmp_path / "results" / "r"
    assert not (run_dir / "logs").exists()                 # no server was started
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["status"] == "incomplete" and rec["exit_code"] == 2
    assert "holds 20 questions" in rec["configs"][0]["error"]
    assert all(g["passed"] is None for g in rec["configs"][0]["gates"])


def test_up_to_n_runs_the_questions_there_are(tmp_path, short_dir):
    run(tmp_path, cfg(tmp_path, ", num_questions_up_to: true"), short_dir)
    rec = json.loads((tmp_path / "results" / "r" / "run.json").read_text())
    assert rec["configs"][0]["variants"]["reference"]["tasks"]["gsm8k"]["num_requests"] == 20
    assert rec["provenance"]["datasets"]["short/gsm8k"]["num_requests"] == 20


def test_the_dry_run_shows_the_questions_available_and_refuses(tmp_path, short_dir, capsys):
    code = main(["--config", str(cfg(tmp_path)), "--dry-run", "--data-dir", str(short_dir)])
    out = capsys.readouterr().out
    assert code == 2
    assert f"available: 20 in {short_dir / 'test.jsonl'} (asks 20) -- REFUSED" in out
    code = main(
        ["--config", str(cfg(tmp_path, ", num_questions_up_to: true")), "--dry-run", "--data-dir", str(short_dir)]
    )
    out = capsys.readouterr().out
    assert code == 0 and "available: 20 in" in out and "REFUSED" not in out
    code = main(["--config", str(cfg(tmp_path)), "--dry-run", "--json", "--data-dir", str(short_dir)])
    data = json.loads(capsys.readouterr().out)[0]["data"]["short/gsm8k"]
    assert (data["asked"], data["available"]) == (1319, 20) and "holds 20 questions" in data["refused"]


def test_a_synthetic_task_asking_more_than_it_has_is_refused():
    with pytest.raises(ShortDataError) as e:
        prepare_task("t", TaskSpec(kind="synthetic", num_questions=DEFAULT_NUM_TEST + 1, num_fewshot=1), None)
    assert f"holds {DEFAULT_NUM_TEST} questions" in str(e.value) and f"num_questions: {DEFAULT_NUM_TEST + 1}" in str(
        e.value
    )
    pt = prepare_task(
        "t",
        TaskSpec(kind="synthetic", num_questions=DEFAULT_NUM_TEST + 1, num_fewshot=1, num_questions_up_to=True),
        None,
    )
    assert len(pt.requests) == DEFAULT_NUM_TEST
