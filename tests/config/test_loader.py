"""harness.config.loader's model lists and config names: a name without suffix resolves to
its file, a missing config or list entry names the nearest names."""

from __future__ import annotations

import pytest

import harness.config.loader as loader
from harness.config.loader import ConfigError, nearest_names, read_model_list, resolve_list_path


@pytest.fixture
def fake_dirs(tmp_path, monkeypatch):
    configs, lists = tmp_path / "configs", tmp_path / "lists"
    configs.mkdir()
    lists.mkdir()
    for n in ("Big-Model-120B-A12B-BF16-MTP.yaml", "Big-Model-30B-A3B-BF16-ngram.yaml", "Other-7B.yaml"):
        (configs / n).write_text("model_name: a\naccuracy_threshold: 0.5\n")
    (lists / "models-gpu.txt").write_text("Other-7B.yaml\n")
    monkeypatch.setattr(loader, "CONFIGS_DIR", configs)
    monkeypatch.setattr(loader, "MODEL_LISTS_DIR", lists)
    return configs, lists


@pytest.mark.usefixtures("fake_dirs")
def test_config_not_found_lists_the_nearest_names():
    with pytest.raises(ConfigError) as e:
        resolve_list_path("Big-Model-120B-A12B-BF16")
    msg = str(e.value)
    assert "nearest names: Big-Model-120B-A12B-BF16-MTP.yaml" in msg      # the -MTP file first
    with pytest.raises(ConfigError, match="nearest names: models-gpu.txt"):
        resolve_list_path("models-gpuu.txt")
    # a name without suffix resolves to the .yaml / .txt of that name
    assert resolve_list_path("Other-7B").name == "Other-7B.yaml"
    assert resolve_list_path("models-gpu").name == "models-gpu.txt"


def test_missing_list_entry_lists_the_nearest_names(fake_dirs):
    _, lists = fake_dirs
    (lists / "l.txt").write_text("# comment\nBig-Model-30B-A3B-BF16.yaml\n")
    with pytest.raises(ConfigError) as e:
        read_model_list(lists / "l.txt")
    assert ":2: 'Big-Model-30B-A3B-BF16.yaml'" in str(e.value)
    assert "nearest names: Big-Model-30B-A3B-BF16-ngram.yaml" in str(e.value)


def test_nearest_names_generic():
    names = ["Nemotron-3-Super-120B-A12B-BF16-MTP.yaml", "Qwen3-Next-80B-A3B-Instruct-MTP.yaml"]
    assert nearest_names("Nemotron-3-Super-120B-A12B-BF16", names)[0] == names[0]
    assert nearest_names("qwen3-next-80b-a3b-instruct", names)[0] == names[1]
    assert nearest_names("zzz", names) == []

