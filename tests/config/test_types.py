"""One validated type per kind of value (harness/config/types.py): the named
cases of config keys, each refused at load naming the file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.cli.app import broken_pipe_message
from harness.config.loader import load_config
from harness.config.shape_spec import MAX_SHAPE_TOKENS, SHAPE_SOURCE_QUESTIONS
from harness.config.types import MAX_TOKENS, Shard, check_environment, check_name_text, cli_type
from harness.tasks.synthetic import generate_splits

from .texts import HEAD, err, write_text

SHAPE = """\
model: x
server_args: --max-num-batched-tokens 64
variants:
  reference: {}
  spec: {speculative_config: {method: mtp, num_speculative_tokens: 2}}
tasks:
  edges:
    kind: shape
    shape: SHAPE
"""


def shape_cfg(tmp_path: Path, shape: str) -> Path:
    return write_text(tmp_path, SHAPE.replace("SHAPE", shape))


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", "1e400"])
def test_an_infinite_temperature_is_refused_not_sent_as_null(tmp_path: Path, value: str) -> None:
    vllm = err(write_text(tmp_path, HEAD + f"temperature: {value}\n"))
    assert ":3: key 'temperature'" in vllm
    native = err(write_text(tmp_path, "model: x\nvariants: {reference: {}}\ntasks:\n"
                            f"  t: {{kind: synthetic, temperature: {value}}}\n", name="n.yaml"))
    assert ":4: key 'tasks.t.temperature'" in native


def test_every_float_key_is_finite(tmp_path: Path) -> None:
    # a key with only a lower bound (near_tie_nats >= 0) took .inf before
    msg = err(write_text(tmp_path, "model: x\nvariants: {reference: {}, b: {}}\ntasks: {t: {kind: synthetic}}\n"
                         "comparisons:\n  - {baseline: reference, candidate: b, near_tie_nats: .inf}\n"))
    assert "near_tie_nats" in msg and "finite" in msg


def test_negative_speculative_tokens_of_a_shape_are_refused(tmp_path: Path) -> None:
    msg = err(shape_cfg(tmp_path, "{kind: prompt_edges, speculative_tokens: [-2, 2]}"))
    assert "tasks.edges.shape.speculative_tokens.0" in msg and "greater than or equal to 1" in msg


def test_a_100m_token_prefix_reuse_is_refused_stating_the_bound(tmp_path: Path) -> None:
    msg = err(shape_cfg(tmp_path, "{kind: prefix_reuse, prefix_tokens: 100000000, prompt_tokens: 100000001}"))
    assert "tasks.edges.shape.prefix_tokens" in msg and str(MAX_TOKENS) in msg


def test_a_shape_that_builds_too_many_tokens_in_all_is_refused(tmp_path: Path) -> None:
    msg = err(shape_cfg(tmp_path, "{kind: prefix_reuse, prefix_tokens: 1000000, prompt_tokens: 1000001, "
                        "prompts: 100}"))
    assert f"builds {100 * 1000001} prompt tokens" in msg and str(MAX_SHAPE_TOKENS) in msg


def test_offsets_that_drop_every_length_are_refused_at_load_and_in_the_dry_run(tmp_path: Path, capsys) -> None:
    p = shape_cfg(tmp_path, "{kind: prompt_edges, speculative_tokens: [2], offsets: [-3, -10]}")
    msg = err(p)
    assert "tasks.edges.shape" in msg and "drop every length" in msg
    assert main(["--config", str(p), "--dry-run"]) == 2
    out = capsys.readouterr().err
    assert "drop every length" in out and "Traceback" not in out


def test_load_shapes_without_prompt_tokens_or_concurrency_are_refused_at_load(tmp_path: Path) -> None:
    assert "needs prompt_tokens" in err(shape_cfg(tmp_path, "{kind: cache_pressure, prompts: 4}"))
    assert "needs concurrency" in err(shape_cfg(tmp_path, "{kind: concurrency_sweep, prompt_tokens: 16}"))
    assert "less than or equal to 200" in err(shape_cfg(tmp_path, "{kind: concurrency_sweep, prompt_tokens: 16, "
                                                                   "concurrency: [1], prompts: 500}"))


def test_the_shape_source_bound_is_the_synthetic_test_split() -> None:
    assert SHAPE_SOURCE_QUESTIONS == len(generate_splits().test)


@pytest.mark.parametrize("key,value", [("num_speculative_tokens", -1), ("num_speculative_tokens", 0)])
def test_a_speculative_count_below_one_is_refused(tmp_path: Path, key: str, value: int) -> None:
    msg = err(write_text(tmp_path, "model: x\nvariants:\n  reference: {}\n"
                         f"  s: {{speculative_config: {{method: mtp, {key}: {value}}}}}\n"
                         "tasks: {t: {kind: synthetic}}\n"))
    assert f"variants.s.speculative_config.{key}" in msg


def test_seeds_and_timeouts_are_bounded(tmp_path: Path) -> None:
    assert "tasks.t.seed" in err(write_text(tmp_path, "model: x\nvariants: {reference: {}}\n"
                                            "tasks: {t: {kind: synthetic, seed: -1}}\n"))
    assert "request_timeout_seconds" in err(write_text(tmp_path, HEAD + "request_timeout_seconds: 1e308\n",
                                                       name="v.yaml"))


def test_the_shipped_configs_still_load() -> None:
    for p in sorted(Path("configs").glob("*.yaml")):
        load_config(p)


@pytest.mark.parametrize("name", ["..", "a/b", "a" * 101, "", "é", "-x", "a..b"])
def test_a_name_that_is_no_safe_path_component_is_refused(name: str) -> None:
    with pytest.raises(ValueError):
        check_name_text(name)


def test_environment_variables_are_checked_naming_the_variable(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    bad = check_environment({"EVALRUN_STOP_GRACE_SECONDS": "1e308", "EVALRUN_DATA_DIR": str(f),
                             "EVALRUN_SERVER_PARSER": "nosuch", "EVALRUN_NUMERICS_NOISE": "nan",
                             "EVALRUN_BUILD_PIP_ARGS": "--index-url 'x", "EVALRUN_NUMERICS_NOISE_SEED": "-1"})
    named = [b.split("=", 1)[0] for b in bad]
    assert named == ["EVALRUN_STOP_GRACE_SECONDS", "EVALRUN_DATA_DIR", "EVALRUN_BUILD_PIP_ARGS",
                     "EVALRUN_SERVER_PARSER", "EVALRUN_NUMERICS_NOISE_SEED", "EVALRUN_NUMERICS_NOISE"], bad
    assert check_environment({"EVALRUN_STOP_GRACE_SECONDS": "5", "EVALRUN_SERVER_PARSER": "Installed"}) == []


def test_an_untyped_speculative_key_that_is_not_finite_is_refused_not_sent_as_null(tmp_path: Path) -> None:
    msg = err(write_text(tmp_path, "model: x\nvariants:\n  reference: {}\n"
                         "  s: {speculative_config: {method: mtp, num_speculative_tokens: 2, "
                         "dspark_budget_frac: .inf}}\n"
                         "tasks: {t: {kind: synthetic}}\n"))
    assert "variants.s.speculative_config" in msg and "dspark_budget_frac" in msg and "not finite" in msg


@pytest.mark.parametrize(("text", "want"), [("2/4", "2/4"), (" 1/1 ", "1/1"), ("01/3", "1/3"),
                                             ("4096/4096", "4096/4096")])
def test_a_shard_is_i_of_n(text: str, want: str) -> None:
    assert cli_type(Shard, "shard")(text) == want


@pytest.mark.parametrize(("text", "says"), [
    ("3/2", "1 <= I <= N"), ("0/2", "1 <= I <= N"), ("2", "expected I/N"), ("a/b", "expected I/N"),
    ("-1/2", "expected I/N"), ("1/2/3", "expected I/N"), ("1/4097", "at most 4096 shards"), ("1.5/2", "expected I/N")])
def test_a_bad_shard_is_refused_naming_the_option_before_any_run_folder(tmp_path: Path, capsys, text: str,
                                                                        says: str) -> None:
    code = main(["--config", "models-cpu.txt", f"--shard={text}", "--results-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "argument --shard" in err and says in err, err
    assert not (tmp_path / "r").exists()


def test_simulated_nights_are_bounded(tmp_path: Path, capsys) -> None:
    code = main(["calibrate", "--config", "models-cpu.txt", "--repeat", "2", "--simulate-nights", "10001",
                 "--results-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "argument --simulate-nights" in err and "10000" in err, err
    assert not (tmp_path / "r").exists()


def test_a_broken_pipe_names_the_run_folder_only_for_commands_that_write_one() -> None:
    for sub in (None, "calibrate", "selfcheck", "merge", "bisect"):
        assert "see the run folder for the verdict" in broken_pipe_message(sub)
    for sub in ("diff", "history", "doctor", "train-tiny"):
        msg = broken_pipe_message(sub)
        assert msg.startswith(f"evalrun {sub}: ") and "see the run folder" not in msg and "writes no run folder" in msg
