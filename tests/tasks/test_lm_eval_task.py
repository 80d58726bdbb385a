"""harness.tasks.lm_eval_task: task kind ``lm_eval`` with prompt-scoring tasks
(``multiple_choice``, ``loglikelihood``), against a FAKE ``/v1/completions`` (echo +
logprobs) in this process, with lm-eval's own task objects and the built-in model's
character-level tokenizer (one token per character, no BOS), so the expected
log-likelihoods are computed here from the text, without lm-eval: the fake gives token id
t the log-probability ``LP(t)`` and says it is greedy when ``t % 5 == 0``.

Also the gates: on such a task the output-match and acceptance gates are NOT RUN with
the reason (never passed, never failed as "no drafts"). And when lm-eval does not import,
its pipelines are not run, never a crash (that run uses the FAKE server,
tests/fake_vllm.py, and the synthetic task: only lm-eval's import is under test).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import lm_eval  # noqa: F401, TID253 - a base dependency of evalrun: its absence is a failure, not a skip
import pytest

from harness.analysis.gatekinds.accuracy_floor import AccuracyFloor
from harness.analysis.gatekinds.drafts_observed import DraftsObserved
from harness.analysis.gatekinds.max_acceptance_length_drop import MaxAcceptanceLengthDrop
from harness.analysis.gatekinds.max_accuracy_drop import MaxAccuracyDrop
from harness.analysis.gatekinds.min_acceptance_length import MinAcceptanceLength
from harness.analysis.gatekinds.min_output_match import MinOutputMatch
from harness.analysis.gates import evaluate_gates
from harness.analysis.measurements import Measurements
from harness.analysis.scoring import answer_agreement, output_match, score_task
from harness.config.schema import TaskSpec
from harness.records.measures import SpecDecodeCountersRecord, SpecDecodeRecord
from harness.records.run_record import load_run
from harness.tasks import task_for
from harness.tasks.base import TaskContext
from harness.tasks.gsm8k import DataUnavailableError
from harness.tasks.lm_eval_task import load_lm_eval_task, run_lm_eval_task, tokenizer_of
from tests.fake_run import FAKE, config

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

REPO = Path(__file__).resolve().parents[2]
TOKENIZER = str(REPO / "harness" / "models" / "data" / "tiny-qwen3next-mtp-arith")


def LP(t: int) -> float:
    return -0.1 - 0.5 * (t % 5)


def tok(ch: str) -> int:  # the built-in character tokenizer: tab 2, newline 3, ASCII 32.. from 4
    return {"\t": 2, "\n": 3}.get(ch, ord(ch) - 28)


def ll(text: str) -> float:
    return sum(LP(tok(c)) for c in text)


DOCS = [
    {"question": "What is 9 plus 6?", "choices": ["15", "14", "96"], "label": 0},
    {"question": "What is 2 plus 2?", "choices": ["5", "4", "22"], "label": 1},
    {"question": "What is 7 plus 1?", "choices": ["8", "71", "6"], "label": 0},
    {"question": "What is 3 plus 3?", "choices": ["33", "0", "6"], "label": 2},
    {"question": "What is 1 plus 0?", "choices": ["1", "10", "100"], "label": 0},
    {"question": "What is 5 minus 5?", "choices": ["0", "5", "55"], "label": 0},
]

MC_YAML = """\
task: evalrun_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: multiple_choice
test_split: test
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: choices
doc_to_target: label
target_delimiter: " "
metric_list:
  - {{metric: acc, aggregation: mean, higher_is_better: true}}
  - {{metric: acc_norm, aggregation: mean, higher_is_better: true}}
metadata: {{version: 1.0}}
"""

LL_YAML = """\
task: evalrun_ll
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: loglikelihood
test_split: test
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{choices[label]}}}}"
target_delimiter: " "
metric_list:
  - {{metric: acc, aggregation: mean, higher_is_better: true}}
