"""A traffic shape of a ``kind: shape`` task, as the config writes it (docs/configuration.md,
"Traffic shapes"); the shapes themselves are built by :mod:`harness.tasks.shapes`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from harness.config.strict import StrictModel
from harness.config.types import MAX_TOKENS, DraftCount, PositiveCount, TokenCount, TokenOffset

__all__ = ["MAX_SHAPE_TOKENS", "SHAPE_KEYS", "SHAPE_SOURCE_QUESTIONS", "ShapeSpec"]

#: Distinct source questions a shape's prompts are cut from: the size of the synthetic
#: task's test split (``len(harness.tasks.synthetic.generate_splits().test)``, checked by
#: tests/properties/test_config_values.py), so the most distinct prompts a shape can have.
SHAPE_SOURCE_QUESTIONS = 200
#: Most prompt tokens one shape may build in all (its prompts' lengths summed, each pass
#: counted): 2**24 = 16,777,216 token ids, about 0.5 GB as Python lists; a shape asking for
#: more is refused at load instead of ending in a MemoryError while its prompts are built.
MAX_SHAPE_TOKENS = 2**24


#: ShapeSpec keys each shape kind takes (``kind`` aside); another key is refused at load.
SHAPE_KEYS: dict[str, frozenset[str]] = {
    "prompt_edges": frozenset({"speculative_tokens", "block_size", "chunk_size", "offsets", "prompts_per_length"}),
    "prefix_reuse": frozenset({"prefix_tokens", "prompt_tokens", "prompts", "block_size"}),
    "cache_pressure": frozenset({"prompt_tokens", "prompts", "output_tokens"}),
    "concurrency_sweep": frozenset({"concurrency", "prompt_tokens", "prompts", "output_tokens"}),
}


class ShapeSpec(StrictModel):
    """A traffic shape of a ``kind: shape`` task (docs/configuration.md, "Traffic shapes").

    Attributes:
        kind: ``prompt_edges``: prompts whose lengths in tokens sit at and around the
            engine's edges, built with the served model's own tokenizer and sent as token
            ids; ``prefix_reuse``: prompts sharing a long prefix, sent cold and then again
            warm (prefix caching); ``cache_pressure``: enough long requests at once that the
            engine preempts; ``concurrency_sweep``: the same prompts at several
            concurrencies with outputs of very different lengths. :data:`SHAPE_KEYS` lists
            the keys of each kind.
        speculative_tokens: the ``num_speculative_tokens`` of the config's speculative
            variants (each gives the edge ``k + 1``); refused at load when a variant
            speculates with a count not listed.
        block_size: the KV-cache block size edge in tokens (None: no block edge);
            ``prefix_reuse``: the block size its proof's bound uses when the engine
            reports none in ``/server_info`` (the engine's wins).
        chunk_size: the prefill chunk edge in tokens, i.e. the server's
            ``--max-num-batched-tokens``, which the config's server arguments must set to
            this value (refused at load otherwise); None: no chunk edge. Offset ``+1`` is
            the one-token tail after a full chunk.
        offsets: lengths tried around every edge, as ``edge + offset`` (lengths below 1
            are dropped).
        prompts_per_length: distinct prompts per length (different source questions).
        prefix_tokens: ``prefix_reuse``: the shared prefix's length in tokens.
        prompt_tokens: each prompt's whole length in tokens (``prefix_reuse``: prefix
            included).
        prompts: distinct prompts (``cache_pressure``: all in flight at once).
        output_tokens: completion budgets in tokens, given to the prompts in turn, so
            outputs of very different lengths finish mid-batch (None: the task's
            ``max_tokens`` for every prompt).
        concurrency: ``concurrency_sweep``: requests in flight of each pass, in order
            (e.g. ``[1, 16]``: one at a time, then the engine's saturation).
    """

    kind: Literal["prompt_edges", "prefix_reuse", "cache_pressure", "concurrency_sweep"] = "prompt_edges"
    speculative_tokens: list[DraftCount] = Field(default_factory=list, max_length=8)
    block_size: TokenCount | None = None
    chunk_size: TokenCount | None = None
    offsets: list[TokenOffset] = Field(default_factory=lambda: [-1, 0, 1], min_length=1, max_length=16)
    prompts_per_length: int = Field(default=3, ge=1, le=50)
    prefix_tokens: TokenCount | None = None
    prompt_tokens: TokenCount | None = None
    prompts: int = Field(default=8, ge=1, le=SHAPE_SOURCE_QUESTIONS)
    output_tokens: list[TokenCount] | None = Field(default=None, min_length=1, max_length=16)
    concurrency: list[Annotated[PositiveCount, Field(le=4096)]] = Field(default_factory=list, max_length=8)

    @model_validator(mode="after")
    def _keys_of_its_kind(self) -> "ShapeSpec":
        extra = sorted(self.model_fields_set - SHAPE_KEYS[self.kind] - {"kind"})
        if extra:
            raise ValueError(f"shape kind {self.kind} takes {sorted(SHAPE_KEYS[self.kind])}, not {extra}")
        if self.output_tokens is not None and min(self.output_tokens) < 1:
            raise ValueError("output_tokens must be >= 1")
        if self.kind == "prompt_edges" and not self.edges():
            raise ValueError("shape: no edge (give speculative_tokens, block_size or chunk_size)")
        if self.kind == "prompt_edges" and not self.lengths():
            raise ValueError(f"shape: offsets {self.offsets} drop every length (edge + offset must be >= 1 for "
                             f"some edge of {self.edges()})")
        if self.kind == "prompt_edges" and max(self.lengths()) > MAX_TOKENS:
            raise ValueError(f"shape: a length edge + offset = {max(self.lengths())} tokens is above "
                             f"{MAX_TOKENS} tokens, the longest prompt evalrun sends")
        if self.kind in ("cache_pressure", "concurrency_sweep") and self.prompt_tokens is None:
            raise ValueError(f"shape kind {self.kind} needs prompt_tokens")
        if self.kind == "concurrency_sweep" and not self.concurrency:
            raise ValueError("shape kind concurrency_sweep needs concurrency (in flight per pass, e.g. [1, 16])")
        if self.kind == "prefix_reuse":
            if self.prefix_tokens is None or self.prompt_tokens is None:
                raise ValueError("shape kind prefix_reuse needs prefix_tokens and prompt_tokens")
            if self.prompt_tokens <= self.prefix_tokens:
                raise ValueError(f"shape kind prefix_reuse: prompt_tokens {self.prompt_tokens} must exceed "
                                 f"prefix_tokens {self.prefix_tokens} (each prompt has its own suffix)")
        if self.planned_tokens() > MAX_SHAPE_TOKENS:
            raise ValueError(f"shape kind {self.kind} builds {self.planned_tokens()} prompt tokens in all, above "
                             f"the bound of {MAX_SHAPE_TOKENS} (2**24); use fewer or shorter prompts")
        return self

    def lengths(self) -> list[int]:
        """``prompt_edges``: every prompt length ``edge + offset`` that is at least 1 (one
        entry per edge and offset, repeats kept). Other kinds: empty."""
        return [at + off for at in self.edges().values() for off in self.offsets if at + off >= 1]

    def planned_tokens(self) -> int:
        """Prompt tokens this shape builds in all: ``prompt_edges`` its lengths times
        ``prompts_per_length``; ``prefix_reuse`` ``prompts * prompt_tokens``; the load
        shapes ``prompts * prompt_tokens`` per pass (one pass for ``cache_pressure``, one per
        ``concurrency`` entry for ``concurrency_sweep``)."""
        if self.kind == "prompt_edges":
            return sum(self.lengths()) * self.prompts_per_length
        passes = max(1, len(self.concurrency)) if self.kind == "concurrency_sweep" else 1
        return self.prompts * (self.prompt_tokens or 0) * passes

    def edges(self) -> dict[str, int]:
        """``prompt_edges``: edge name -> length in tokens: ``spec_k{k}`` (``k + 1``) per
        speculative count, ``block``, ``chunk``. Other kinds: empty."""
        if self.kind != "prompt_edges":
            return {}
        out = {f"spec_k{k}": k + 1 for k in sorted(set(self.speculative_tokens))}
        if self.block_size is not None:
            out["block"] = self.block_size
        if self.chunk_size is not None:
            out["chunk"] = self.chunk_size
        return out
