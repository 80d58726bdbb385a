"""A ``--config-list-file`` read as vLLM's GSM8K conftest reads it.

The reference is vLLM's own conftest (``tests/data/vllm_gsm8k/test/conftest.py.txt``, a
copy of vLLM's ``tests/evals/gsm8k/conftest.py``), executed with ``__file__`` in a vLLM-like
checkout built from vLLM's real lists and configs (``tests/data/vllm_gsm8k/configs``):
for each spelling vLLM's CI uses, evalrun's reading gives the same configs, in the same
order, and prints the same lines.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from harness.config.vllm_list import read_as_vllm, resolve_as_vllm, vllm_test_dir
from harness.pytest_plugin import no_test_message

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_gsm8k"
CONFTEST = (DATA / "test" / "conftest.py.txt").read_text(encoding="utf-8")


@pytest.fixture
def checkout(tmp_path):
    """``<tmp>/tests/evals/gsm8k/`` with vLLM's test file (empty stand-in), a list whose
    second entry is missing beside it, and vLLM's real configs and lists."""
    gsm8k = tmp_path / "tests" / "evals" / "gsm8k"
    shutil.copytree(DATA / "configs", gsm8k / "configs")
    (gsm8k / "test_gsm8k_correctness.py").write_text("")
    (gsm8k / "configs" / "models-one-missing.txt").write_text(
        "# a comment\nQwen3-0.6B-FP8.yaml\n\nQwen3-Next-80B-A3B-Instruct.yaml\nGPT-OSS-20B.yaml  # inline\n")
    return tmp_path


def vllm_reads(spelling: str, gsm8k: Path, capsys) -> tuple[list[Path], list[str]]:
    """(configs, printed lines) of vLLM's conftest for ``spelling``."""
    ns: dict = {"__file__": str(gsm8k / "conftest.py")}
    exec(compile(CONFTEST, "vllm_conftest", "exec"), ns)
    seen: dict = {"values": []}

    class Metafunc:
        fixturenames = ["config_filename"]  # noqa: RUF012 - a stand-in

        class config:
            @staticmethod
            def getoption(name):
                assert name == "--config-list-file"
                return spelling

        @staticmethod
        def parametrize(name, values, ids):
            seen["values"] = list(values)
            assert ids == [v.stem for v in values]

    capsys.readouterr()
    ns["pytest_generate_tests"](Metafunc)
    return seen["values"], capsys.readouterr().out.splitlines()


SPELLINGS = [
    ("tests", "configs/models-small.txt"),            # vLLM's CI: from tests/, 13 of 25 invocations
    ("tests", "configs/models-h200.txt"),
    ("tests", "evals/gsm8k/configs/models-spec-decode.txt"),  # the working directory
    ("tests", "models-h200.txt"),                      # bare: vLLM finds nothing
    ("tests", "configs/models-one-missing.txt"),       # an entry missing beside its list
    (".", "tests/evals/gsm8k/configs/dspark_list.txt"),  # from the repository root
    (".", "configs/models-small.txt"),                 # the test folder, seen from the root
]


@pytest.mark.parametrize(("where", "spelling"), SPELLINGS)
def test_the_same_configs_and_lines_as_vllms_conftest(checkout, capsys, monkeypatch, where, spelling):
    cwd = checkout / where
    monkeypatch.chdir(cwd)
    gsm8k = checkout / "tests" / "evals" / "gsm8k"
    want, printed = vllm_reads(spelling, gsm8k, capsys)
    assert vllm_test_dir(cwd.resolve()) == gsm8k.resolve()
    got = read_as_vllm(spelling, gsm8k, cwd)
    assert got.configs == want
    assert got.log == printed


def test_a_missing_entry_is_reported_and_never_found_elsewhere(checkout):
    gsm8k = checkout / "tests" / "evals" / "gsm8k"
    got = read_as_vllm("configs/models-one-missing.txt", gsm8k, checkout)
    # evalrun's own configs/ has Qwen3-Next-80B-A3B-Instruct.yaml: it is not a substitute
    assert [p.name for p in got.configs] == ["Qwen3-0.6B-FP8.yaml"]
    assert got.missing == [(4, gsm8k / "configs" / "Qwen3-Next-80B-A3B-Instruct.yaml"),
                           (5, gsm8k / "configs" / "GPT-OSS-20B.yaml  # inline")]
    assert f"  ✗ Missing: {gsm8k / 'configs' / 'Qwen3-Next-80B-A3B-Instruct.yaml'}" in got.log


def test_a_bare_list_name_is_not_evalruns_list_of_that_name(checkout):
    gsm8k = checkout / "tests" / "evals" / "gsm8k"
    got = read_as_vllm("models-h200.txt", gsm8k, checkout / "tests")
    assert not got.found and got.configs == []
    assert got.list_path == checkout / "tests" / "models-h200.txt"


def test_absolute_paths_are_taken_as_given(tmp_path):
    lst = DATA / "configs" / "models-small.txt"
    assert resolve_as_vllm(str(lst), tmp_path, tmp_path) == lst
    assert vllm_test_dir(tmp_path) is None


def test_a_list_that_is_a_named_pipe_is_named_never_waited_on(tmp_path):
    """vLLM's conftest would block on a pipe; evalrun's one reader names it (harness.config.reader)."""
    fifo = tmp_path / "configs.txt"
    os.mkfifo(fifo)
    read = read_as_vllm(str(fifo), tmp_path, tmp_path)
    assert read.configs == [] and read.unreadable is not None and "named pipe" in read.unreadable
    assert "cannot be read" in no_test_message(str(fifo), read) and "named pipe" in no_test_message(str(fifo), read)
