"""GPU-like numerics on the CPU engine: the logit perturbation and its patch.

With ``EVALRUN_NUMERICS_NOISE`` set (:mod:`harness.faults.noise`), every call of vLLM's
``LogitsProcessor.forward`` (``vllm/model_executor/layers/logits_processor.py``) returns
its logits in float32 plus a Gaussian perturbation of standard deviation ``level`` nats.
That layer is the one both the target (``Qwen3NextForCausalLM.compute_logits``: prefill,
decode and speculative verification, whose logits feed the sampler and the rejection
sampler) and the MTP / EAGLE drafter (``Qwen3NextMTP.compute_logits``, called by
``SpecDecodeBaseProposer._greedy_sample``) compute their logits with, so one patch reaches
every forward.

The perturbation stands for reduction-order differences on a GPU: it is small and a
function of the step's batch (:func:`perturbation`: the rows scored in the forward, the
row's index, the stream's step counter) and of the seed drawn per server start. So two
servers with different seeds, or two variants whose batches have other shapes (a
verification step scores ``1 + k`` positions per request, a decode step one), choose
differently exactly where the unperturbed top two logits are within a few ``level`` of
each other. The logits are cast to float32 first: bfloat16 cannot hold a 0.02-nat change
of a logit of magnitude 10 (its spacing there is 0.0625).

Imports torch only when the noise is on (vLLM's processes have it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from harness.faults.log import info
from harness.faults.noise import NOISE_ENV, NoiseSetting, noise_key
from harness.faults.patching import patch_as
from harness.faults.reports import count
from harness.faults.state import STATE
from harness.faults.target import PatchTarget

if TYPE_CHECKING:
    import torch

#: the patch's label (``__evalrun_fault__`` of the wrapper)
LABEL = "numerics_noise"

LOGITS = PatchTarget(
    module="vllm.model_executor.layers.logits_processor",
    qualname="LogitsProcessor.forward",
    params=("lm_head", "hidden_states"),
)


def perturbation(level: float, seed: int, stream: int, step: int, rows: int, vocab: int) -> torch.Tensor:
    """The perturbation of one logits call: a float32 tensor of shape ``(rows, vocab)``,
    i.i.d. normal with standard deviation ``level`` (nats), drawn from a CPU
    ``torch.Generator`` seeded with :func:`harness.faults.noise.noise_key` of
    ``(seed, stream, step, rows)``. Row ``i`` is added to the logits of the ``i``-th
    position scored, so the row's place in the batch matters too. Deterministic: equal
    arguments give equal tensors."""
    import torch

    g = torch.Generator(device="cpu")
    g.manual_seed(noise_key(seed, stream, step, rows))
    return torch.randn((rows, vocab), generator=g, dtype=torch.float32) * level


class _Streams:
    """Which model is which stream (by the order their logits layers are first called in
    this process) and each stream's step counter."""

    def __init__(self) -> None:
        self.ids: dict[int, int] = {}
        self.steps: list[int] = []

    def next(self, layer: object) -> tuple[int, int]:
        """``(stream, step)`` of this call of ``layer``; advances that stream's counter."""
        stream = self.ids.setdefault(id(layer), len(self.ids))
        if stream == len(self.steps):
            self.steps.append(0)
        step = self.steps[stream]
        self.steps[stream] += 1
        return stream, step


def perturb(logits: torch.Tensor, setting: NoiseSetting, stream: int, step: int) -> torch.Tensor:
    """``logits`` (``(rows, vocab)`` or ``(vocab,)``) in float32 plus :func:`perturbation`."""
    flat = logits.reshape(-1, logits.shape[-1]).float()
    noise = perturbation(setting.level_nats, setting.seed, stream, step, flat.shape[0], flat.shape[1])
    return (flat + noise.to(flat.device)).reshape(logits.shape)


def _logits_wrapper(setting: NoiseSetting) -> Callable[[Callable[..., object]], Callable[..., object]]:
    streams = _Streams()

    def make(original: Callable[..., object]) -> Callable[..., object]:
        def forward(self: object, lm_head: object, hidden_states: object, *a: object, **kw: object) -> object:
            logits = original(self, lm_head, hidden_states, *a, **kw)
            if logits is None or getattr(logits, "ndim", 0) < 1 or logits.shape[-1] == 0:  # type: ignore[attr-defined]
                return logits
            stream, step = streams.next(self)
            count(f"{LABEL}.calls")
            count(f"{LABEL}.rows", logits.reshape(-1, logits.shape[-1]).shape[0])  # type: ignore[attr-defined]
            return perturb(logits, setting, stream, step)  # type: ignore[arg-type]

        return forward

    return make


def install_noise(setting: NoiseSetting) -> None:
    """Patch ``LogitsProcessor.forward`` to add :func:`perturbation` (idempotent per process).

    Raises:
        harness.faults.target.FaultConfigError: the target is missing or its signature
            changed in the installed vLLM (the message names ``EVALRUN_NUMERICS_NOISE``).
    """
    patch_as(LABEL, LOGITS, _logits_wrapper(setting), what=f"{NOISE_ENV}={setting.spec}")
    STATE.noise = setting
    info("evalrun numerics noise %s (%.4g nats, seed %d) active in process %d",
         setting.spec, setting.level_nats, setting.seed, os.getpid())
