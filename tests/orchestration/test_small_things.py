"""Small things users noticed: nearest config names, --dry-run
--variant, commands that paste into a shell, integer counts, partial baselines,
diff by run id, skip reasons."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import harness.config.model_list as model_list
from harness.records.baselines import write_baselines
from harness.analysis.gates import evaluate_gates
from harness.analysis.measurements import Measurements
from harness.cli import main
from harness.config.loader import load_config
from harness.config.model_list import nearest_names, read_model_list, resolve_list_path
from harness.config.schema import ConfigError
from harness.config.plan import build_plan
from harness.records.measures import SpecDecodeCountersRecord, SpecDecodeRecord
from harness.records.samples import Sample, write_jsonl
from harness.report.diff_sides import DiffError, resolve_side
from harness.report.summary import render_markdown
from tests.record_factory import typed

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_dirs(tmp_path, monkeypatch):
    configs, lists = tmp_path / "configs", tmp_path / "lists"
    configs.mkdir()
    lists.mkdir()
    for n in ("Big-Model-120B-A12B-BF16-MTP.yaml", "Big-Model-30B-A3B-BF16-ngram.yaml", "Other-7B.yaml"):
        (configs / n).write_text("model_name: a\naccuracy_threshold: 0.5\n")
    (lists / "models-gpu.txt").write_text("Other-7B.yaml\n")
    monkeypatch.setattr(model_list, "CONFIGS_DIR", configs)
    monkeypatch.setattr(model_list, "MODEL_LISTS_DIR", lists)
    return configs, lists


@pytest.mark.usefixtures("fake_dirs")
def test_config_not_found_lists_the_nearest_names():
    with pytest.raises(ConfigError) as e:
        resolve_list_path("Big-Model-120B-A12B-BF16")
    msg = str(e.value)
    assert "nearest names: Big-Model-120B-A12B-BF16-MTP.yaml" in msg      # the -MTP file first
    with pytest.raises(ConfigError, match="nearest names: models-gpu.txt"):
        resolve_list_path("models-gpuu.txt")
    # a name without suffix resolves to the .yaml / .txt of that name
    assert resolve_list_path("Other-7B").name == "Other-7B.yaml"
    assert resolve_list_path("models-gpu").name == "models-gpu.txt"


def test_missing_list_entry_lists_the_nearest_names(fake_dirs):
    _, lists = fake_dirs
    (lists / "l.txt").write_text("# comment\nBig-Model-30B-A3B-BF16.yaml\n")
    with pytest.raises(ConfigError) as e:
        read_model_list(lists / "l.txt")
    assert ":2: 'Big-Model-30B-A3B-BF16.yaml'" in str(e.value)
    assert "nearest names: Big-Model-30B-A3B-BF16-ngram.yaml" in str(e.value)


def test_nearest_names_generic():
    names = ["Nemotron-3-Super-120B-A12B-BF16-MTP.yaml", "Qwen3-Next-80B-A3B-Instruct-MTP.yaml"]
    assert nearest_names("Nemotron-3-Super-120B-A12B-BF16", names)[0] == names[0]
    assert nearest_names("qwen3-next-80b-a3b-instruct", names)[0] == names[1]
    assert nearest_names("zzz", names) == []


def test_dry_run_variant_lists_only_the_chosen_variants(capsys):
    assert main(["--config", "models-h200.txt", "--dry-run", "--variant", "reference"]) == 0
    out = capsys.readouterr().out
    assert "variant reference:" in out and "variant spec_sync:" not in out and "variant spec_async:" not in out
    assert "variants left out (--variant): spec_sync, spec_async" in out
    assert "--speculative-config" not in out.split("variants left out")[0]
    assert main(["--config", "models-h200.txt", "--dry-run", "--json", "--variant", "spec_async"]) == 0
    plan = json.loads(capsys.readouterr().out)
    for c in plan:
        assert [v["name"] for v in c["variants"]] == ["spec_async"]
        assert {g["variant"] for g in c["gates"]} == {"spec_async"}
        assert all(g["baseline"] in (None, "spec_async") for g in c["gates"])


def test_dry_run_command_pastes_into_a_shell(tmp_path, capsys):
    cfg = tmp_path / "q.yaml"
    cfg.write_text(textwrap.dedent("""\
        model_name: "org/my model"
        accuracy_threshold: 0.5
        server_args: >-
          --served-model-name "name with spaces" --chat-template '{{ x }}'
          --speculative-config '{"method":"mtp","num_speculative_tokens":2}'
        env: {A_VAR: "two words"}
        """))
    assert main(["--config", str(cfg), "--dry-run", "--python", "/usr/bin/python3"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "variant spec_sync:" in x)
    cmd = out.splitlines()[out.splitlines().index(line) + 1].split("command: ", 1)[1]
    words = shlex.split(cmd)
    env = [w for w in words[:5] if "=" in w and not w.startswith("-")]
    argv = words[len(env):]
    # sorted assignments: the config's, vLLM's test's start-up timeout and process start
    # method (vLLM form), and evalrun's dev endpoint
    assert env == ["A_VAR=two words", "VLLM_ENGINE_READY_TIMEOUT_S=1200", "VLLM_SERVER_DEV_MODE=1",
                   "VLLM_WORKER_MULTIPROC_METHOD=spawn"]
    assert argv[:4] == ["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model"]
    assert argv[4] == "org/my model"
    assert argv[argv.index("--port") + 1] == "8000"               # filled, not "{port}"
    assert argv[argv.index("--served-model-name") + 1] == "name with spaces"
    assert argv[argv.index("--chat-template") + 1] == "{{ x }}"
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {"method": "mtp", "num_speculative_tokens": 2}


def test_counts_print_as_integers(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("model: m\nvariants:\n  spec: {speculative_config: {method: mtp, num_speculative_tokens: 2}}\n"
                 "tasks:\n  t: {kind: synthetic}\n")
    cp = build_plan([load_config(p)]).configs[0]
    m = Measurements()
    m.task_record("spec", "t").spec = SpecDecodeRecord.from_counters(
        SpecDecodeCountersRecord(935.0, 1870.0, 900.0, (500.0, 400.0)))
    res = [g for g in evaluate_gates(cp.gates, m) if g.kind == "drafts_observed"][0]
    assert res.observed == 935 and isinstance(res.observed, int)
    rec = typed({"run_id": "r", "passed": True, "exit_code": 0, "status": "completed",
                 "configs": [{"name": "c", "variants": {}, "comparisons": [], "gates": [res.model_dump(mode="json")]}]})
    assert rec.configs[0].gates[0].observed == 935 and isinstance(rec.configs[0].gates[0].observed, int)
    md = render_markdown(rec)
    assert "| 935 |" in md and "935.0000" not in md


def _sample(qid, variant="v", task="t"):
    return Sample("c", variant, task, qid, "h" + qid, "5", completion="#### 5", token_ids=(1, 2),
                  finish_reason="stop", answers={"strict-numeric": "5", "flexible-numeric": "5"},
                  correct={"strict-numeric": True, "flexible-numeric": True})


def test_update_baseline_writes_what_ran_and_names_what_was_left_out(tmp_path):
    run_dir = tmp_path / "run"
    write_jsonl(run_dir / "samples/c/v/t.jsonl", [_sample("q0"), _sample("q1")])
    g_pass = {"id": "c/v/t/max_error_rate", "kind": "max_error_rate", "variant": "v", "task": "t", "passed": True,
              "op": "<="}
    g_nr = {"id": "c/v/extra/max_error_rate", "kind": "max_error_rate", "variant": "v", "task": "extra",
            "passed": None, "op": "<=", "detail": "not run: data not available (optional task)"}
    raw = {"run_id": "r1", "configs": [{
        "name": "c", "gates": [g_pass, g_nr], "comparisons": [],
        "variants": {"v": {"tasks": {"t": {"samples": "samples/c/v/t.jsonl", "num_requests": 2}}}},
    }]}
    rec = typed(raw)
    [(name, path, msg)] = write_baselines(rec, run_dir, tmp_path / "b")
    assert path == tmp_path / "b" / "c.json" and path.exists()
    doc = json.loads(path.read_text())
    assert sorted(doc["variants"]["v"]["tasks"]) == ["t"]
    assert sorted(doc["variants"]["v"]["tasks"]["t"]["questions"]) == ["q0", "q1"]
    assert "left out" in msg and "v/extra" in msg and "data not available (optional task)" in msg
    # a failed gate, or a variant whose server failed, still writes nothing
    raw["configs"][0]["gates"][0]["passed"] = False
    assert write_baselines(typed(raw), run_dir, tmp_path / "b2")[0][1] is None
    raw["configs"][0]["gates"][0]["passed"] = True
    raw["configs"][0]["variants"]["v"]["error"] = "server failed to start"
    [(_, p2, m2)] = write_baselines(typed(raw), run_dir, tmp_path / "b3")
    assert p2 is None and "server failed to start" in m2


def test_diff_accepts_run_ids(tmp_path):
    res = tmp_path / "results"
    (res / "20261130-1200-a").mkdir(parents=True)
    (res / "20261130-1200-a" / "run.json").write_text("{}")
    assert resolve_side("20261130-1200-a", res) == res / "20261130-1200-a"
    assert resolve_side(res / "20261130-1200-a") == res / "20261130-1200-a"
    with pytest.raises(DiffError, match="nearest run ids: 20261130-1200-a"):
        resolve_side("20261130-1200-b", res)


def test_skip_reasons_are_shown(tmp_path):
    t = tmp_path / "test_x.py"
    t.write_text("import pytest\n\n@pytest.mark.skip(reason='needs the moon')\ndef test_a():\n    pass\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"),
                          "--rootdir", str(tmp_path),
                          str(t), "-p", "no:cacheprovider"], capture_output=True, text=True, cwd=tmp_path).stdout
    assert "SKIPPED [1]" in out and "needs the moon" in out
