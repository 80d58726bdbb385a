"""The trained checkpoint shipped with evalrun (package data of ``harness.models``): found
when it matches its recipe and manifest, its manifest written, and two checkpoints
compared tensor by tensor (``evalrun train-tiny --compare``)."""

import hashlib
import json
from pathlib import Path
from typing import Any

import harness.models.tiny as tm
from harness.models.training_recipe import REQUIRED_FILES, TRAINED_MODELS, TrainRecipe, is_complete

#: Where trained checkpoints ship with evalrun (package data of ``harness.models``,
#: declared in pyproject.toml), one folder per name.
SHIPPED_DIR = Path(__file__).resolve().parent / "data"
#: Per-file SHA-256 of a shipped folder (written by :func:`write_manifest`).
MANIFEST = "MANIFEST.sha256.json"


def sha256_file(path: Path) -> str:
    """SHA-256 hex digest of the file at ``path`` (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(folder: Path) -> Path:
    """Write ``MANIFEST.sha256.json`` = ``{file name: sha256}`` of every file of ``folder``
    listed in :data:`REQUIRED_FILES` (the shipped checkpoint's integrity record)."""
    doc = {f: sha256_file(folder / f) for f in REQUIRED_FILES}
    tm.write_json(folder / MANIFEST, doc)
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
    if not is_complete(folder, recipe) or not (folder / MANIFEST).is_file():
        return None
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    if set(manifest) != set(REQUIRED_FILES):
        return None
    if any(sha256_file(folder / f) != digest for f, digest in manifest.items()):
        return None
    return folder


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
              Any] = {"file_identical": sha256_file(a / "model.safetensors") == sha256_file(b / "model.safetensors")}
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
