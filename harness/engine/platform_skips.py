"""vLLM's platform skips: the configs vLLM's GSM8K test skips off CUDA or on some ROCm
architectures, with vLLM's own reasons, and the platform they are judged on.

vLLM's ``tests/evals/gsm8k/test_gsm8k_correctness.py`` (the newest version read with the
project's code search, December 2026) calls ``pytest.skip`` before it starts any server:

* not ``current_platform.is_cuda()`` and ``"Qwen3-30B-A3B-MXFP4A16"`` in ``model_name``;
* not CUDA and ``"gemma-4-E4B-it-qat-mobile-ct"`` in ``model_name``;
* ``current_platform.is_rocm()`` and ``"deepseek-ai/DeepSeek-V3.2"`` or
  ``"deepseek-ai/DeepSeek-R1"`` in ``model_name``;
* ROCm and ``"Qwen3.5-35B-A3B-MXFP4-AITER-TP2"`` in the config's file name, when not
  ``vllm.platforms.rocm.on_gfx950()``.

:data:`RULES` holds them as data (the reasons word for word); :func:`applicable_rules`
says which could apply to a config without asking the platform, :func:`skip_reason` judges
them on the platform the servers' vLLM detects (:func:`probe_platform`, the probe
:mod:`harness.engine.probes.vllm_platform`). The pytest plugin turns a reason into
``pytest.skip`` (SKIP, never PASS, no server started); ``evalrun --config`` asks
:func:`plan_skips` before any server starts and runs such a config's variants as not
applicable (no server, every gate NOT RUN with vLLM's reason, never PASS).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from harness.config.plan import Plan
from harness.engine.probes import command, vllm_platform


@dataclass(frozen=True)
class PlatformFacts:
    """What vLLM's test asks of ``current_platform``: ``cuda``, ``rocm`` and, on ROCm,
    ``gfx950`` (``on_gfx950()``)."""

    device_type: str
    cuda: bool
    rocm: bool
    gfx950: bool | None = None


@dataclass(frozen=True)
class SkipRule:
    """One of vLLM's skips.

    Attributes:
        needle: the text looked for.
        where: ``model_name`` (in the config's ``model_name``) or ``file_name`` (in the
            config file's name).
        when: ``not_cuda``, ``rocm`` or ``rocm_not_gfx950``.
        reason: vLLM's ``pytest.skip`` message, word for word.
    """

    needle: str
    where: Literal["model_name", "file_name"]
    when: Literal["not_cuda", "rocm", "rocm_not_gfx950"]
    reason: str

    def matches(self, model_name: str, file_name: str) -> bool:
        """Whether the rule concerns this config (whatever the platform)."""
        return self.needle in (model_name if self.where == "model_name" else file_name)

    def holds(self, p: PlatformFacts) -> bool:
        """Whether the platform is one the rule skips on."""
        if self.when == "not_cuda":
            return not p.cuda
        if self.when == "rocm":
            return p.rocm
        return p.rocm and not p.gfx950


_DS_REASON = ("Skipping DeepSeek-V3.2 and DeepSeek-R1 on ROCm platforms "
              "due to agent pool disk space issues and pod evictions.")
#: vLLM's skips, in the order its test checks them.
RULES: tuple[SkipRule, ...] = (
    SkipRule("Qwen3-30B-A3B-MXFP4A16", "model_name", "not_cuda",
             "Skipping Qwen3-30B-A3B-MXFP4A16 on non-CUDA platforms. Marlin kernels are not supported."),
    SkipRule("gemma-4-E4B-it-qat-mobile-ct", "model_name", "not_cuda",
             "Skipping gemma-4-E4B-it-qat-mobile-ct on non-CUDA platforms. "
             "Its W2A16 (uint2b2) scheme has no kernel outside CUDA."),
    SkipRule("deepseek-ai/DeepSeek-V3.2", "model_name", "rocm", _DS_REASON),
    SkipRule("deepseek-ai/DeepSeek-R1", "model_name", "rocm", _DS_REASON),
    SkipRule("Qwen3.5-35B-A3B-MXFP4-AITER-TP2", "file_name", "rocm_not_gfx950",
             "Skipping Qwen3.5-35B-A3B-MXFP4-AITER-TP2 on non-GFX950 platforms. "
             "The quantization scheme is not supported on non-GFX950 platforms."),
)


def applicable_rules(model_name: str, file_name: str) -> list[SkipRule]:
    """The rules that concern a config (no platform needed: most configs have none)."""
    return [r for r in RULES if r.matches(model_name, file_name)]


def skip_reason(model_name: str, file_name: str, platform: PlatformFacts) -> str | None:
    """vLLM's reason to skip the config on ``platform`` (the first rule that holds, as
    vLLM's test checks them in order), or None."""
    return next((r.reason for r in applicable_rules(model_name, file_name) if r.holds(platform)), None)


class PlatformUnknown(RuntimeError):
    """The servers' interpreter could not say which platform its vLLM detects."""


def probe_platform(python: str, timeout: float = 300) -> PlatformFacts:
    """Ask ``python``'s vLLM which platform it detects (imports vLLM: 10-60 s).

    Raises:
        PlatformUnknown: the probe could not run or answered nothing (naming the
            interpreter and the last lines it printed).
    """
    try:
        proc = subprocess.run(command(python, vllm_platform), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PlatformUnknown(f"{python!r}: cannot ask its vLLM for the platform: {e}") from None
    lines = [x for x in proc.stdout.splitlines() if x.startswith(vllm_platform.MARKER)]
    if not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise PlatformUnknown(f"{python!r}: its vLLM did not say which platform it detects "
                              f"(exit code {proc.returncode}):\n{tail}")
    d = json.loads(lines[-1][len(vllm_platform.MARKER):])
    return PlatformFacts(device_type=str(d["device_type"]), cuda=bool(d["cuda"]), rocm=bool(d["rocm"]),
                         gfx950=None if d.get("gfx950") is None else bool(d["gfx950"]))


def plan_skips(plan: Plan, ask: Callable[[str], PlatformFacts] = probe_platform
               ) -> tuple[dict[str, str], dict[str, str]]:
    """vLLM's platform skips of a plan's vLLM-form configs (vLLM's test reads only its own
    form), judged on the platform of each variant's interpreter (``ask``, once per
    interpreter, only for a config one of :data:`RULES` concerns).

    Returns:
        (variant id -> vLLM's reason to skip it here, variant id -> why it cannot be told
        whether vLLM skips it: the platform is unknown; fail closed, neither run nor pass).
    """
    asked: dict[str, PlatformFacts | PlatformUnknown] = {}
    skips: dict[str, str] = {}
    unknown: dict[str, str] = {}
    for config_plan in plan.configs:
        c = config_plan.config
        if c.form != "vllm-gsm8k" or not applicable_rules(c.model, c.path.name):
            continue
        for v in config_plan.variants:
            if v.python not in asked:
                try:
                    asked[v.python] = ask(v.python)
                except PlatformUnknown as e:
                    asked[v.python] = e
            got = asked[v.python]
            if isinstance(got, PlatformUnknown):
                unknown[v.id] = f"vLLM's test skips {c.path.name} on some platforms, and the platform is unknown: {got}"
                continue
            why = skip_reason(c.model, c.path.name, got)
            if why is not None:
                skips[v.id] = f"vLLM's test skips {c.path.name} on this platform ({got.device_type}): {why}"
    return skips, unknown
