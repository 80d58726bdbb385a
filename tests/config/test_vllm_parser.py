"""Server-argument spellings come from vLLM's own parser (harness/config/vllm_parser.py).

Every config of tests/data/vllm_gsm8k (vLLM's real files and the generated ones, one per
speculative spelling the installed parser accepts) is planned, and every variant's
command is parsed with the installed vLLM's real server parser: a variant planned
without speculation must parse to no speculative setting, a speculative one to exactly
the speculative config vLLM would build from the config's own server_args. No engine
starts; the parser needs vLLM importable (skipped otherwise).
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.config.schema import ConfigError
from harness.config.server_args import refuse_owned_flags
from harness.config.vllm_parser import (
    SNAPSHOT,
    current_table,
    installed_table,
    scan,
    snapshot_table,
    speculative_keys_of,
    table_from_parser,
    use_table,
)
from harness.engine.devices import PARALLEL_DESTS, variant_need
from harness.engine.launch import parser_check_argv
from harness.tasks.lm_eval_task import tokenizer_of

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_gsm8k"
GEN = DATA / "generated"
CONFIGS = sorted([*(DATA / "configs").glob("*.yaml"), *GEN.glob("*.yaml")])


@pytest.fixture(scope="module")
def vllm_parser():
    """``() -> a fresh vLLM server parser`` (make_arg_parser(FlexibleArgumentParser())) and
    EngineArgs, from the installed vLLM."""
    try:
        from vllm.engine.arg_utils import EngineArgs
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except Exception as e:  # noqa: BLE001 - any import failure means: cannot compare here
        pytest.skip(f"vLLM's server parser is not importable: {e}")
    return (lambda: make_arg_parser(FlexibleArgumentParser())), EngineArgs


def vllm_speculative(parser, engine_args, argv: list[str]) -> dict | None:
    """The speculative config vLLM builds from ``argv``: its parser's namespace, merged as
    ``EngineArgs.create_speculative_config`` merges the shorthands (vLLM's own method,
    stopped before it builds the typed config)."""
    def error(message):  # a flag of a newer vLLM (``--enable-kvpp``) is left aside, as argparse's parse_known_args
        if not message.startswith("unrecognized arguments"):
            raise SystemExit(message)

    parser.error = error
    ns = parser.parse_args(["--model", "m", *argv])
    ea = engine_args(**{k: getattr(ns, k) for k in ("speculative_config", "spec_method", "spec_model", "spec_tokens")})
    captured = {}

    class Stop(Exception):
        pass

    import vllm.engine.arg_utils as au
    real = au.SpeculativeConfig

    def capture(**kw):
        captured.update({k: v for k, v in kw.items() if not k.startswith("target_")})
        raise Stop

    au.SpeculativeConfig = capture
    try:
        if ea.create_speculative_config(None, None) is None:
            return None
    except Stop:
        return captured
    finally:
        au.SpeculativeConfig = real
    raise AssertionError("unreachable")


def server_args(path: Path) -> list[str]:
    return shlex.split(yaml.safe_load(path.read_text()).get("server_args") or "")


@pytest.mark.parametrize("path", [p for p in CONFIGS if p.stem not in ("Port-pinned",)], ids=lambda p: p.stem)
def test_every_variant_speculates_exactly_as_planned_under_vllms_parser(path, vllm_parser):
    make, engine_args = vllm_parser
    parser = make()
    want = vllm_speculative(parser, engine_args, server_args(path))
    cp = build_plan([load_config(path)], python=sys.executable).configs[0]
    assert cp.variants
    for v in cp.variants:
        # `vllm serve MODEL ARGS` as the pre-launch check parses it: --model MODEL ARGS
        args = [a.replace("{port}", "8000") for a in parser_check_argv(v.argv)[1]]
        got = vllm_speculative(make(), engine_args, args)
        if v.speculative_config is None:
            assert got is None, (path.stem, v.name, args)
        else:
            assert got == want and want is not None, (path.stem, v.name, got, want)
    assert (want is None) == all(v.speculative_config is None for v in cp.variants), path.stem


def test_one_generated_config_per_speculative_spelling_the_parser_accepts(vllm_parser):
    # every option string of every action that feeds vLLM's speculative config, read from the
    # installed parser, is the spelling of at least one config here
    make, engine_args = vllm_parser
    table = table_from_parser(make(), "installed", speculative_keys_of(engine_args.create_speculative_config))
    spellings = {o for d in table.speculative_keys for o in table.options_of(d)}
    assert {"--speculative-config", "-sc", "--spec-method", "--spec-model", "--spec-tokens"} <= spellings
    used: set[str] = set()
    for path in CONFIGS:
        with use_table(table):
            used |= {h.option for h in scan(server_args(path))[0] if h.dest in table.speculative_keys}
    assert spellings <= used, sorted(spellings - used)


@pytest.mark.usefixtures("vllm_parser")  # skips without vLLM
def test_the_snapshot_is_the_installed_parsers_table():
    # the same release: the whole table; another (vLLM's nightly): every spelling of every
    # setting evalrun reads or rewrites must still be the snapshot's, or the snapshot is stale
    import vllm

    snap, live = snapshot_table(), installed_table()
    regen = "regenerate: python -m harness.config.vllm_parser --write"
    if snap.vllm_version == vllm.__version__:
        assert live.as_json() == json.loads(SNAPSHOT.read_text()), regen
    read = {*live.speculative_keys, *snap.speculative_keys, "async_scheduling", "port", "host", "uds", "tokenizer",
            "config", *PARALLEL_DESTS.values()}
    for dest in sorted(read):
        assert sorted(live.options_of(dest)) == sorted(snap.options_of(dest)), (dest, regen)
    assert dict(live.speculative_keys) == dict(snap.speculative_keys), regen


def test_an_alias_added_to_the_parser_is_recognised_without_touching_evalrun(vllm_parser, tmp_path):
    make, engine_args = vllm_parser
    cfg = tmp_path / "Alias.yaml"
    cfg.write_text('model_name: m\naccuracy_threshold: 0.5\nserver_args: >-\n'
                   "  --draft-settings '{\"method\":\"mtp\",\"num_speculative_tokens\":2}' --overlap-scheduling\n"
                   "  --accelerators 2\n")
    # with vLLM 0.32's table the flags are unknown: a warning names the one that says "draft"
    c = load_config(cfg)
    assert [v for v in c.variants] == ["reference"]
    assert any("--draft-settings" in w.message and "speculation" in w.message for w in c.warnings)
    # a parser with the aliases: the same config plans reference without them, spec_sync, spec_async
    parser = make()
    parser.add_argument("--draft-settings", dest="speculative_config", type=json.loads)
    parser.add_argument("--overlap-scheduling", "--no-overlap-scheduling", dest="async_scheduling",
                        action=__import__("argparse").BooleanOptionalAction)
    parser.add_argument("--accelerators", dest="tensor_parallel_size", type=int)
    table = table_from_parser(parser, "test", speculative_keys_of(engine_args.create_speculative_config))
    with use_table(table):
        c = load_config(cfg)
        cp = build_plan([c], python=sys.executable).configs[0]
        need = variant_need(cp.variants[0].argv)
    assert set(c.variants) == {"reference", "spec_async"}  # the alias pins async scheduling on
    ref = next(v for v in cp.variants if v.name == "reference")
    assert "--draft-settings" not in ref.argv and "--overlap-scheduling" not in ref.argv
    assert ref.async_scheduling is True and need == 2
    spec = next(v for v in cp.variants if v.name == "spec_async")
    assert spec.speculative_config == {"method": "mtp", "num_speculative_tokens": 2}
    assert not any("--draft-settings" in w.message for w in c.warnings)


def test_plan_says_it_read_server_args_with_a_snapshot_and_its_version():
    snap = json.loads(SNAPSHOT.read_text())
    plan = build_plan([load_config(GEN / "MTP-short-sc.yaml")], python=sys.executable)
    assert f"snapshot of vLLM {snap['vllm_version']}" in plan.server_args_read_with
    assert current_table() is snapshot_table()
    assert plan.to_json()[0]["server_args_read_with"] == plan.server_args_read_with


def test_siblings_read_by_destination():
    # parallel sizes, owned flags and the tokenizer in spellings vLLM's parser accepts
    assert variant_need(["-pc", "2", "--tensor_parallel_size=2", "-pp=2"]) == 8  # -pc: unique prefix of -pcp
    for argv in (["--por", "8000"], ["--host=0.0.0.0"], ["--uds", "/tmp/s"]):
        with pytest.raises(ConfigError, match="evalrun sets --port and --host"):
            refuse_owned_flags(argv, "f")
    assert tokenizer_of(["--tokenizer", "a", "--tokenizer_mode", "auto", "--tokenizer=b"], "m") == "b"


def test_a_shorthand_and_the_same_key_in_the_json_are_refused_as_vllm_refuses_them(tmp_path):
    cfg = tmp_path / "Both.yaml"
    cfg.write_text("model_name: m\naccuracy_threshold: 0.5\nserver_args: >-\n"
                   "  --speculative-config '{\"method\":\"mtp\"}' --spec-method eagle\n")
    with pytest.raises(ConfigError, match=r"--spec-method and --speculative-config\['method'\] are mutually excl"):
        load_config(cfg)


@pytest.mark.usefixtures("vllm_parser")  # skips without vLLM
def test_the_plan_can_read_server_args_with_the_installed_parser(monkeypatch):
    import vllm

    monkeypatch.setenv("EVALRUN_SERVER_PARSER", "installed")
    table = current_table()
    assert table.source == "installed" and table.vllm_version == vllm.__version__
    plan = build_plan([load_config(GEN / "MTP-short-sc.yaml")], python=sys.executable)
    assert plan.server_args_read_with == f"vLLM {vllm.__version__}'s server parser (installed)"
    assert {v.name for v in plan.configs[0].variants} == {"reference", "spec_sync", "spec_async"}
