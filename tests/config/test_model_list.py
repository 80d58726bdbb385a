"""Model lists: found by name, read line by line, every missing entry named."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.model_list import load_model_list, read_model_list, resolve_list_path
from harness.config.schema import ConfigError
from tests.config.texts import VLLM_FORM, write

REPO = Path(__file__).resolve().parents[2]


def test_model_list_resolution_and_comments(tmp_path):
    write(tmp_path, "a.yaml", VLLM_FORM)
    lst = write(tmp_path, "models.txt", "# comment\n\na.yaml  # trailing comment\n")
    assert read_model_list(lst) == [tmp_path / "a.yaml"]
    configs = load_model_list(lst)
    assert [c.name for c in configs] == ["a"]


def test_model_list_falls_back_to_configs_dir(tmp_path):
    lst = write(tmp_path, "models.txt", "Qwen3-Next-80B-A3B-Instruct.yaml\n")
    assert read_model_list(lst) == [REPO / "configs" / "Qwen3-Next-80B-A3B-Instruct.yaml"]


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
