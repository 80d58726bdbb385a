"""Flag spellings (harness/config/vllm_args.py) against the installed vLLM's own
``FlexibleArgumentParser``: for every argv, evalrun's reading of the speculative config
and of the async-scheduling pin must equal what vLLM's parser hands to argparse. No
engine starts; the comparison needs vLLM importable (skipped otherwise)."""

from __future__ import annotations

import shlex
from argparse import ArgumentParser
from pathlib import Path

import pytest
import yaml

from harness.config.vllm_args import (
    SPEC_FLAG,
    ArgsError,
    flag_name,
    human_readable_int,
    pinned_async_scheduling,
    pop_json_flag,
)
from tests.config.test_vllm_parser import vllm_parser, vllm_speculative  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_gsm8k"

SPELLINGS = [
    ["--speculative-config", '{"method":"mtp","num_speculative_tokens":2}'],
    ['--speculative-config={"method":"mtp","num_speculative_tokens":2}'],
    ["--speculative_config", '{"method":"mtp","num_speculative_tokens":2}'],
    ['--speculative_config={"method":"mtp","num_speculative_tokens":2}'],
    ["--speculative_config.method", "mtp", "--speculative_config.num_speculative_tokens", "2"],
    ["--speculative_config.method=mtp", "--speculative-config.num_speculative_tokens=2"],
    ["--speculative-config.model", "org/draft", "--speculative-config.max_model_len", "1k"],
    ["--speculative-config.method", "suffix", "--speculative-config.x+", "a,b", "--speculative-config.x+", "c"],
    ["--speculative-config", '{"method":"ngram"}', "--speculative-config.num_speculative_tokens", "3"],
    ["--speculative-config", '{"method":"ngram"}', "--speculative-config", '{"method":"mtp"}'],
    ["--max-model-len", "4096", "--attention_config.indexer_kv_dtype=mxfp4"],
]
PINS = [
    (["--async-scheduling"], True), (["--async_scheduling"], True), (["--no-async-scheduling"], False),
    (["--no_async_scheduling"], False), (["--async-scheduling", "--no-async-scheduling"], False), ([], None),
]


def real_argvs() -> list[list[str]]:
    out = []
    for p in sorted(DATA.rglob("*.yaml")):
        sa = yaml.safe_load(p.read_text()).get("server_args")
        if sa:
            out.append(shlex.split(sa))
    return out


@pytest.fixture(scope="module")
def vllm_preprocess():
    """``argv -> the argv vLLM's FlexibleArgumentParser passes on to argparse``."""
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except Exception as e:  # noqa: BLE001 - any import failure means: cannot compare here
        pytest.skip(f"vLLM's FlexibleArgumentParser is not importable: {e}")

    class Seen(Exception):
        pass

    class _Stop(ArgumentParser):
        def parse_args(self, args=None, namespace=None):  # what FlexibleArgumentParser hands on
            raise Seen(list(args))

    class Capture(FlexibleArgumentParser, _Stop):
        pass

    parser = Capture(add_help=False)

    def run(argv: list[str]) -> list[str]:
        try:
            parser.parse_args(list(argv))
        except Seen as e:
            return e.args[0]
        raise AssertionError("FlexibleArgumentParser did not hand the arguments on")
    return run


@pytest.mark.parametrize("argv", SPELLINGS + real_argvs(), ids=lambda a: " ".join(a)[:60])
def test_speculative_config_read_as_vllms_parser_reads_it(argv, vllm_parser):  # noqa: F811 - the imported fixture
    _, ours, _ = pop_json_flag(argv, SPEC_FLAG, "test")
    make, engine_args = vllm_parser
    # the whole of vLLM's reading: its parser, then EngineArgs.create_speculative_config
    # (-sc, prefixes and the --spec-* shorthands included)
    assert ours == vllm_speculative(make(), engine_args, argv)



@pytest.mark.parametrize("argv, pin", PINS, ids=lambda a: str(a))
def test_async_pin_read_as_vllms_parser_spells_it(argv, pin, vllm_preprocess):
    processed = vllm_preprocess(argv)
    assert pinned_async_scheduling(argv)[0] == pin
    assert [flag_name(a) for a in argv] == processed  # the names vLLM's parser hands on


def test_flag_names_of_every_real_config_match_vllms(vllm_preprocess):
    for argv in real_argvs():
        names = [a.split("=", 1)[0] for a in vllm_preprocess(argv) if a.startswith("--")]
        ours = [flag_name(a) for a in argv if a.startswith("--")]
        # a dotted sub-key reaches argparse as its JSON flag (``--attention-config``)
        assert sorted(set(names)) == sorted({n.split(".", 1)[0] for n in ours}), argv


def test_dotted_values_and_errors():
    assert human_readable_int("1k") == 1000 and human_readable_int("1K") == 1024
    assert human_readable_int("25.6k") == 25600
    out, spec, seen = pop_json_flag(["--x", "--speculative_config.method", "mtp", "--y"], SPEC_FLAG, "f:3")
    assert out == ["--x", "--y"] and spec == {"method": "mtp"} and seen == ["--speculative_config.method mtp"]
    with pytest.raises(ArgsError, match="f:3: --speculative-config has no value"):
        pop_json_flag(["--speculative-config"], SPEC_FLAG, "f:3")
    with pytest.raises(ArgsError, match="must be a JSON object"):
        pop_json_flag(["--speculative-config", "[1]"], SPEC_FLAG, "f:3")
