"""evalrun's own tiny hybrid model: build, tokenizer, training with its MTP layer.

``builtin:<name>`` model references in configs resolve here (:func:`ensure_model`).
:mod:`harness.models.tiny` builds untrained models (architecture, checkpoint export, the
cache) from their recipe (:mod:`harness.models.recipe`) with the character tokenizer
(:mod:`harness.models.tokenizer`); :mod:`harness.models.training` trains one with its MTP
layer (:mod:`harness.models.mtp`) on the synthetic arithmetic task from its recipe
(:mod:`harness.models.training_recipe`), and :mod:`harness.models.shipped` finds the
checkpoint evalrun ships. Training imports ``tiny``, never the other way round.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from harness.models import tiny, training


def ensure_model(name: str, cache_dir: Path | None = None, progress: Callable[[str], Any] = print) -> Path:
    """Return the folder of the built-in model ``name``, building or training it on first use.

    Args:
        name: a key of :data:`harness.models.training.TRAINED_MODELS` (trained on the
            synthetic arithmetic task) or of :data:`harness.models.tiny.TINY_MODELS`
            (random weights).
        cache_dir: cache root; None means :func:`harness.models.tiny.default_cache_dir`.
        progress: called with one-line status messages.

    Raises:
        harness.models.tiny.TinyModelError: unknown name, missing libraries, or a
            failed build (training errors are a subclass).
    """
    if name in training.TRAINED_MODELS:
        return training.ensure_trained_model(name, cache_dir, progress)
    if name in tiny.TINY_MODELS:
        return tiny.ensure_tiny_model(name, cache_dir, progress)
    raise tiny.TinyModelError(
        f"unknown built-in model {name!r}; known: {sorted(tiny.TINY_MODELS) + sorted(training.TRAINED_MODELS)}"
    )
