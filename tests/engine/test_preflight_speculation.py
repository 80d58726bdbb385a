"""The pre-launch check parses every server command with the installed vLLM's own parser
and refuses a variant planned without speculation whose arguments speculate there: the
backstop for a spelling that the table the plan read server_args with does not know (a
newer vLLM's alias). No server starts; the check imports vLLM in a subprocess."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.engine.preflight import ServerCommand, check_server_commands
from tests.conftest import require_vllm

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

GEN = Path(__file__).resolve().parents[1] / "data" / "vllm_gsm8k" / "generated"


def test_a_reference_that_speculates_under_vllms_parser_is_refused_naming_the_setting():
    require_vllm()
    cfg = load_config(GEN / "MTP-spec-shorthands.yaml")
    variants = {v.name: v for v in build_plan([cfg], python=sys.executable).configs[0].variants}
    ref = [a.replace("{port}", "8000") for a in variants["reference"].argv]
    spec = [a.replace("{port}", "8000") for a in variants["spec_sync"].argv]
    # as a plan read with a table that did not know --spec-method would have planned it:
    # a "reference" whose command still carries the shorthand
    leaked = [*ref, "--spec-method", "mtp", "--spec-tokens", "2"]
    cmds = [ServerCommand("cfg/spec_sync", cfg.path, tuple(spec), {}, speculates=True),
            ServerCommand("cfg/leaked", cfg.path, tuple(leaked), {}, speculates=False)]
    problems = check_server_commands(cmds)
    assert [(p.variant, p.kind) for p in problems] == [("cfg/leaked", "args_rejected")], problems
    msg = problems[0].message
    assert 'spec_method="mtp"' in msg and "spec_tokens=2" in msg and "planned this variant without speculation" in msg
