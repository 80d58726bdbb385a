"""A variant's ``speculative_config``, typed as vLLM's ``SpeculativeConfig`` keys
(:class:`SpeculativeConfigSpec`); :mod:`harness.config.schema` re-exports it."""

from __future__ import annotations

import difflib
import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.config.strict import JsonValue, RawValue
from harness.config.types import DraftCount


class SpeculativeConfigSpec(BaseModel):
    """A variant's speculative config: the keys of vLLM's ``SpeculativeConfig``
    (``vllm/config/speculative.py``, vLLM 0.32) that a user sets, typed.

    Sent to the server as ``--speculative-config '<JSON>'`` with only the keys written
    in the config (:meth:`as_dict`). A key not typed here (vLLM adds fields between
    releases, e.g. ``dspark_budget_frac``) is passed to vLLM unchanged and checked by
    vLLM's own parser before launch (:mod:`harness.engine.preflight`); the loader
    records a warning naming it and the nearest typed key (``methd`` -> ``method``).
    evalrun itself reads only ``method``, ``model`` and ``num_speculative_tokens``
    (attributes); the mapping as written is :meth:`as_dict`.

    Attributes (units as in vLLM):
        method: speculative method, e.g. ``mtp``, ``qwen3_next_mtp``, ``eagle``,
            ``eagle3``, ``ngram``, ``draft_model``, ``suffix``, ``medusa``; a string,
            not an enum here, because vLLM adds methods between releases (the engine
            rejects an unknown one at start-up, and the effective method is checked
            against ``/server_info``).
        num_speculative_tokens: draft tokens proposed per step (>= 1).
        model: draft model (hub id or path) for ``draft_model`` / EAGLE / Medusa.
        prompt_lookup_min, prompt_lookup_max: n-gram window bounds of ``ngram``
            (>= 1; min <= max).
        draft_tensor_parallel_size, tensor_parallel_size: draft model parallelism.
        quantization, revision, code_revision, max_model_len, enforce_eager,
        kv_cache_dtype, attention_backend, moe_backend: draft-model settings.
        disable_padded_drafter_batch, disable_eagle_block_drop, parallel_drafting,
        use_local_argmax_reduction, use_heterogeneous_vocab,
        index_share_for_mtp_iteration, enable_adaptive_verification: EAGLE/MTP
            switches.
        suffix_decoding_max_tree_depth, suffix_decoding_max_cached_requests,
        suffix_decoding_max_spec_factor, suffix_decoding_min_token_prob: ``suffix``.
        num_speculative_tokens_per_batch_size: ``[[min_bs, max_bs, k], ...]``.
        rejection_sample_method, draft_sample_method, dspark_draft_topk,
        synthetic_acceptance_rates, synthetic_acceptance_length: sampling of drafts.
    """

    # lax as vLLM's own pydantic SpeculativeConfig, which receives this JSON unchanged
    model_config = ConfigDict(extra="allow", frozen=True, strict=False, allow_inf_nan=False)

    method: str | None = None
    num_speculative_tokens: DraftCount | None = None
    model: str | None = None
    prompt_lookup_min: int | None = Field(default=None, ge=1)
    prompt_lookup_max: int | None = Field(default=None, ge=1)
    draft_tensor_parallel_size: int | None = Field(default=None, ge=1)
    tensor_parallel_size: int | None = Field(default=None, ge=1)
    quantization: str | None = None
    revision: str | None = None
    code_revision: str | None = None
    max_model_len: int | None = Field(default=None, ge=1)
    enforce_eager: bool | None = None
    kv_cache_dtype: str | None = None
    attention_backend: str | None = None
    moe_backend: str | None = None
    disable_padded_drafter_batch: bool | None = None
    disable_eagle_block_drop: bool | None = None
    parallel_drafting: bool | None = None
    use_local_argmax_reduction: bool | None = None
    use_heterogeneous_vocab: bool | None = None
    index_share_for_mtp_iteration: bool | None = None
    enable_adaptive_verification: bool | None = None
    suffix_decoding_max_tree_depth: int | None = Field(default=None, ge=1)
    suffix_decoding_max_cached_requests: int | None = Field(default=None, ge=0)
    suffix_decoding_max_spec_factor: float | None = Field(default=None, ge=0.0)
    suffix_decoding_min_token_prob: float | None = Field(default=None, ge=0.0, le=1.0)
    num_speculative_tokens_per_batch_size: list[tuple[int, int, int]] | None = None
    rejection_sample_method: Literal["standard", "synthetic", "block"] | None = None
    draft_sample_method: Literal["greedy", "probabilistic"] | None = None
    dspark_draft_topk: int | None = Field(default=None, ge=1)
    synthetic_acceptance_rates: list[float] | None = None
    synthetic_acceptance_length: float | None = None

    @model_validator(mode="after")
    def _check(self) -> "SpeculativeConfigSpec":
        if self.method is None and self.model is None:
            near = [k for k in self.untyped_keys()
                    if difflib.get_close_matches(k, ["method", "model"], n=1, cutoff=0.6)]
            hint = "".join(f"; '{k}' is not a key: did you mean "
                           f"'{difflib.get_close_matches(k, ['method', 'model'], n=1, cutoff=0.6)[0]}'?"
                           for k in near)
            raise ValueError(f"set 'method' (e.g. mtp, ngram, eagle) or a draft 'model'{hint}")
        bad = [k for k, v in (self.model_extra or {}).items() if _non_finite(v)]
        if bad:  # JSON has no inf / nan: pydantic would send them to vLLM as null
            raise ValueError(f"{', '.join(bad)}: a number that is not finite (inf or nan) cannot be sent to vLLM")
        lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"prompt_lookup_min ({lo}) is larger than prompt_lookup_max ({hi})")
        return self

    def as_dict(self) -> dict[str, JsonValue]:
        """The keys written in the config, as the JSON mapping for ``--speculative-config``
        (keys evalrun does not type included, unchanged)."""
        return self.model_dump(mode="json", exclude_unset=True)

    def untyped_keys(self) -> list[str]:
        """The keys written that evalrun does not type (passed to vLLM unchanged)."""
        return sorted(self.model_extra or {})


def _non_finite(v: RawValue) -> bool:
    """``v`` is, or holds at any depth, a float that is infinite or NaN."""
    if isinstance(v, float):
        return not math.isfinite(v)
    if isinstance(v, dict):
        return any(_non_finite(x) for x in v.values())
    if isinstance(v, (list, tuple)):
        return any(_non_finite(x) for x in v)
    return False
