"""vLLM's platform skips, on vLLM's real configs
(tests/data/vllm_gsm8k/configs/skips_and_checks/README.md names their source)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.engine.platform_skips import (
    RULES,
    PlatformFacts,
    PlatformUnknown,
    applicable_rules,
    plan_skips,
    skip_reason,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_gsm8k" / "configs"
SKIPS = DATA / "skips_and_checks"
CUDA = PlatformFacts("cuda", cuda=True, rocm=False)
CPU = PlatformFacts("cpu", cuda=False, rocm=False)
MI300 = PlatformFacts("rocm", cuda=False, rocm=True, gfx950=False)
MI355 = PlatformFacts("rocm", cuda=False, rocm=True, gfx950=True)

MARLIN = "Skipping Qwen3-30B-A3B-MXFP4A16 on non-CUDA platforms. Marlin kernels are not supported."
DISK = ("Skipping DeepSeek-V3.2 and DeepSeek-R1 on ROCm platforms "
        "due to agent pool disk space issues and pod evictions.")
GFX950 = ("Skipping Qwen3.5-35B-A3B-MXFP4-AITER-TP2 on non-GFX950 platforms. "
          "The quantization scheme is not supported on non-GFX950 platforms.")

# (config, platform) -> vLLM's reason, read off vLLM's test by hand (None: it runs)
CASES = [
    (SKIPS / "Qwen3-30B-A3B-MXFP4A16.yaml", CUDA, None),
    (SKIPS / "Qwen3-30B-A3B-MXFP4A16.yaml", CPU, MARLIN),
    (SKIPS / "Qwen3-30B-A3B-MXFP4A16.yaml", MI355, MARLIN),
    (SKIPS / "DeepSeek-V3.2-TP_MI355.yaml", MI355, DISK),
    (SKIPS / "DeepSeek-V3.2-TP_MI355.yaml", CUDA, None),
    (DATA / "DeepSeek-R1-DP.yaml", MI300, DISK),
    (DATA / "DeepSeek-R1-DP.yaml", CPU, None),
    (SKIPS / "Qwen3.5-35B-A3B-MXFP4-AITER-TP2.yaml", MI300, GFX950),
    (SKIPS / "Qwen3.5-35B-A3B-MXFP4-AITER-TP2.yaml", MI355, None),
    (SKIPS / "Qwen3.5-35B-A3B-MXFP4-AITER-TP2.yaml", CUDA, None),   # a ROCm-only rule
    (DATA / "Qwen3-0.6B-FP8.yaml", CPU, None),
]


@pytest.mark.parametrize(("path", "platform", "reason"), CASES, ids=lambda x: getattr(x, "stem", None)
                         or getattr(x, "device_type", None) or str(x)[:12])
def test_vllms_reason_on_vllms_configs(path, platform, reason):
    cfg = load_config(path)
    assert skip_reason(cfg.model, path.name, platform) == reason


def test_configs_no_rule_concerns_need_no_platform():
    for path in sorted(DATA.glob("*.yaml")):
        cfg = load_config(path)
        want = "DeepSeek-R1" in cfg.model
        assert bool(applicable_rules(cfg.model, path.name)) == want, path.name
    assert len(RULES) == 5


def test_plan_skips_asks_once_per_interpreter_and_only_when_a_rule_concerns_a_config():
    plan = build_plan([load_config(SKIPS / "Qwen3-30B-A3B-MXFP4A16.yaml"), load_config(DATA / "Qwen3-0.6B-FP8.yaml")],
                      python="/py")
    asked = []

    def ask(python, facts=CPU):
        asked.append(python)
        return facts
    skips, unknown = plan_skips(plan, ask)
    assert asked == ["/py"] and not unknown
    assert skips == {"Qwen3-30B-A3B-MXFP4A16/reference":
                     f"vLLM's test skips Qwen3-30B-A3B-MXFP4A16.yaml on this platform (cpu): {MARLIN}"}
    assert plan_skips(plan, lambda p: CUDA) == ({}, {})

    def no_vllm(python):
        raise PlatformUnknown("no vLLM")
    skips, unknown = plan_skips(plan, no_vllm)
    assert not skips and list(unknown) == ["Qwen3-30B-A3B-MXFP4A16/reference"]
    assert "platform is unknown: no vLLM" in unknown["Qwen3-30B-A3B-MXFP4A16/reference"]
