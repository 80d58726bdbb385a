"""``--per-request-spec-decode-metrics detailed``: added to every speculative variant when vLLM's
parser has it, never to a reference, a config's own setting kept, and the fallback (a parser
without it) named in the dry run."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.config.vllm_args import per_request_missing
from harness.config.vllm_parser import snapshot_table, use_table
from harness.report.dry_run import per_request_line

FLAG = "--per-request-spec-decode-metrics"


def plan_of(tmp_path: Path, extra_args: str = "") -> dict[str, tuple[str, ...]]:
    p = tmp_path / "c.yaml"
    p.write_text(textwrap.dedent(f"""\
        model: fake-model
        server_args: "--dtype bfloat16 {extra_args}"
        variants:
          reference: {{}}
          spec: {{speculative_config: {{method: mtp, num_speculative_tokens: 2}}, async_scheduling: false}}
        tasks:
          gsm8k: {{num_questions: 5}}
        """))
    plan = build_plan([load_config(p)], python="python")
    return {v.name: v.argv for v in plan.configs[0].variants}


def test_speculative_variants_get_the_flag_and_the_reference_does_not(tmp_path):
    argv = plan_of(tmp_path)
    assert FLAG not in argv["reference"]
    i = argv["spec"].index(FLAG)
    assert argv["spec"][i + 1] == "detailed"
    assert argv["spec"].count(FLAG) == 1
    assert "evalrun's addition" in per_request_line(argv["spec"])


def test_a_configs_own_detailed_is_not_called_evalrun_s(tmp_path):
    argv = plan_of(tmp_path, f"{FLAG} detailed")
    assert argv["spec"].count(FLAG) == 1
    assert per_request_line(argv["spec"]) == f"per-request acceptance: as the config sets {FLAG}"


def test_a_configs_own_level_is_kept(tmp_path):
    argv = plan_of(tmp_path, f"{FLAG} summary")
    assert argv["spec"].count(FLAG) == 1
    assert argv["spec"][argv["spec"].index(FLAG) + 1] == "summary"
    assert per_request_line(argv["spec"]) == f"per-request acceptance: as the config sets {FLAG}"


def test_a_parser_without_the_flag_falls_back_to_metrics_and_says_so(tmp_path):
    snap = snapshot_table()
    assert per_request_missing(snap) is None
    old = dataclasses.replace(snap, vllm_version="0.31.0",
                              actions=tuple(a for a in snap.actions if a.dest != "per_request_spec_decode_metrics"))
    with use_table(old):
        argv = plan_of(tmp_path)
        line = per_request_line(argv["spec"])
    assert FLAG not in argv["spec"]
    assert line.startswith("per-request acceptance: not asked: vLLM 0.31.0's server parser")
    assert "per-request acceptance gates are NOT RUN" in line
