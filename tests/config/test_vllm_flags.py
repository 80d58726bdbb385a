"""Every config's server command parses with the installed vLLM's own argument parser
(the same parser for the CPU and GPU builds of a release), so configs use only flags
of the vLLM release evalrun is tested with. Skipped when vLLM is not importable."""

from __future__ import annotations

import contextlib
import io

import pytest

from harness.config.loader import load_config
from harness.config.model_list import CONFIGS_DIR
from harness.config.plan import build_plan
from tests.conftest import vllm_available

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not importable here")


@pytest.mark.parametrize("path", sorted(CONFIGS_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_config_flags_parse_with_this_vllm(path):
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # `vllm serve`'s own parser, built as vLLM's RemoteOpenAIServer builds it
    parser = FlexibleArgumentParser()
    parser = ServeSubcommand().subparser_init(parser.add_subparsers(required=False, dest="subparser"))
    plan = build_plan([load_config(path)], python="python")
    for v in plan.configs[0].variants:
        argv = v.command(8000)[4:]  # MODEL ARGS, after "python -m vllm.entrypoints.cli.main serve"
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"{path}: variant {v.name}: vLLM rejects the server command {argv}:\n"
                        + err.getvalue().strip().splitlines()[-1])
