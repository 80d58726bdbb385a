"""The numerics noise (harness/faults/numerics.py, harness/faults/noise.py): the perturbation
is a deterministic function of (seed, stream, step, rows) and the row's index, its standard
deviation is the level, and the plugin applies it to vLLM's own ``LogitsProcessor`` beside a
fault (docs/numerics.md)."""

from __future__ import annotations

import hashlib
import math
import os

import pytest

import harness.faults.plugin as faults
from harness.faults.noise import GPU_LEVEL_NATS, NOISE_ENV, NOISE_SEED_ENV, NoiseSetting, noise_key
from harness.faults.numerics import perturb, perturbation
from harness.faults.target import FaultConfigError
from tests.faults.fakes import OBSERVERS, needs_torch, needs_vllm


def test_noise_key_is_blake2b_of_the_four_inputs():
    # computed here from the definition: BLAKE2b-64 of "seed:stream:step:rows", top bit dropped
    want = int.from_bytes(hashlib.blake2b(b"11:1:7:24", digest_size=8).digest(), "big") >> 1
    assert noise_key(11, 1, 7, 24) == want
    assert 0 <= want < 2**63


@needs_torch
def test_perturbation_is_deterministic_and_depends_on_every_input():
    import torch


    base = dict(level=0.5, seed=3, stream=0, step=5, rows=4, vocab=64)
    a = perturbation(**base)
    assert a.shape == (4, 64) and a.dtype == torch.float32
    assert torch.equal(a, perturbation(**base))
    for key, other in (("seed", 4), ("stream", 1), ("step", 6), ("rows", 8)):
        b = perturbation(**{**base, key: other})
        assert not torch.equal(a, b[:4]), key
    # the row's index in the batch: every row draws its own values
    assert all(not torch.equal(a[i], a[j]) for i in range(4) for j in range(i))
    # the level scales the same draw
    assert torch.allclose(perturbation(**{**base, "level": 1.0}) * 0.5, a)


@needs_torch
def test_perturbation_std_is_the_level():

    n_rows, vocab = 200, 1000
    x = perturbation(GPU_LEVEL_NATS, 123, 0, 0, n_rows, vocab).double()
    n = n_rows * vocab
    # a normal sample's std has relative standard error 1/sqrt(2n) (0.16% here); allow 5 of them
    assert abs(x.std().item() / GPU_LEVEL_NATS - 1) < 5 / math.sqrt(2 * n)
    assert abs(x.mean().item()) < 5 * GPU_LEVEL_NATS / math.sqrt(n)


@needs_torch
def test_a_near_tie_flips_and_a_wide_margin_does_not():
    import torch


    # level 0.02 nats; row 0: top two 0.01 nats apart; row 1: 1 nat apart (50 sigma)
    logits = torch.tensor([[5.0, 4.99, 0.0], [5.0, 4.0, 0.0]], dtype=torch.float32)
    flips = [0, 0]
    for seed in range(200):
        out = perturb(logits, NoiseSetting("0.02", 0.02, seed), 0, 0)
        assert out.dtype == torch.float32
        flips = [f + int(out[i].argmax().item() != 0) for i, f in enumerate(flips)]
    assert flips[1] == 0
    # P(flip) = P(N(0, 2 sigma^2) > margin) = Phi(-0.01 / (0.02 sqrt 2)) = 0.362; 200 draws:
    # between 0.2 and 0.5 (binomial sd 0.034: over 4 sd either side)
    assert 0.2 * 200 < flips[0] < 0.5 * 200


def test_register_refuses_a_bad_level(monkeypatch):
    monkeypatch.setenv(NOISE_ENV, "loud")
    with pytest.raises(FaultConfigError, match=NOISE_ENV):
        faults.register()
    assert faults.applied_patches() == []


@needs_vllm
def test_register_patches_the_logits_layer_beside_a_fault_and_unpatches(monkeypatch):
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    original = LogitsProcessor.forward
    monkeypatch.setenv(NOISE_ENV, "gpu")
    monkeypatch.setenv(faults.FAULT_ENV, "draft-input")
    faults.register()
    faults.register()  # idempotent
    patched = faults.applied_patches()
    assert "vllm.model_executor.layers.logits_processor.LogitsProcessor.forward" in patched
    fault_targets = [t for t in faults.FAULTS["draft-input"].targets if t.patched]
    assert len(patched) == len(OBSERVERS) + len(fault_targets) + 1
    assert LogitsProcessor.forward.__wrapped__ is original
    assert faults.STATE.noise is not None and faults.STATE.noise.level_nats == GPU_LEVEL_NATS
    # no seed given: the process drew one and left it for the processes it starts
    assert int(os.environ[NOISE_SEED_ENV]) == faults.STATE.noise.seed
    faults.unpatch_all()
    assert LogitsProcessor.forward is original


@needs_vllm
def test_the_patched_layer_adds_the_perturbation_per_stream_and_step(monkeypatch):
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.logits_processor import LogitsProcessor


    monkeypatch.setenv(NOISE_ENV, "0.25")
    monkeypatch.setenv(NOISE_SEED_ENV, "99")
    faults.register()
    with set_current_vllm_config(VllmConfig()):
        target, drafter = LogitsProcessor(8, logits_as_input=True), LogitsProcessor(8, logits_as_input=True)
    x = torch.arange(24, dtype=torch.bfloat16).reshape(3, 8)
    outs = [target(None, x), target(None, x), drafter(None, x[:2])]
    want = [perturbation(0.25, 99, 0, 0, 3, 8), perturbation(0.25, 99, 0, 1, 3, 8),
            perturbation(0.25, 99, 1, 0, 2, 8)]
    for got, noise, rows in zip(outs, want, (3, 3, 2)):
        assert got.dtype == torch.float32
        assert torch.allclose(got, x[:rows].float() + noise)
    assert faults.counts()["numerics_noise.calls"] == 3
    assert faults.counts()["numerics_noise.rows"] == 8
