"""vLLM's real GSM8K configs and lists (tests/data/vllm_gsm8k/, sources in its README),
planned as dry runs and compared with what vLLM's own test would start. No engine.

What vLLM's test does, as read on vLLM's main branch (``tests/evals/gsm8k/``):
``test_gsm8k_correctness.py`` reads each YAML with ``yaml.safe_load`` as a plain dict,
``shlex.split``s ``server_args``, appends ``--trust-remote-code
--disable-uvicorn-access-log``, sets ``env["VLLM_ENGINE_READY_TIMEOUT_S"] =
str(int(startup_max_wait_seconds))`` (default 1200) over the config's ``env``, and starts
``RemoteOpenAIServer(model_name, server_args, env_dict=..., max_wait_seconds=...)``,
which runs ``vllm serve MODEL *server_args --port P --seed 0`` with
``VLLM_WORKER_MULTIPROC_METHOD=spawn`` under the config's ``env``
(``tests/utils.py``); ``conftest.py`` names each test ``<config stem>-tp<N>``.
:func:`vllm_test_command` below is that, written out independently of evalrun's code.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.config.loader import load_config
from harness.config.model_list import load_model_list
from harness.config.plan import CPU_ASYNC_ENV, build_plan
from harness.config.schema import ConfigError
from harness.config.vllm_parser import scan, snapshot_table
from harness.tasks import prepare_task
from harness.tasks.gsm8k import GsmItem, build_requests

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_gsm8k"
REAL = DATA / "configs"
GEN = DATA / "generated"
REPO = Path(__file__).resolve().parents[2]
PY = "/usr/bin/python3"
PORT = "{port}"
#: `vllm serve`, as RemoteOpenAIServer starts it, run as the console script's entry point
SERVER = [PY, "-m", "vllm.entrypoints.cli.main", "serve"]


def vllm_test_command(path: Path) -> tuple[list[str], dict[str, str]]:
    """(argv, env added) of the server vLLM's GSM8K test starts for the config at ``path``
    (port left as ``{port}``)."""
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    args = shlex.split(cfg.get("server_args", "")) if cfg.get("server_args") else []
    args += ["--trust-remote-code", "--disable-uvicorn-access-log"]
    wait = cfg.get("startup_max_wait_seconds", 1200)
    env = {"VLLM_WORKER_MULTIPROC_METHOD": "spawn", **dict(cfg.get("env") or {}),
           "VLLM_ENGINE_READY_TIMEOUT_S": str(int(wait))}
    return ["vllm", "serve", cfg["model_name"], *args, "--port", PORT, "--seed", "0"], env


def plan_of(path: Path):
    return build_plan([load_config(path)], python=PY).configs[0]


def variants(cp) -> dict:
    return {v.name: v for v in cp.variants}


REAL_CONFIGS = sorted(REAL.glob("*.yaml"))
REAL_LISTS = sorted(REAL.glob("*.txt"))
NO_SPEC = [p for p in REAL_CONFIGS if "speculative" not in p.read_text()]
WITH_SPEC = [p for p in REAL_CONFIGS if "speculative" in p.read_text()]


# ------------------------------------------------------------------ commands, token by token


@pytest.mark.parametrize("path", NO_SPEC, ids=lambda p: p.stem)
def test_config_without_drafter_runs_vllms_command(path):
    cp = plan_of(path)
    assert list(variants(cp)) == ["reference"]
    [ref] = cp.variants
    vargv, venv = vllm_test_command(path)
    # vLLM's `vllm serve MODEL ...` token for token; evalrun adds --host 127.0.0.1 before
    # the port (loopback only)
    model, rest = vargv[2], vargv[3:]
    i = rest.index("--port")
    assert list(ref.argv) == SERVER + [model, *rest[:i], "--host", "127.0.0.1", *rest[i:]]
    assert ref.env == {**venv, "VLLM_SERVER_DEV_MODE": "1"}
    assert CPU_ASYNC_ENV not in ref.env


@pytest.mark.parametrize("path", WITH_SPEC, ids=lambda p: p.stem)
def test_config_with_drafter_gets_spec_variants_with_vllms_command(path):
    cp = plan_of(path)
    vs = variants(cp)
    assert list(vs) == ["reference", "spec_sync", "spec_async"]
    assert all(v.not_applicable is None for v in cp.variants)  # MTP and DSpark run async in vLLM 0.32
    vargv, venv = vllm_test_command(path)
    model, rest = vargv[2], vargv[3:]
    k = rest.index("--speculative-config")  # every real config writes it this way
    spec_json, without = rest[k + 1], rest[:k] + rest[k + 2:]
    i = without.index("--port")
    head, tail = without[:i], ["--host", "127.0.0.1", *without[i:]]
    assert list(vs["reference"].argv) == SERVER + [model, *head, *tail]
    for name, flag in (("spec_sync", "--no-async-scheduling"), ("spec_async", "--async-scheduling")):
        argv = list(vs[name].argv)
        sent = argv[len(SERVER) + 1 + len(head)]
        # evalrun's one addition to a speculative variant: vLLM's per-request acceptance
        assert argv == SERVER + [model, *head, sent, argv[len(SERVER) + 2 + len(head)], flag,
                                 "--per-request-spec-decode-metrics", "detailed", *tail]
        assert sent == "--speculative-config"
        # the JSON vLLM's parser receives: the same object, untyped keys included
        assert json.loads(argv[len(SERVER) + 2 + len(head)]) == json.loads(spec_json)
        assert vs[name].env == {**venv, "VLLM_SERVER_DEV_MODE": "1"}
    assert 3 == len({tuple(v.argv) for v in cp.variants})


def test_no_reference_carries_a_speculative_flag_in_any_spelling():
    for path in [*REAL_CONFIGS, *sorted(GEN.glob("*.yaml"))]:
        if path.stem == "Port-pinned":
            continue
        for v in plan_of(path).variants:
            # by destination in vLLM's parser table: -sc, --spec-method, prefixes count too
            # (tests/config/test_vllm_parser.py parses the same commands with vLLM's real parser)
            has = any(h.dest in snapshot_table().speculative_keys for h in scan(v.argv[5:])[0])
            assert has == (v.name != "reference"), (path.stem, v.name, v.argv)


def test_startup_default_is_vllms_1200_s_and_the_engine_gets_it():
    cp = plan_of(REAL / "Qwen3-0.6B-FP8.yaml")
    assert cp.config.startup_max_wait_seconds == 1200
    assert cp.variants[0].env["VLLM_ENGINE_READY_TIMEOUT_S"] == "1200"
    cp = plan_of(REAL / "DeepSeek-V2-Lite-Instruct-FP8.yaml")
    assert cp.config.startup_max_wait_seconds == 2400
    assert cp.variants[0].env["VLLM_ENGINE_READY_TIMEOUT_S"] == "2400"


def test_request_timeouts_as_vllm_reads_them():
    c = load_config(REAL / "DeepSeek-V2-Lite-Instruct-FP8.yaml")
    assert c.request_timeout_seconds == 2400
    assert c.rocm_request_timeout_seconds == 1800  # used only when the engine reports ROCm
    c = load_config(REAL / "Qwen3-0.6B-FP8.yaml")
    assert c.request_timeout_seconds == 600 and c.rocm_request_timeout_seconds is None


# ------------------------------------------------------------------ unknown keys: warnings


@pytest.mark.parametrize("stem", ["Llama-3.2-1B-Instruct-INT8-CT", "Qwen2.5-VL-3B-Instruct-FP8-dynamic"])
def test_unknown_top_level_key_is_a_warning_with_file_line_and_nearest(stem):
    path = REAL / f"{stem}.yaml"
    c = load_config(path)
    [w] = c.warnings
    assert (w.key, w.line, w.file) == ("max_model_len", 5, str(path))
    assert f"{path}:5" in w.message and "max_model_len" in w.message and "ignored" in w.message
    assert w.nearest == "model_name"  # the nearest key evalrun knows (difflib ratio >= 0.6)
    # and it changes nothing vLLM's test would do: no --max-model-len is invented
    assert "--max-model-len" not in plan_of(path).variants[0].argv


def test_misspelt_key_warns_with_the_key_vllm_meant_and_vllms_value_stays():
    c = load_config(GEN / "Typo-key.yaml")
    [w] = c.warnings
    assert (w.key, w.nearest, w.line) == ("tolerence", "tolerance", 4)
    assert c.gates.tolerance == 0.08  # vLLM's test also ignores the misspelt key


def test_native_form_stays_strict(tmp_path):
    p = tmp_path / "n.yaml"
    p.write_text("model: m\nmax_model_len: 4096\nvariants: {reference: {}}\ntasks: {t: {kind: synthetic}}\n")
    with pytest.raises(ConfigError, match="unknown key 'max_model_len'"):
        load_config(p)


def test_untyped_speculative_fields_reach_vllm_unchanged_with_warnings():
    path = REAL / "DeepSeek-V4-Flash-DSpark-varlen-TP4.yaml"
    c = load_config(path)
    assert sorted(w.key.rsplit(".", 1)[1] for w in c.warnings) == [
        "confidence_based_verification", "dspark_budget_frac", "dspark_confidence_threshold"]
    assert all(w.line == 6 for w in c.warnings)
    spec = c.variants["spec_sync"].speculative_config.as_dict()
    assert spec["dspark_budget_frac"] == 0.5 and spec["confidence_based_verification"] == "auto"


def test_a_pinned_port_is_refused_as_vllms_test_refuses_it():
    # RemoteOpenAIServer raises ValueError("You have manually specified the port ...")
    with pytest.raises(ConfigError, match="remove --port"):
        load_config(GEN / "Port-pinned.yaml")


# ------------------------------------------------------------------ flag spellings


@pytest.mark.parametrize("stem, expected", [
    ("MTP-dotted-space", {"method": "mtp", "num_speculative_tokens": 2}),
    ("MTP-dotted-equals", {"method": "mtp", "num_speculative_tokens": 2}),
    ("MTP-underscore-equals", {"method": "mtp", "num_speculative_tokens": 1, "some_future_field": 3}),
])
def test_every_spelling_of_the_speculative_flag_derives_the_spec_variants(stem, expected):
    cp = plan_of(GEN / f"{stem}.yaml")
    vs = variants(cp)
    assert list(vs) == ["reference", "spec_sync", "spec_async"]
    assert [(c.baseline, c.candidate) for c in cp.config.comparisons] == [
        ("reference", "spec_async"), ("reference", "spec_sync"), ("spec_sync", "spec_async")]
    for name in ("spec_sync", "spec_async"):
        argv = list(vs[name].argv)
        assert json.loads(argv[argv.index("--speculative-config") + 1]) == expected
        assert vs[name].speculative_config == expected


@pytest.mark.parametrize("stem, kept, dropped, flag", [
    ("MTP-pinned-sync", "spec_sync", "spec_async", "--no-async-scheduling"),
    ("MTP-pinned-async", "spec_async", "spec_sync", "--async-scheduling"),
])
def test_pinned_async_scheduling_gets_only_the_consistent_variant(stem, kept, dropped, flag):
    cp = plan_of(GEN / f"{stem}.yaml")
    vs = variants(cp)
    assert list(vs) == ["reference", kept]
    assert [(c.baseline, c.candidate) for c in cp.config.comparisons] == [("reference", kept)]
    # the pin is written once, in vLLM's spelling, on both variants
    for v in cp.variants:
        assert [a for a in v.argv if "async" in a] == [flag]
    [w] = cp.config.warnings
    assert f"only {kept} is derived" in w.message and f"no {dropped}" in w.message
    assert all(dropped not in (g.variant, g.baseline) for g in cp.gates)


# ------------------------------------------------------------------ async + drafter rule


def test_drafter_vllm_refuses_async_with_plans_spec_async_not_applicable():
    cp = plan_of(GEN / "Ngram-drafter.yaml")
    vs = variants(cp)
    assert list(vs) == ["reference", "spec_sync", "spec_async"]
    assert vs["spec_sync"].not_applicable is None
    assert "method 'ngram'" in vs["spec_async"].not_applicable
    assert "only supported with EAGLE/MTP/Draft Model/NGram GPU/DSpark/DFlash" in vs["spec_async"].not_applicable


def test_evalrun_h200_list_plans_no_variant_vllm_refuses_at_start_up():
    for cp in build_plan(load_model_list(REPO / "model_lists" / "models-h200.txt"), python=PY).configs:
        names = [v.name for v in cp.variants]
        three = ["reference", "spec_sync", "spec_async"]
        # a config that also covers vLLM's V1 model runner adds the same three on V1
        assert names in (three, three + [n + "_v1" for n in three]), cp.name
        for v in cp.variants:
            assert v.not_applicable is None, (v.id, v.not_applicable)
            assert CPU_ASYNC_ENV not in v.env  # a GPU host's command carries no CPU-only setting
            assert "--trust-remote-code" in v.argv
    nano = load_config(REPO / "configs" / "Nemotron-3-Nano-30B-A3B-BF16.yaml")
    assert nano.variants["spec_async"].speculative_config.as_dict()["method"] == "ngram_gpu"


def test_cpu_config_keeps_the_cpu_async_setting():
    cp = build_plan([load_config(REPO / "configs" / "tiny-qwen3next-mtp-cpu.yaml")]).configs[0]
    assert variants(cp)["spec_async"].env[CPU_ASYNC_ENV] == "1"


# ------------------------------------------------------------------ prompts and chat


def test_chat_and_gen_prefix_keys_reach_the_task():
    c = load_config(GEN / "Chat-GenPrefix-Thinking.yaml")
    t = c.tasks["gsm8k"]
    assert t.use_chat_completions is True and t.gen_prefix == " <think>\n\n</think>\n\n"
    assert (t.num_questions, t.num_fewshot, t.max_tokens, t.seed) == (200, 3, 512, 7)
    assert c.max_concurrency == 16 and c.request_timeout_seconds == 900
    assert c.rocm_request_timeout_seconds == 1800 and c.gates.tolerance == 0.05
    assert c.startup_max_wait_seconds == 900 and c.warnings == ()


def test_gen_prefix_prompt_is_vllms():
    shots = [GsmItem(0, "One plus one?", "1+1=2\n#### 2", "2"), GsmItem(1, "Two times three?", "#### 6", "6")]
    test = [GsmItem(0, "Four minus one?", "#### 3", "3")]
    [r] = build_requests(test, shots, None, 2, gen_prefix=" <think></think>")
    # vLLM's _build_gsm8k_prompts: f"Answer:{gen_prefix} {answer}\n\n" and a final f"Answer:{gen_prefix}"
    assert r.prompt == ("Question: One plus one?\nAnswer: <think></think> 1+1=2\n#### 2\n\n"
                        "Question: Two times three?\nAnswer: <think></think> #### 6\n\n"
                        "Question: Four minus one?\nAnswer: <think></think>")
    [plain] = build_requests(test, shots, None, 1)
    assert plain.prompt == "Question: One plus one?\nAnswer: 1+1=2\n#### 2\n\nQuestion: Four minus one?\nAnswer:"


def test_chat_task_sends_no_stop_strings_as_vllms_newest_client(gsm8k_dir):
    t = load_config(GEN / "Chat-GenPrefix-Thinking.yaml").tasks["gsm8k"]
    pt = prepare_task("gsm8k", t.model_copy(update={"num_questions": 2}), gsm8k_dir)
    # vLLM's newest gsm8k_eval.py sends no stop strings in chat mode ("the chat template delimits
    # the turn"); completions mode keeps ["Question", "Assistant:", "<|separator|>"]
    assert pt.stop == ()
    assert pt.requests[0].prompt.endswith("Answer: <think>\n\n</think>\n\n")


# ------------------------------------------------------------------ every list as a dry run


@pytest.mark.parametrize("lst", REAL_LISTS + [GEN / "models-generated.txt"], ids=lambda p: p.name)
def test_every_list_plans_as_a_dry_run_from_its_folder(lst, monkeypatch, capsys):
    monkeypatch.chdir(lst.parent)  # as vLLM's CI: a bare list name inside the configs folder
    assert main(["--config", lst.name, "--dry-run", "--json", "--python", PY]) == 0
    plan = json.loads(capsys.readouterr().out)
    stems = [x.split("#", 1)[0].strip() for x in lst.read_text().splitlines()]
    assert [c["name"] for c in plan] == [Path(s).stem for s in stems if s]
    for c in plan:
        assert c["list_path"] == str(lst)  # the file that was read, not evalrun's own list
        for v in c["variants"]:
            assert "--trust-remote-code" in v["argv"] and "--disable-uvicorn-access-log" in v["argv"]
            assert v["env"]["VLLM_ENGINE_READY_TIMEOUT_S"] == str(int(c["startup_max_wait_seconds"]))


def test_bare_h200_name_in_vllms_folder_reads_vllms_list(monkeypatch, capsys):
    monkeypatch.chdir(REAL)
    assert main(["--config", "models-h200.txt", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"model list read: {REAL / 'models-h200.txt'}" in out
    assert "config DeepSeek-R1-TP" in out and "Nemotron-3-Super" not in out
    monkeypatch.chdir(REPO.parent)  # elsewhere, the built-in list is the fallback
    assert main(["--config", "models-h200.txt", "--dry-run"]) == 0
    assert f"model list read: {REPO / 'model_lists' / 'models-h200.txt'}" in capsys.readouterr().out


def test_dry_run_text_shows_warnings_and_not_applicable(capsys):
    assert main(["--config", str(GEN / "models-generated.txt"), "--dry-run", "--python", PY]) == 0
    out = capsys.readouterr().out
    assert "warning: " in out and "unknown key 'tolerence' ignored" in out
    assert "variant spec_async: NOT APPLICABLE" in out and "method 'ngram'" in out
    assert "[NOT RUN: variant not applicable]" in out
    assert "/v1/chat/completions" in out and "gen_prefix=" in out


def test_real_chat_config_takes_the_chat_path():
    c = load_config(REAL / "DiffusionGemma-26B-A4B-it-FP8-dynamic.yaml")
    assert c.tasks["gsm8k"].use_chat_completions is True and c.warnings == ()


def test_real_max_concurrency_and_env_are_vllms():
    path = REAL / "DeepSeek-V2-Lite-Chat-KVPP.yaml"
    c = load_config(path)
    assert c.max_concurrency == 8 and c.tasks["gsm8k"].num_questions == 200
    [ref] = plan_of(path).variants
    assert ref.env["VLLM_USE_V2_MODEL_RUNNER"] == "1"


def test_model_specific_mtp_method_runs_async_and_keeps_its_name():
    cp = plan_of(REAL / "Qwen3-Next-80B-A3B-NVFP4-EP2.yaml")
    vs = variants(cp)
    assert vs["spec_async"].not_applicable is None  # vLLM renames qwen3_next_mtp to mtp
    assert vs["spec_async"].speculative_config == {"method": "qwen3_next_mtp", "num_speculative_tokens": 1}
    assert vs["reference"].argv[vs["reference"].argv.index("--enable-expert-parallel") + 1] == \
        "--moe-backend=flashinfer_trtllm"


@pytest.mark.parametrize("arg", ["--port 8001", "--port=8001", "--host 0.0.0.0", "--host=0.0.0.0"])
def test_owned_flags_are_refused_in_every_spelling(tmp_path, arg):
    p = tmp_path / "c.yaml"
    p.write_text(f"model_name: m\naccuracy_threshold: 0.5\nserver_args: \"--enforce-eager {arg}\"\n")
    with pytest.raises(ConfigError, match=f"{p}:3: server_args: remove {arg.split()[0]}"):
        load_config(p)
