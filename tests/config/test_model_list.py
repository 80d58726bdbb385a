"""Model lists: found by name, read line by line, every missing entry named; a missing
config or list entry names the nearest names."""

from __future__ import annotations

from pathlib import Path

import pytest

import harness.config.model_list as model_list
from harness.config.model_list import load_model_list, nearest_names, read_model_list, resolve_list_path
from harness.config.schema import ConfigError
from tests.config.texts import VLLM_FORM, write

REPO = Path(__file__).resolve().parents[2]


def test_model_list_resolution_and_comments(tmp_path):
    write(tmp_path, "a.yaml", VLLM_FORM)
    lst = write(tmp_path, "models.txt", "# comment\n\na.yaml  # trailing comment\n")
    assert read_model_list(lst) == [tmp_path / "a.yaml"]
    configs = load_model_list(lst)
    assert [c.name for c in configs] == ["a"]


def test_entry_missing_beside_its_list_is_never_evalruns_config_of_that_name(tmp_path):
    # vLLM's conftest looks for an entry beside its list only; evalrun's configs/
    # has a file of this name, and it must not be planned in its place
    assert (REPO / "configs" / "Qwen3-Next-80B-A3B-Instruct.yaml").is_file()
    lst = write(tmp_path, "models.txt", "Qwen3-Next-80B-A3B-Instruct.yaml\n")
    with pytest.raises(ConfigError) as e:
        read_model_list(lst)
    assert f"{lst}:1: 'Qwen3-Next-80B-A3B-Instruct.yaml' (looked in {tmp_path})" in str(e.value)


def test_evalruns_own_lists_take_their_entries_from_configs():
    lst = REPO / "model_lists" / "models-h200.txt"
    assert read_model_list(lst)[0] == REPO / "configs" / "Nemotron-3-Super-120B-A12B-BF16.yaml"


def test_model_list_missing_entries_all_named(tmp_path):
    write(tmp_path, "a.yaml", VLLM_FORM)
    lst = write(tmp_path, "models.txt", "a.yaml\nnope-1.yaml\n# x\nnope-2.yaml\n")
    with pytest.raises(ConfigError) as e:
        read_model_list(lst)
    msg = str(e.value)
    assert "2 missing" in msg and f"{lst}:2: 'nope-1.yaml'" in msg and f"{lst}:4: 'nope-2.yaml'" in msg


def test_empty_and_missing_list(tmp_path):
    with pytest.raises(ConfigError, match="names no config"):
        read_model_list(write(tmp_path, "empty.txt", "# only comments\n\n"))
    with pytest.raises(ConfigError, match="not found"):
        read_model_list(tmp_path / "absent.txt")


def test_shipped_lists_load():
    for name in ("models-h200.txt", "models-cpu.txt"):
        configs = load_model_list(name)
        assert configs, name


def test_single_config_by_name_resolves_in_configs_dir():
    assert resolve_list_path("tiny-qwen3next-mtp-cpu.yaml") == REPO / "configs" / "tiny-qwen3next-mtp-cpu.yaml"


@pytest.fixture
def fake_dirs(tmp_path, monkeypatch):
    configs, lists = tmp_path / "configs", tmp_path / "lists"
    configs.mkdir()
    lists.mkdir()
    for n in ("Big-Model-120B-A12B-BF16-MTP.yaml", "Big-Model-30B-A3B-BF16-ngram.yaml", "Other-7B.yaml"):
        (configs / n).write_text("model_name: a\naccuracy_threshold: 0.5\n")
    (lists / "models-gpu.txt").write_text("Other-7B.yaml\n")
    monkeypatch.setattr(model_list, "CONFIGS_DIR", configs)
    monkeypatch.setattr(model_list, "MODEL_LISTS_DIR", lists)
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
