"""Tests of harness.models.tiny: the built-in tiny Qwen3-Next + MTP checkpoint.

The build tests need torch, transformers (with Qwen3-Next) and safetensors and are
skipped without them. One build takes about 3 s on 2 cores.

An end-to-end check with a real vLLM server (minutes on 2 CPU cores) is marked
``engine`` (``make test`` runs it; ``make test-fast`` skips it).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import harness.models.tiny as tinymodel
import harness.models.tokenizer as tokenizer
from harness.models.tiny import (
    TINY_MODELS,
    TinyModelError,
    TinyModelRecipe,
    ensure_tiny_model,
    recipe_hash,
    tiny_model_dir,
)

from ..conftest import require_vllm

NAME = "tiny-qwen3next-mtp"


def _need_build_libs():
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "Qwen3NextForCausalLM"):
        pytest.skip("transformers has no Qwen3-Next")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """One default build shared by the read-only tests."""
    _need_build_libs()
    return ensure_tiny_model(NAME, cache_dir=tmp_path_factory.mktemp("cache"), progress=lambda m: None)


# --------------------------------------------------------------------------- recipe / paths (no torch)


def test_recipe_hash_is_stable_and_sensitive():
    r = TinyModelRecipe()
    assert recipe_hash(r) == recipe_hash(TinyModelRecipe())
    assert re.fullmatch(r"[0-9a-f]{64}", recipe_hash(r))
    assert recipe_hash(dataclasses.replace(r, seed=r.seed + 1)) != recipe_hash(r)
    assert recipe_hash(dataclasses.replace(r, format_version=r.format_version + 1)) != recipe_hash(r)
    assert TinyModelRecipe.from_json(json.loads(json.dumps(r.to_json()))) == r


def test_cache_dir_default_and_env(tmp_path, monkeypatch):
    r = TINY_MODELS[NAME]
    monkeypatch.setenv("EVALRUN_CACHE_DIR", str(tmp_path / "c"))
    assert tiny_model_dir(NAME, r) == tmp_path / "c" / "models" / f"{NAME}-{recipe_hash(r)[:12]}"
    monkeypatch.delenv("EVALRUN_CACHE_DIR")
    assert tiny_model_dir(NAME, r).parent == Path.home() / ".cache" / "evalrun" / "models"
    assert tiny_model_dir(NAME, r, tmp_path).parent == tmp_path / "models"


def test_unknown_name_and_bad_recipe(tmp_path):
    with pytest.raises(TinyModelError, match="unknown tiny model"):
        ensure_tiny_model("no-such-model", cache_dir=tmp_path)
    with pytest.raises(TinyModelError, match="head_dim"):
        dataclasses.replace(TinyModelRecipe(), head_dim=32).validate()
    with pytest.raises(TinyModelError, match="linear_key_head_dim"):
        dataclasses.replace(TinyModelRecipe(), linear_key_head_dim=32).validate()


def test_recipe_change_gives_another_folder(tmp_path):
    r = TINY_MODELS[NAME]
    other = dataclasses.replace(r, seed=r.seed + 1)
    assert tiny_model_dir(NAME, r, tmp_path) != tiny_model_dir(NAME, other, tmp_path)


# --------------------------------------------------------------------------- tokenizer


def test_tokenizer_round_trip_digit_by_digit(built):
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(built))
    text = "Question: 12 + 7?\nAnswer: 19 #### 19"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert len(ids) == len(text)  # one token per character, no BOS
    assert tok.convert_ids_to_tokens(tok.encode("2048")) == ["2", "0", "4", "8"]
    every = "".join(tokenizer.tokenizer_alphabet())
    assert tok.decode(tok.encode(every)) == every
    # Every id the model can emit decodes to text that encodes back to it.
    cfg = json.loads((built / "config.json").read_text())
    assert len(tok) == cfg["vocab_size"]
    ids = list(range(2, cfg["vocab_size"]))
    assert tok.encode(tok.decode(ids)) == ids
    # Outside the alphabet: <unk>; special tokens are skippable.
    assert tok.encode("é") == [tok.unk_token_id]
    assert tok.decode(tok.encode("ab<|endoftext|>"), skip_special_tokens=True) == "ab"


def test_eos_consistent(built):
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(built))
    cfg = json.loads((built / "config.json").read_text())
    gen = json.loads((built / "generation_config.json").read_text())
    assert tok.eos_token == "<|endoftext|>"
    assert tok.eos_token_id == cfg["eos_token_id"] == gen["eos_token_id"] == 0
    assert tok.pad_token_id == cfg["pad_token_id"] == 0
    assert cfg["vocab_size"] % 64 == 0 and cfg["vocab_size"] >= len(tok)


# --------------------------------------------------------------------------- checkpoint


def test_folder_layout_and_config(built):
    for f in tinymodel.REQUIRED_FILES:
        assert (built / f).is_file(), f
    cfg = json.loads((built / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_next"
    assert cfg["architectures"] == ["Qwen3NextForCausalLM"]
    assert cfg["num_nextn_predict_layers"] == 1
    assert cfg["layer_types"] == ["linear_attention", "full_attention", "linear_attention", "full_attention"]
    assert cfg["head_dim"] == 64 and cfg["num_experts"] == 4
    info = json.loads((built / "recipe.json").read_text())
    assert info["recipe_sha256"] == recipe_hash(TINY_MODELS[NAME])
    assert built.name.endswith(info["recipe_sha256"][:12])
    # Nothing temporary is left next to the folder.
    assert [p.name for p in built.parent.iterdir()] == [built.name]


def _vllm_mtp_module_attrs() -> set[str] | None:
    """Submodule names of Qwen3NextMultiTokenPredictor read from the installed vLLM.

    The source is parsed, not imported (importing vLLM takes seconds and may need
    a working torch build). Returns None when vLLM is not installed.
    """
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    src = Path(list(spec.submodule_search_locations)[0]) / "model_executor" / "models" / "qwen3_next_mtp.py"
    if not src.is_file():
        return None
    tree = ast.parse(src.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Qwen3NextMultiTokenPredictor")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    attrs = set()
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            for t in node.targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    func = node.value.func
                    fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                    # nn modules: constructors named like classes (Linear, RMSNorm, ModuleList, ...)
                    if fname[:1].isupper() and "factory" not in fname:
                        attrs.add(t.attr)
    return attrs


# When vLLM is absent: the predictor's modules in vLLM 0.32.0's qwen3_next_mtp.py
# (embed_tokens is shared with the main model and loaded from model.embed_tokens).
_FALLBACK_MTP_ATTRS = {"embed_tokens", "fc", "layers", "norm", "pre_fc_norm_hidden", "pre_fc_norm_embedding"}


def test_mtp_tensors_match_vllm_loader(built):
    from safetensors import safe_open

    with safe_open(str(built / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in names}
    attrs = _vllm_mtp_module_attrs() or _FALLBACK_MTP_ATTRS
    assert {"fc", "layers", "norm", "pre_fc_norm_hidden", "pre_fc_norm_embedding"} <= attrs
    mtp = {n for n in names if n.startswith("mtp.")}
    # Every MTP tensor belongs to a predictor module; every predictor module but the
    # shared embedding has tensors.
    assert {n.split(".")[1] for n in mtp} == attrs - {"embed_tokens"}
    # The MTP decoder layer is a full-attention MoE layer named like a main-model one.
    cfg = json.loads((built / "config.json").read_text())
    full = cfg["layer_types"].index("full_attention")
    main_layer = {n[len(f"model.layers.{full}.") :] for n in names if n.startswith(f"model.layers.{full}.")}
    mtp_layer = {n[len("mtp.layers.0.") :] for n in mtp if n.startswith("mtp.layers.0.")}
    assert mtp_layer == main_layer
    assert "self_attn.q_proj.weight" in mtp_layer and "mlp.experts.3.down_proj.weight" in mtp_layer
    assert mtp == set(tinymodel.mtp_tensor_names())
    h = cfg["hidden_size"]
    assert shapes["mtp.fc.weight"] == (h, 2 * h)
    for n in ("mtp.norm.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.pre_fc_norm_embedding.weight"):
        assert shapes[n] == (h,)
    assert not any(n.startswith("mtp.embed_tokens") or n.startswith("mtp.lm_head") for n in names)


def test_weights_use_model_init(built):
    import torch
    from safetensors.torch import load_file

    t = load_file(str(built / "model.safetensors"))
    std = TINY_MODELS[NAME].initializer_range
    # Zero-centred RMSNorms (applied as 1 + w) start at 0, in the main model and MTP.
    for n in ("model.norm.weight", "model.layers.1.input_layernorm.weight", "mtp.norm.weight",
              "mtp.pre_fc_norm_hidden.weight", "mtp.pre_fc_norm_embedding.weight",
              "mtp.layers.0.self_attn.q_norm.weight"):
        assert torch.count_nonzero(t[n]) == 0, n
    for n in ("mtp.fc.weight", "mtp.layers.0.self_attn.q_proj.weight", "model.layers.3.self_attn.q_proj.weight"):
        assert abs(t[n].float().std().item() - std) < 0.2 * std, n
    # MTP weights are not copies of the main model's.
    assert not torch.equal(t["mtp.layers.0.self_attn.q_proj.weight"], t["model.layers.3.self_attn.q_proj.weight"])
    assert torch.count_nonzero(t["lm_head.weight"][tokenizer.NUM_BASE_TOKENS :]) == 0


# --------------------------------------------------------------------------- determinism / caching


def test_two_builds_are_byte_identical(built, tmp_path):
    _need_build_libs()
    a = tinymodel.build_tiny_model(TINY_MODELS[NAME], tmp_path / "a")
    assert _sha256(a / "model.safetensors") == _sha256(built / "model.safetensors")
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (a / f).read_bytes() == (built / f).read_bytes(), f


def test_recipe_change_rebuilds_different_weights(built, tmp_path):
    _need_build_libs()
    r = dataclasses.replace(TINY_MODELS[NAME], seed=TINY_MODELS[NAME].seed + 1)
    other = ensure_tiny_model(NAME, cache_dir=tmp_path, progress=lambda m: None, recipe=r)
    assert other.name != built.name
    assert _sha256(other / "model.safetensors") != _sha256(built / "model.safetensors")


def test_cached_folder_is_reused_and_broken_one_rebuilt(tmp_path):
    _need_build_libs()
    msgs: list[str] = []
    p = ensure_tiny_model(NAME, cache_dir=tmp_path, progress=msgs.append)
    assert any("built" in m for m in msgs)
    mtime = (p / "model.safetensors").stat().st_mtime_ns
    msgs.clear()
    assert ensure_tiny_model(NAME, cache_dir=tmp_path, progress=msgs.append) == p
    assert msgs == [] and (p / "model.safetensors").stat().st_mtime_ns == mtime
    (p / "model.safetensors").unlink()  # a damaged folder is set aside and rebuilt
    assert ensure_tiny_model(NAME, cache_dir=tmp_path, progress=msgs.append) == p
    assert (p / "model.safetensors").is_file()
    assert any(q.name.startswith(".broken-") for q in p.parent.iterdir())


def test_interrupted_build_leaves_no_folder(tmp_path, monkeypatch):
    _need_build_libs()

    def boom(recipe, out_dir):
        Path(out_dir, "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(tinymodel, "build_tiny_model", boom)
    with pytest.raises(KeyboardInterrupt):
        ensure_tiny_model(NAME, cache_dir=tmp_path, progress=lambda m: None)
    assert list((tmp_path / "models").iterdir()) == []


# --------------------------------------------------------------------------- real engine (opt-in)


@pytest.mark.engine
def test_vllm_serves_tiny_model_with_mtp(built, tmp_path):
    """Start the OpenAI server with MTP, complete greedily, read spec-decode counters."""
    require_vllm()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(built),
            "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048",
            "--no-enable-prefix-caching", "--enforce-eager",
            "--speculative-config", '{"method":"mtp","num_speculative_tokens":2}']
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_SERVER_DEV_MODE="1")
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            try:
                urllib.request.urlopen(base + "/health", timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline, "server did not start in 600 s"
                time.sleep(2)
        body = {"model": str(built), "prompt": ["Question: 12 + 7?\nAnswer:"], "max_tokens": 32,
                "temperature": 0, "return_token_ids": True}
        req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        choice = json.loads(urllib.request.urlopen(req, timeout=300).read())["choices"][0]
        transformers = pytest.importorskip("transformers")
        tok = transformers.AutoTokenizer.from_pretrained(str(built))
        assert tok.decode(choice["token_ids"], skip_special_tokens=True) == choice["text"]
        assert choice["prompt_token_ids"] == tok.encode(body["prompt"][0])
        metrics = urllib.request.urlopen(base + "/metrics", timeout=30).read().decode()
        assert "vllm:spec_decode_num_drafts_total" in metrics
        info = json.loads(urllib.request.urlopen(base + "/server_info?config_format=json", timeout=30).read())
        assert info["vllm_config"]["speculative_config"]["method"] == "mtp"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
