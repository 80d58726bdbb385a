"""harness.models.resolve: hub weights are fetched before any server starts; a local folder
is used as it is, and offline mode trusts the cache (the hub download is replaced by a
recorder: no network here).
"""

from __future__ import annotations

from harness.models.resolve import resolve_model
from harness.report.progress import Progress


def test_hub_weights_are_fetched_before_startup(monkeypatch, tmp_path):
    import huggingface_hub

    calls = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id: calls.append(repo_id) or str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert resolve_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16", Progress(quiet=True)) == \
        "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16"
    assert calls == ["nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16"]
    # a local folder is used as it is; offline mode trusts the cache
    assert resolve_model(str(tmp_path), Progress(quiet=True)) == str(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    resolve_model("org/other", Progress(quiet=True))
    assert calls == ["nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16"]
