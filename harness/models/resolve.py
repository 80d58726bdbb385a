"""Model resolution: a config's ``model`` made available before any server starts."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from harness.models import ensure_model


def resolve_model(model: str, progress: Any) -> str:
    """Make the model available before any server's start-up clock runs.

    * ``builtin:<name>`` -> the folder of evalrun's built model (built on first use).
    * a local folder or file -> unchanged.
    * a Hugging Face hub id (``org/name``) -> its weights are fetched now with
      ``huggingface_hub.snapshot_download`` (a no-op when already cached; skipped when
      ``HF_HUB_OFFLINE`` is set), so ``startup_max_wait_seconds`` measures start-up
      and not a download, as vLLM's own test utilities do. The hub id is returned
      unchanged: the server command stays the one a person would type, and vLLM finds
      the files in the same cache.

    Args:
        model: the config's ``model``.
        progress: anything with ``log(message)`` (the run's progress reporter).

    Raises:
        RuntimeError: the built-in model cannot be built (e.g. torch is missing).
        Exception: from ``snapshot_download`` (unknown repo, no network, gated model);
            the runner records it as "model cannot be prepared".
    """
    if model.startswith("builtin:"):
        name = model.split(":", 1)[1]
        return str(ensure_model(name, progress=progress.log))
    if Path(model).expanduser().exists() or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return model
    if model.count("/") == 1 and not model.startswith((".", "/", "~")):
        from huggingface_hub import snapshot_download

        t0 = time.monotonic()
        progress.log(f"{model}: fetching weights from the Hugging Face hub before start-up (snapshot_download)")
        local = snapshot_download(repo_id=model)
        progress.log(f"{model}: weights ready in {local} ({time.monotonic() - t0:.1f}s)")
    return model
