"""The trained model's modules and its training objective: the main model and its MTP
layer built from a recipe, the MTP forward as vLLM runs it (one step and the second,
chained step), and the loss (:mod:`harness.models.training` describes the maths)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import harness.models.tiny as tm
from harness.models.tokenizer import padded_vocab_size
from harness.models.training_recipe import TrainRecipe

if TYPE_CHECKING:
    import torch
    from torch.nn.attention.flex_attention import BlockMask
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    from harness.models.tiny import MTPBlock


def build_modules(recipe: TrainRecipe) -> tuple[Qwen3NextForCausalLM, MTPBlock, Qwen3NextConfig, int]:
    """Build the initialised main model and MTP block (torch RNG seeded by the recipe).

    Returns:
        ``(model, mtp, hf_config, n_tokens)``: a ``transformers``
        ``Qwen3NextForCausalLM``, the MTP block of
        :func:`harness.models.tiny._build_mtp_module` (``fc``,
        ``pre_fc_norm_embedding``, ``pre_fc_norm_hidden``, ``layers[0]``, ``norm``),
        its ``Qwen3NextConfig`` and the tokenizer size (= vocabulary size,
        :func:`harness.models.tiny.padded_vocab_size`: 99 base ids padded with
        reserved tokens to a multiple of ``vocab_multiple``). The global torch RNG is left seeded
        (callers train right after).
    """
    import torch
    from transformers import Qwen3NextForCausalLM

    n_tokens = padded_vocab_size(recipe.model.vocab_multiple)
    cfg = tm.build_hf_config(recipe.model, n_tokens)
    torch.manual_seed(recipe.model.seed)
    model = Qwen3NextForCausalLM(cfg)
    mtp = tm.build_mtp_module(model, cfg)
    return model, mtp, cfg, n_tokens


def _causal_mask(config: Qwen3NextConfig, x: torch.Tensor, position_ids: torch.Tensor,
                 ) -> torch.Tensor | BlockMask | None:
    from transformers.masking_utils import create_causal_mask

    return create_causal_mask(config=config, inputs_embeds=x, attention_mask=None,
                              past_key_values=None, position_ids=position_ids)


def _mtp_input(model: Qwen3NextForCausalLM, mtp: MTPBlock, hidden: torch.Tensor,
               next_ids: torch.Tensor) -> torch.Tensor:
    """``fc(cat([pre_fc_norm_embedding(embed(next_ids)), pre_fc_norm_hidden(hidden)]))``."""
    import torch

    e = model.model.embed_tokens(next_ids)
    return mtp.fc(torch.cat([mtp.pre_fc_norm_embedding(e), mtp.pre_fc_norm_hidden(hidden)], dim=-1))


def _mtp_block(model: Qwen3NextForCausalLM, mtp: MTPBlock, z: torch.Tensor, positions: torch.Tensor,
               mask: torch.Tensor | BlockMask | None) -> torch.Tensor:
    """The MTP decoder layer then ``mtp.norm``; ``positions`` ``[1, L]``, ``mask`` 4-D or None."""
    rope = model.model.rotary_emb(z, positions)
    if mask is None:
        mask = _causal_mask(model.config, z, positions)
    z = mtp.layers[0](z, position_embeddings=rope, attention_mask=mask, position_ids=positions)
    return mtp.norm(z)


def mtp_forward(model: Qwen3NextForCausalLM, mtp: MTPBlock, hidden: torch.Tensor,
                next_ids: torch.Tensor) -> torch.Tensor:
    """vLLM's ``Qwen3NextMultiTokenPredictor.forward`` in ``transformers`` modules.

    Args:
        model: the ``Qwen3NextForCausalLM`` (its ``embed_tokens`` and rotary
            embedding are used; vLLM shares the embedding and ``lm_head`` too).
        mtp: the MTP block of :func:`build_modules`.
        hidden: ``[B, T, H]`` float, the main model's final-norm output at positions
            ``0..T-1``.
        next_ids: ``[B, T]`` long, the token after each of those positions.

    Returns:
        ``[B, T, H]``: the MTP hidden state after ``mtp.norm``; ``model.lm_head`` of
        it gives logits ``[B, T, vocab]`` for the token two places after each input
        position. Causal: position t depends on inputs at positions <= t only.
    """
    import torch

    z = _mtp_input(model, mtp, hidden, next_ids)
    pos = torch.arange(z.shape[1], device=z.device).unsqueeze(0)
    return _mtp_block(model, mtp, z, pos, None)


def mtp_second_step(model: Qwen3NextForCausalLM, mtp: MTPBlock, hidden: torch.Tensor, next_ids: torch.Tensor,
                    first_out: torch.Tensor, next2_ids: torch.Tensor) -> torch.Tensor:
    """The second draft step as vLLM runs it (one MTP layer, two speculative tokens).

    vLLM's proposer (``llm_base_proposer.py``) first runs the MTP layer on
    ``(h_t, x_{t+1})`` at positions ``t`` (these fill the MTP layer's KV cache), then
    applies it once more at position ``p + 1`` to ``(out_p, x̂_{p+2})``, where
    ``out_p`` is its own output (after ``mtp.norm``) and ``x̂_{p+2}`` the token it
    drafted; that query attends to the first-step keys at positions ``<= p`` and to
    itself. Here every ``p`` is done at once: the layer runs on the concatenation
    ``[first-step inputs (positions 0..L-1); second-step inputs (positions 1..L2)]``
    with a mask that lets second-step query ``i`` see first-step keys ``0..i`` and
    itself only.

    Args:
        hidden: ``[B, L, H]`` main-model outputs (post final norm).
        next_ids: ``[B, L]`` tokens ``x_{t+1}``.
        first_out: ``[B, L2, H]`` with ``L2 <= L``: :func:`mtp_forward` outputs at
            positions ``0..L2-1``.
        next2_ids: ``[B, L2]`` tokens ``x_{t+2}`` (teacher forcing: the true token in
            place of the draft).

    Returns:
        ``[B, L2, H]``: second-step outputs after ``mtp.norm``; ``lm_head`` of row
        ``t`` predicts ``x_{t+3}``.
    """
    import torch

    z1 = _mtp_input(model, mtp, hidden, next_ids)
    z2 = _mtp_input(model, mtp, first_out, next2_ids)
    L, L2 = z1.shape[1], z2.shape[1]
    pos = torch.cat([torch.arange(L), torch.arange(1, L2 + 1)]).unsqueeze(0)
    n = L + L2
    allowed = torch.zeros(n, n, dtype=torch.bool)
    allowed[:L, :L] = torch.ones(L, L, dtype=torch.bool).tril()
    allowed[L:, :L2] = torch.ones(L2, L2, dtype=torch.bool).tril()  # first-step keys 0..i
    idx = torch.arange(L2)
    allowed[L + idx, L + idx] = True  # and itself
    mask = torch.zeros(n, n, dtype=z1.dtype).masked_fill(~allowed, torch.finfo(z1.dtype).min)[None, None]
    out = _mtp_block(model, mtp, torch.cat([z1, z2], dim=1), pos, mask)
    return out[:, L:]


def training_loss(model: Qwen3NextForCausalLM, mtp: MTPBlock, ids: torch.Tensor, mtp_lambda: float,
                  mtp2_lambda: float = 0.0) -> tuple[torch.Tensor, dict[str, float]]:
    """Joint loss of a batch.

    Args:
        ids: ``[B, T + 1]`` long; inputs are ``ids[:, :T]``.
        mtp_lambda, mtp2_lambda: weights of the MTP terms (see module docstring).

    Returns:
        ``(loss, parts)``: the scalar loss tensor and a dict of float parts
        ``{"main", "mtp", "mtp2"}`` (mean cross-entropies in nats; ``mtp2`` is NaN
        when ``mtp2_lambda`` is 0).
    """
    import torch.nn.functional as F

    x = ids[:, :-1]
    T = x.shape[1]
    h = model.model(input_ids=x).last_hidden_state  # post final norm, [B, T, H]
    logits = model.lm_head(h)
    main = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
    # MTP at t: (h_t, x_{t+1}) -> x_{t+2}, t = 0..T-1 (ids holds x_0..x_T).
    m1 = mtp_forward(model, mtp, h[:, : T - 1], ids[:, 1:T])
    mtp_ce = F.cross_entropy(model.lm_head(m1).flatten(0, 1), ids[:, 2:].flatten())
    loss = main + mtp_lambda * mtp_ce
    parts = {"main": main.item(), "mtp": mtp_ce.item(), "mtp2": float("nan")}
    if mtp2_lambda > 0:
        # second application at t: (m1_t, x_{t+2}) -> x_{t+3}, as vLLM runs it
        m2 = mtp_second_step(model, mtp, h[:, : T - 1], ids[:, 1:T], m1[:, : T - 2], ids[:, 2:T])
        mtp2 = F.cross_entropy(model.lm_head(m2).flatten(0, 1), ids[:, 3:].flatten())
        loss = loss + mtp2_lambda * mtp2
        parts["mtp2"] = mtp2.item()
    return loss, parts
