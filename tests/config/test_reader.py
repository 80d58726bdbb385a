"""The one reader (harness/config/reader.py) for the files the config and data stages read:
a config, a model list's entry or a data file that is a named pipe or a folder is refused
naming the file and what it is, never "not found", never a hang. Unit tier."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.config.loader import load_config
from harness.config.model_list import read_model_list, resolve_list_path
from harness.config.reader import present
from harness.config.schema import ConfigError
from harness.tasks.gsm8k import DataUnavailableError, load_gsm8k


def _make(path: Path, kind: str) -> Path:
    if kind == "pipe":
        os.mkfifo(path)
    else:
        path.mkdir()
    return path


@pytest.mark.parametrize("kind,what", [("pipe", "a named pipe"), ("folder", "a folder")])
def test_a_config_or_list_entry_that_is_not_a_file_is_named_as_such(tmp_path: Path, kind: str, what: str):
    cfg = _make(tmp_path / "c.yaml", kind)
    assert present(cfg) and resolve_list_path(str(cfg)) == cfg.resolve()
    with pytest.raises(ConfigError, match=f"{cfg}: cannot read config: it is {what}, not a regular file"):
        load_config(cfg)
    lst = tmp_path / "l.txt"
    lst.write_text("c.yaml\n")
    assert read_model_list(lst) == [cfg]  # the entry is there; reading it says what it is
    pipe_list = _make(tmp_path / "p.txt", kind)
    with pytest.raises(ConfigError, match=f"{pipe_list}: cannot read model list: it is {what}"):
        read_model_list(pipe_list)


def test_a_data_file_that_is_a_pipe_is_named_not_missing(tmp_path: Path):
    os.mkfifo(tmp_path / "test.jsonl")
    with pytest.raises(DataUnavailableError, match="test.jsonl: cannot read data file: it is a named pipe"):
        load_gsm8k("test", data_dir=tmp_path)
    with pytest.raises(DataUnavailableError, match="train.jsonl does not exist"):
        load_gsm8k("train", data_dir=tmp_path)


def test_present_counts_a_dangling_symlink(tmp_path: Path):
    (tmp_path / "l").symlink_to(tmp_path / "nowhere")
    assert present(tmp_path / "l") and not present(tmp_path / "nowhere")
