"""The engine's facts read from /server_info and /version (harness/engine/info.py): each field
type-checked, and a malformed answer is the variant's engine error. The runs use the FAKE
server (tests/fake_vllm.py): the real one cannot be made to answer malformed JSON."""

from __future__ import annotations

import pytest

from harness.engine.info import EngineInfoError, read_engine_facts
from harness.records.run_record import load_run
from tests.fake_run import config, run_cli

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)


@pytest.mark.parametrize("env, expect", [
    ({"FAKE_MALFORMED_INFO": "list"}, "/server_info is not a JSON object (got list)"),
    ({"FAKE_MALFORMED_INFO": "sched"}, "vllm_config.scheduler_config is not a mapping (got str"),
    ({"FAKE_MALFORMED_VERSION": "1"}, "cannot read the engine's version from /version"),
])
def test_malformed_engine_info_is_the_variants_engine_error(tmp_path, env, expect):
    code = run_cli(tmp_path, config(tmp_path, spec_env={"FAKE_MODE": "ok", "VLLM_SERVER_DEV_MODE": "1", **env}))
    rec = load_run(tmp_path / "results" / "r")
    spec = rec.configs[0].variants["spec"]
    assert rec.status == "completed" and code == 1       # variant_effective cannot pass without the facts
    assert expect in (spec.engine_error or ""), spec.engine_error
    assert spec.tasks["gsm8k"].error_count == 0           # the requests still ran
    eff = [g for g in rec.gates() if g.kind == "variant_effective" and g.variant == "spec"]
    assert eff and eff[0].passed is False


def test_engine_facts_type_checks():
    ok = {"vllm_config": {"scheduler_config": {"async_scheduling": False}, "model_config": {"max_model_len": 64}}}
    assert read_engine_facts(ok, "0.32.0", "c/v").max_model_len == 64
    bad = [
        ({"vllm_config": {"scheduler_config": {"async_scheduling": "yes"}}}, "async_scheduling is not bool"),
        ({"vllm_config": {"scheduler_config": {"async_scheduling": True}, "model_config": {"max_model_len": True}}},
         "max_model_len is not int"),
        ({"vllm_config": {"scheduler_config": {"async_scheduling": True},
                          "speculative_config": {"num_speculative_tokens": "2"}}}, "num_speculative_tokens is not int"),
    ]
    for info, msg in bad:
        with pytest.raises(EngineInfoError, match=msg):
            read_engine_facts(info, "0.32.0", "c/v")
    with pytest.raises(EngineInfoError, match="'version' is not a string"):
        read_engine_facts(ok, 32, "c/v")
