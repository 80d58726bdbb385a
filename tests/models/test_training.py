"""Fast tests of harness/training.py (a few steps of a tiny recipe; no vLLM server).

The expected MTP tensor names and shapes are written by hand from vLLM 0.32.0's
``vllm/model_executor/models/qwen3_next_mtp.py`` (``Qwen3NextMultiTokenPredictor``:
``fc = ColumnParallelLinear(2 * hidden, hidden, bias=False)``, three
``Qwen3NextRMSNorm(hidden)`` named ``norm``, ``pre_fc_norm_hidden``,
``pre_fc_norm_embedding``, and ``layers.<i>`` full-attention MoE decoder layers;
``Qwen3NextMTP.load_weights`` renames checkpoint ``mtp.*`` to ``model.*``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("safetensors")

import harness.models as models  # noqa: E402
import harness.models.mtp as mtp_mod  # noqa: E402
import harness.models.shipped as shipped_mod  # noqa: E402
import harness.models.tiny as tm  # noqa: E402
import harness.models.tokenizer as tokenizer  # noqa: E402
import harness.models.training as tr  # noqa: E402
import harness.models.training_recipe as trr  # noqa: E402
from harness.cli import train_tiny  # noqa: E402
from harness.tasks import synthetic as syn  # noqa: E402

SMALL_MODEL = tm.TinyModelRecipe(
    hidden_size=64, moe_intermediate_size=32, shared_expert_intermediate_size=32,
    intermediate_size=64, dtype="float32", max_position_embeddings=512,
)


def small_recipe(**kw) -> tr.TrainRecipe:
    base = dict(model=SMALL_MODEL, steps=24, batch_size=4, seq_len=48, lr=3e-3, warmup_steps=3,
                mtp2_lambda=0.3)
    base.update(kw)
    return tr.TrainRecipe(**base)


def expected_mtp_names(num_experts: int) -> set[str]:
    """Hand-written from qwen3_next_mtp.py / qwen3_next.py (checkpoint names)."""
    layer = [
        "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
        "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
        "input_layernorm.weight", "post_attention_layernorm.weight",
        "mlp.gate.weight", "mlp.shared_expert_gate.weight",
        "mlp.shared_expert.gate_proj.weight", "mlp.shared_expert.up_proj.weight",
        "mlp.shared_expert.down_proj.weight",
    ]
    for e in range(num_experts):
        layer += [f"mlp.experts.{e}.{p}.weight" for p in ("gate_proj", "up_proj", "down_proj")]
    names = {f"mtp.layers.0.{n}" for n in layer}
    names |= {"mtp.fc.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
              "mtp.norm.weight"}
    return names


def test_encode_is_one_id_per_char_and_training_text_is_prompt_format():
    text = syn.format_block("What is 8 minus 6?", "8 - 6 = 2 #### 2")
    ids = tr.encode(text)
    assert len(ids) == len(text)
    assert all(2 <= i < tokenizer.NUM_BASE_TOKENS for i in ids)
    with pytest.raises(tr.TrainingError):
        tr.encode("\u00e9")
    r = small_recipe()
    seqs = tr.training_sequences(r)
    first = next(seqs)
    assert len(first) == r.seq_len + 1
    inv = {v: k for k, v in tr.char_ids().items()}
    assert "".join(inv[i] for i in first).startswith("Question: ")
    # deterministic
    assert next(tr.training_sequences(r)) == first


def test_recipe_hash_covers_every_field():
    r = small_recipe()
    assert tr.trained_recipe_hash(r) == tr.trained_recipe_hash(small_recipe())
    assert tr.trained_recipe_hash(r) != tr.trained_recipe_hash(dataclasses.replace(r, data_seed=2))
    assert tr.trained_recipe_hash(r) != tr.trained_recipe_hash(
        dataclasses.replace(r, model=dataclasses.replace(SMALL_MODEL, seed=5)))
    with pytest.raises(tr.TrainingError):
        dataclasses.replace(r, steps=0).validate()


def test_mtp_forward_shapes_order_and_causality():
    r = small_recipe()
    model, mtp, cfg, vocab = mtp_mod.build_modules(r)
    H = cfg.hidden_size
    assert tuple(mtp.fc.weight.shape) == (H, 2 * H) and mtp.fc.bias is None
    for norm in (mtp.pre_fc_norm_embedding, mtp.pre_fc_norm_hidden, mtp.norm):
        assert tuple(norm.weight.shape) == (H,)
    B, T = 2, 12
    ids = torch.randint(2, tokenizer.NUM_BASE_TOKENS, (B, T + 1))
    with torch.no_grad():
        h = model.model(input_ids=ids[:, :T]).last_hidden_state
        out = mtp_mod.mtp_forward(model, mtp, h, ids[:, 1:])
        assert out.shape == (B, T, H)
        assert model.lm_head(out).shape == (B, T, vocab)
        # causal: changing the next token at position 7 leaves positions < 7 unchanged
        ids2 = ids.clone()
        ids2[:, 8] = (ids2[:, 8] + 1 - 2) % (tokenizer.NUM_BASE_TOKENS - 2) + 2
        out2 = mtp_mod.mtp_forward(model, mtp, h, ids2[:, 1:])
        assert torch.allclose(out[:, :7], out2[:, :7])
        assert not torch.allclose(out[:, 7], out2[:, 7])
        # concat order [embedding, hidden]: with fc reading only the first half, the
        # hidden state no longer matters
        fc = mtp.fc.weight.clone()
        mtp.fc.weight.zero_()
        mtp.fc.weight[:, :H] = torch.eye(H)
        a = mtp_mod.mtp_forward(model, mtp, h, ids[:, 1:])
        b = mtp_mod.mtp_forward(model, mtp, torch.randn_like(h), ids[:, 1:])
        assert torch.allclose(a, b)
        mtp.fc.weight.copy_(fc)
        # zero-centred RMSNorm: weight 0 means scale 1 (x / rms(x) * (1 + w))
        x = torch.randn(3, H)
        assert torch.allclose(mtp.norm(x), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps),
                              atol=1e-5)


def test_second_step_matches_vllm_kv_layout():
    """Second-step row i == the layer run on [first-step inputs 0..i, second-step input i]
    at positions 0..i+1 (vLLM's KV cache at the second draft step)."""
    r = small_recipe()
    model, mtp, _, _ = mtp_mod.build_modules(r)
    B, T = 2, 9
    ids = torch.randint(2, tokenizer.NUM_BASE_TOKENS, (B, T + 1))
    with torch.no_grad():
        h = model.model(input_ids=ids[:, :T]).last_hidden_state
        m1 = mtp_mod.mtp_forward(model, mtp, h[:, : T - 1], ids[:, 1:T])
        m2 = mtp_mod.mtp_second_step(model, mtp, h[:, : T - 1], ids[:, 1:T], m1[:, : T - 2], ids[:, 2:T])
        assert m2.shape == (B, T - 2, h.shape[-1])
        for i in range(T - 2):
            z = torch.cat([mtp_mod._mtp_input(model, mtp, h[:, : i + 1], ids[:, 1 : i + 2]),
                           mtp_mod._mtp_input(model, mtp, m1[:, i : i + 1], ids[:, i + 2 : i + 3])], dim=1)
            want = mtp_mod._mtp_block(model, mtp, z, torch.arange(i + 2).unsqueeze(0), None)[:, -1]
            assert torch.allclose(m2[:, i], want, atol=1e-5)


def test_few_steps_reduce_loss_and_export_has_vllm_names(tmp_path):
    from safetensors import safe_open

    r = small_recipe()
    lines = []
    model, mtp, cfg, vocab, log = tr.train_model(r, progress=lines.append, log_every=8)
    hist = log["history"]
    assert [row[0] for row in hist] == [8, 16, 24]
    assert any("tok/s" in line and "eta" in line for line in lines)
    first, last = hist[0], hist[-1]
    assert last[2] < first[2] and last[3] < first[3] and last[4] < first[4]  # main, mtp, mtp2
    # deterministic from the recipe
    short = dataclasses.replace(r, steps=3)
    runs = [tr.train_model(short, progress=lambda s: None, log_every=1)[-1]["history"] for _ in range(2)]
    assert runs[0] == runs[1]

    out = tr.export_checkpoint(model, mtp, r, tmp_path / "ckpt")
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
        H = cfg.hidden_size
        assert tuple(f.get_tensor("mtp.fc.weight").shape) == (H, 2 * H)
        assert tuple(f.get_tensor("mtp.layers.0.mlp.experts.0.gate_proj.weight").shape) == (
            SMALL_MODEL.moe_intermediate_size, H)
    assert {k for k in keys if k.startswith("mtp.")} == expected_mtp_names(SMALL_MODEL.num_experts)
    assert {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"} <= keys
    config = json.loads((out / "config.json").read_text())
    assert config["num_nextn_predict_layers"] == 1
    assert config["layer_types"] == ["linear_attention", "full_attention"] * 2
    assert config["vocab_size"] == vocab
    info = json.loads((out / "recipe.json").read_text())
    assert info["recipe_sha256"] == tr.trained_recipe_hash(r)


def test_ensure_trained_model_caches(tmp_path):
    r = small_recipe(steps=2, mtp2_lambda=0.0)
    msgs = []
    p = tr.ensure_trained_model("t", cache_dir=tmp_path, progress=msgs.append, recipe=r)
    assert p.name == f"t-{tr.trained_recipe_hash(r)[:12]}"
    assert all((p / f).is_file() for f in trr.REQUIRED_FILES)
    assert any("training t" in m for m in msgs)
    msgs.clear()
    assert tr.ensure_trained_model("t", cache_dir=tmp_path, progress=msgs.append, recipe=r) == p
    assert msgs == []  # cached: no training
    with pytest.raises(tr.TrainingError):
        tr.ensure_trained_model("no-such-model", cache_dir=tmp_path)


def test_tinymodel_resolves_trained_names(monkeypatch, tmp_path):
    calls = []

    def fake(name, cache_dir=None, progress=print):
        calls.append((name, cache_dir))
        return tmp_path

    monkeypatch.setattr(tr, "ensure_trained_model", fake)
    assert models.ensure_model(tr.DEFAULT_TRAINED_NAME, cache_dir=tmp_path) == tmp_path
    assert calls == [(tr.DEFAULT_TRAINED_NAME, tmp_path)]
    with pytest.raises(tm.TinyModelError, match=tr.DEFAULT_TRAINED_NAME):
        models.ensure_model("no-such-model", cache_dir=tmp_path)


# ---------------------------------------------------------------- the shipped checkpoint


def test_shipped_checkpoint_is_used_and_verified(tmp_path, monkeypatch):
    name = tr.DEFAULT_TRAINED_NAME
    shipped = tr.SHIPPED_DIR / name
    # recipe hash recorded in the shipped folder = the hash of today's recipe, computed here
    want = hashlib.sha256(json.dumps(tr.TRAINED_MODELS[name].to_json(), sort_keys=True,
                                     separators=(",", ":")).encode()).hexdigest()
    assert json.loads((shipped / "recipe.json").read_text())["recipe_sha256"] == want
    manifest = json.loads((shipped / tr.MANIFEST).read_text())
    for f, digest in manifest.items():
        assert hashlib.sha256((shipped / f).read_bytes()).hexdigest() == digest
    assert (shipped / "model.safetensors").stat().st_size < 5_000_000   # a few MB
    # ensure_trained_model returns it without training (no cache folder is written)
    msgs = []
    assert tr.ensure_trained_model(name, cache_dir=tmp_path, progress=msgs.append) == shipped
    assert msgs == [] and not (tmp_path / "models").exists()
    # a corrupted copy is refused (and training would start instead)
    bad = tmp_path / "data"
    shutil.copytree(tr.SHIPPED_DIR, bad)
    with open(bad / name / "model.safetensors", "r+b") as f:
        f.seek(1000)
        f.write(b"\x00\x01\x02\x03")
    monkeypatch.setattr(shipped_mod, "SHIPPED_DIR", bad)
    assert shipped_mod.shipped_model_dir(name) is None


def test_package_data_declares_the_shipped_checkpoint():
    doc = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    globs = doc["tool"]["setuptools"]["package-data"]["harness.models"]
    rel = [f"data/{tr.DEFAULT_TRAINED_NAME}/{f}" for f in (*trr.REQUIRED_FILES, tr.MANIFEST)]
    assert all(any(fnmatch(r, g) for g in globs) for r in rel)


@pytest.mark.slow
def test_retraining_reproduces_the_shipped_checkpoint(tmp_path):
    """Retrain from the recipe (10 to 20 minutes on 2 cores) and compare with the shipped
    weights: bit-identical when torch and the CPU kind match those that trained it;
    otherwise the same greedy completions on test questions."""
    name = tr.DEFAULT_TRAINED_NAME
    shipped = tr.SHIPPED_DIR / name
    out = tmp_path / "retrained"
    assert train_tiny.cli_main(["--name", name, "--output", str(out)]) == 0
    cmp = shipped_mod.compare_checkpoints(shipped, out)
    info = json.loads((shipped / "recipe.json").read_text())
    if cmp["identical"]:
        return
    assert info.get("torch_version") != torch.__version__, (
        f"same torch {torch.__version__} but weights differ: {cmp['differing'][:5]}")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    splits = syn.generate_splits(tr.TRAINED_MODELS[name].split_seed, tr.TRAINED_MODELS[name].num_test,
                                 tr.TRAINED_MODELS[name].num_fewshot_items)
    tok = AutoTokenizer.from_pretrained(shipped)
    outs = []
    for folder in (shipped, out):
        m = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
        texts = []
        for item in splits.test[:20]:
            ids = tok(syn.format_block(item).split("Answer:")[0] + "Answer:", return_tensors="pt").input_ids
            g = m.generate(ids, max_new_tokens=24, do_sample=False)
            texts.append(tok.decode(g[0, ids.shape[1]:]))
        outs.append(texts)
    assert outs[0] == outs[1]