metadata: {{version: 1.0}}
"""


class _Fake(BaseHTTPRequestHandler):
    bodies: list = []  # noqa: RUF012 - reset per test by the fixture

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Fake.bodies.append(body)
        prompts = body["prompt"]
        if prompts and isinstance(prompts[0], int):
            prompts = [prompts]
        choices = []
        for i, ids in enumerate(prompts):
            assert isinstance(ids, list) and all(isinstance(x, int) for x in ids), body
            gen = 4  # one generated token (max_tokens 1), dropped by lm-eval
            toks = list(ids) + [gen]
            lps = [None] + [LP(t) for t in toks[1:]]
            tops = [None] + [{"x": LP(t) if t % 5 == 0 else -0.1, str(t): LP(t)} for t in toks[1:]]
            choices.append({"index": i, "text": " ", "finish_reason": "length",
                            "logprobs": {"token_logprobs": lps, "top_logprobs": tops, "tokens": [], "text_offset": []}})
        out = json.dumps({"id": "x", "object": "text_completion", "model": "m", "choices": choices}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture()
def fake_url():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    _Fake.bodies = []
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def _task(tmp_path: Path, yaml_text: str, name: str):
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    (tmp_path / f"{name}.yaml").write_text(yaml_text.format(data=tmp_path / "docs.jsonl"))
    info, _, _ = load_lm_eval_task("mc", name, str(tmp_path), None)
    return info


def _run(info, url, variant="reference", tokenizer=TOKENIZER):
    return run_lm_eval_task(info, base_url=url, served_model="m", config="c", variant=variant, num_fewshot=0,
                            max_tokens=8, seed=1234, max_concurrency=2, timeout_s=30, tokenizer=tokenizer)


def test_multiple_choice_samples_match_loglikelihoods_computed_here(tmp_path, fake_url):
    info = _task(tmp_path, MC_YAML, "evalrun_mc")
    assert info.output_type == "multiple_choice" and info.prompt_only and info.num_docs == len(DOCS)
    samples, summary = _run(info, fake_url)
    assert summary["error"] is None, summary["error"]
    assert summary["pipelines"] == ["acc", "acc_norm"]
    assert len(samples) == len(DOCS)
    for d, (doc, s) in enumerate(zip(DOCS, samples)):
        lls = [ll(" " + c) for c in doc["choices"]]
        pick = max(range(len(lls)), key=lambda i: (lls[i], -i))
        pick_norm = max(range(len(lls)), key=lambda i: (lls[i] / len(doc["choices"][i]), -i))
        assert s.question_id == f"mc/test/{d}" and s.error is None
        assert s.answers == {"acc": doc["choices"][pick], "acc_norm": doc["choices"][pick_norm]}
        assert s.correct == {"acc": pick == doc["label"], "acc_norm": pick_norm == doc["label"]}
        assert s.completion == doc["choices"][pick]
        assert s.gold == doc["choices"][doc["label"]]
        assert s.token_ids is None and s.finish_reason is None  # nothing generated
    # lm-eval's own aggregate equals what evalrun scores from the mapped samples
    sc = score_task(samples, summary["pipelines"])
    assert summary["results"]["acc,none"] == pytest.approx(sc.accuracy["acc"].accuracy)
    assert summary["results"]["acc_norm,none"] == pytest.approx(sc.accuracy["acc_norm"].accuracy)
    # what lm-eval sent: token ids (exact context length), echo + logprobs, one token
    b = _Fake.bodies[0]
    assert b["echo"] is True and b["logprobs"] == 1 and b["max_tokens"] == 1
    assert "return_token_ids" not in b
    sent = {tuple(x["prompt"][0] if isinstance(x["prompt"][0], list) else x["prompt"]) for x in _Fake.bodies}
    want = "Question: What is 9 plus 6?\nAnswer: 14"
    assert tuple(tok(c) for c in want) in sent


def test_loglikelihood_task_acc_is_greedy(tmp_path, fake_url):
    info = _task(tmp_path, LL_YAML, "evalrun_ll")
    assert info.output_type == "loglikelihood"
    samples, summary = _run(info, fake_url)
    assert summary["error"] is None and summary["pipelines"] == ["acc"]
    for doc, s in zip(DOCS, samples):
        cont = doc["choices"][doc["label"]]  # lm-eval adds no target delimiter to a loglikelihood continuation
        greedy = all(tok(c) % 5 == 0 for c in cont)
        assert s.correct == {"acc": greedy}
        assert s.answers["acc"] == (cont if greedy else "[not greedy]")
        assert s.completion == cont and s.token_ids is None
    assert any(s.correct["acc"] for s in samples) and not all(s.correct["acc"] for s in samples)


def test_prompt_only_task_without_tokenizer_is_errors_never_wrong_answers(tmp_path, fake_url):
    info = _task(tmp_path, MC_YAML, "evalrun_mc")
    samples, summary = _run(info, fake_url, tokenizer=None)
    assert summary["error"] and "tokenizer" in summary["error"]
    assert all(s.error for s in samples) and not _Fake.bodies
    assert score_task(samples, ["acc"]).error_count == len(DOCS)


def test_output_match_and_acceptance_gates_not_run_on_prompt_only_task(tmp_path, fake_url):
    info = _task(tmp_path, MC_YAML, "evalrun_mc")
    a, summary = _run(info, fake_url, "reference")
    b, _ = _run(info, fake_url, "spec")

    m = Measurements()
    m.prompt_only["mc"] = info.prompt_only_reason()
    for v, s in (("reference", a), ("spec", b)):
        m.task_record(v, "mc").score = score_task(s, summary["pipelines"])
        m.task_record(v, "mc").samples = s
    zero = SpecDecodeRecord.from_counters(_zero_counters())
    m.task_record("spec", "mc").spec = zero  # the engine drafted nothing: prompt scoring only
    m.comparison_record("reference", "spec", "mc").match = output_match(a, b)
    m.comparison_record("reference", "spec", "mc").answers = answer_agreement(a, b, "acc")
    base = {"config": "c", "task": "mc"}
    gates = [
        DraftsObserved(id="d", variant="spec", **base),
        MinAcceptanceLength(id="l", variant="spec", limit=1.5, **base),
        MinOutputMatch(id="o", variant="spec", baseline="reference", limit=1.0, **base),
        MaxAcceptanceLengthDrop(id="x", variant="spec", baseline="reference", limit=0.1, **base),
        MaxAccuracyDrop(id="a", variant="spec", baseline="reference", limit=0.05, pipeline="acc", **base),
        AccuracyFloor(id="f", variant="spec", limit=0.0, pipeline="acc", accuracy_threshold=0.0,
                        tolerance=0.0, **base),
    ]
    res = {r.id: r for r in evaluate_gates(gates, m)}
    for gid in "dlox":
        assert res[gid].passed is None, res[gid]
        assert res[gid].detail.startswith("not run: lm-eval task evalrun_mc is multiple_choice"), res[gid].detail
    assert "chosen answers (acc) agree on 6/6" in res["o"].detail
    assert res["a"].passed is True and res["f"].passed is True
    # without the prompt-only mark, the same measurements would fail as "no drafts"
    m.prompt_only.clear()
    res = {r.id: r for r in evaluate_gates(gates, m)}
    assert res["d"].passed is False and res["o"].passed is False


def _zero_counters():
    return SpecDecodeCountersRecord(drafts=0.0, draft_tokens=0.0, accepted_tokens=0.0)


def test_a_group_is_refused_naming_its_tasks(tmp_path):
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    (tmp_path / "evalrun_mc.yaml").write_text(MC_YAML.format(data=tmp_path / "docs.jsonl"))
    (tmp_path / "grp.yaml").write_text("group: evalrun_grp\ntask: [evalrun_mc]\nmetadata: {version: 1.0}\n")
    with pytest.raises(DataUnavailableError, match="group or tag of 1 tasks .*evalrun_mc.*name one of them"):
        load_lm_eval_task("g", "evalrun_grp", str(tmp_path), None)


class _Session:
    """A stand-in engine session: ``measured`` runs the work and counts the calls."""

    model = "m"

    def __init__(self, url: str) -> None:
        self.base_url = url
        self.measured_calls = 0

    def measured(self, work):
        self.measured_calls += 1
        return "outcome", work()


def test_the_lm_eval_task_kind_runs_on_a_session_and_generates_no_text_when_it_scores_prompts(tmp_path, fake_url):
    info = _task(tmp_path, MC_YAML, "evalrun_mc")
    kind = task_for("lm_eval")
    pt = kind.prepare("mc", TaskSpec(kind="lm_eval", lm_eval_task="evalrun_mc",
                                     lm_eval_include_path=str(tmp_path), num_fewshot=0), None)
    assert pt.payload == info and pt.requests == ()
    assert kind.generates_text(pt) is False and kind.reruns_for_noise is False
    assert "multiple_choice" in kind.not_text_reason(pt)
    said: list[str] = []
    ctx = TaskContext(
        config="c", variant="reference", variant_id="c/reference", task="mc",
        spec=TaskSpec(kind="lm_eval", lm_eval_task="evalrun_mc", num_fewshot=0, max_tokens=8, seed=1234),
        per_request=False, max_concurrency=2, request_timeout=30, logprobs=None,
        server_argv=("vllm", "serve", "m", f"--tokenizer={TOKENIZER}"), model_ref="/not/a/model",
        raw_path=None, label="c/reference mc", log=said.append, warn=said.append, error=said.append,
        bar=lambda *a: None,
    )
    session = _Session(fake_url)
    tr = kind.run(session, ctx, pt)
    direct, summary = _run(info, fake_url)   # the same task run without the interface
    assert session.measured_calls == 1 and tr.outcome == "outcome"
    assert [s.correct for s in tr.samples] == [s.correct for s in direct] and len(tr.samples) == len(DOCS)
    assert tr.pipelines == ["acc", "acc_norm"] == summary["pipelines"]
    assert tr.lm_eval == {"task": info.to_json(), **summary}
    assert any("lm-eval task evalrun_mc" in x for x in said)
    # the runner sends while the server is up and judges after: lm-eval judged inside its
    # own loop, so send is the whole run (one measured call) and judge hands it back
    session2 = _Session(fake_url)
    sent = kind.send(session2, ctx, pt)
    assert session2.measured_calls == 1 and sent.judged is not None and sent.outcome == "outcome"
    assert sent.failed_requests == sum(1 for s in direct if s.error is not None)
    assert kind.judge(sent, ctx, pt) is sent.judged
    assert [s.correct for s in sent.judged.samples] == [s.correct for s in direct]
    # the tokenizer is the server's --tokenizer (either spelling), else the model
    assert tokenizer_of(["vllm", "serve", "m", "--tokenizer", "/t"], "m") == "/t"
    assert tokenizer_of(["vllm", "serve", "m"], "/models/m") == "/models/m"


# ----------------------------------------------------------------- lm-eval that does not import


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
