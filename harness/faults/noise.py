"""GPU-like numerics on the CPU engine: the setting read from ``EVALRUN_NUMERICS_NOISE``.

This module is the one home of the setting's name, its parsing and its calibrated default.
The perturbation itself (the logits of every forward, drawn from the step's batch shape and
a seed drawn per server start) is applied by evalrun's vLLM plugin; the fake server of the
tests reads the same setting through :func:`level_from_env`.

``EVALRUN_NUMERICS_NOISE``:
- unset or empty: off (the CPU engine stays deterministic; nothing of a record changes);
- ``gpu``: the calibrated default level :data:`GPU_LEVEL_NATS` (docs/numerics.md says what
  it is calibrated to);
- a finite number >= 0: the standard deviation of the perturbation in nats (``0`` is off).

``EVALRUN_NUMERICS_NOISE_SEED`` (optional, an integer >= 0): the seed of one server start,
to reproduce a run; unset, every server start draws its own (:func:`draw_seed`).

Standard library only: it is imported by the vLLM plugin in every vLLM process.
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

#: the environment variable that turns the noise on (docs/numerics.md)
NOISE_ENV = "EVALRUN_NUMERICS_NOISE"
#: the environment variable that fixes the seed of a server start
NOISE_SEED_ENV = "EVALRUN_NUMERICS_NOISE_SEED"
#: the word that selects :data:`GPU_LEVEL_NATS`
GPU_WORD = "gpu"
#: the calibrated default standard deviation of the perturbation, in nats (docs/numerics.md:
#: what it is calibrated to and the divergence it produces on the CPU list). Calibrated to the
#: consequences GPUs show, not to a per-logit magnitude: vLLM's MTP end-to-end test
#: (tests/v1/e2e/spec_decode/test_spec_decode.py, ``MTP_SIMILARITY_RATE = 0.8``) passes when more
#: than 80 of 100 greedy 10-token completions match the non-speculative reference; 1.5 nats
#: makes 89 of 100 match on the CPU list's tiny model (60% of 50 at 256 tokens), whose margins
#: are far wider than a large model's (0.1 nats, about one bfloat16 rounding step of a logit of 10 to 30:
#: 99 of 100 match).
GPU_LEVEL_NATS = 1.5


class NoiseSettingError(ValueError):
    """``EVALRUN_NUMERICS_NOISE`` or its seed is not a valid setting; the message names the variable."""


@dataclass(frozen=True)
class NoiseSetting:
    """One server start's numerics noise.

    Attributes:
        spec: the variable's text as given (``gpu`` or a number).
        level_nats: the standard deviation of the logit perturbation, in nats (> 0).
        seed: the seed of this server start (an integer >= 0).
    """

    spec: str
    level_nats: float
    seed: int


def parse_level(text: str | None) -> float | None:
    """The level in nats named by ``text`` (the variable's value), or None when off.

    Raises:
        NoiseSettingError: not ``gpu`` and not a finite number >= 0.
    """
    if text is None or not text.strip():
        return None
    t = text.strip().lower()
    if t == GPU_WORD:
        return GPU_LEVEL_NATS
    try:
        v = float(t)
    except ValueError:
        raise NoiseSettingError(f"{NOISE_ENV}={text!r}: expected {GPU_WORD!r} or a number of nats >= 0") from None
    if not math.isfinite(v) or v < 0:
        raise NoiseSettingError(f"{NOISE_ENV}={text!r}: expected a finite number of nats >= 0")
    return v or None


def parse_seed(text: str | None) -> int | None:
    """The seed named by ``text`` (``EVALRUN_NUMERICS_NOISE_SEED``), or None when unset.

    Raises:
        NoiseSettingError: not an integer >= 0.
    """
    if text is None or not text.strip():
        return None
    try:
        v = int(text.strip())
    except ValueError:
        raise NoiseSettingError(f"{NOISE_SEED_ENV}={text!r}: expected an integer >= 0") from None
    if v < 0:
        raise NoiseSettingError(f"{NOISE_SEED_ENV}={text!r}: expected an integer >= 0")
    return v


def draw_seed() -> int:
    """A fresh seed for one server start (63 random bits from the OS)."""
    return secrets.randbits(63)


def level_from_env(environ: Mapping[str, str] | None = None) -> NoiseSetting | None:
    """The noise setting of this process's environment (``os.environ`` by default), with
    the seed from :data:`NOISE_SEED_ENV` or a fresh draw; None when the noise is off.

    Raises:
        NoiseSettingError: either variable is invalid.
    """
    env = os.environ if environ is None else environ
    spec = env.get(NOISE_ENV)
    level = parse_level(spec)
    if level is None or spec is None:
        return None
    seed = parse_seed(env.get(NOISE_SEED_ENV))
    return NoiseSetting(spec.strip(), level, draw_seed() if seed is None else seed)


def noise_key(seed: int, stream: int, step: int, rows: int) -> int:
    """The generator seed of one logits call: a 63-bit hash of the server start's
    ``seed``, the ``stream`` (which model computes logits: 0 the first to do so in the
    process, normally the target; 1 the drafter), the ``step`` (that stream's call
    counter) and ``rows`` (the positions scored in that forward: the number of scheduled
    tokens of a decode or verification step). Equal inputs give equal keys; changing any
    one gives an unrelated key (BLAKE2b, :mod:`hashlib`)."""
    text = f"{seed}:{stream}:{step}:{rows}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") >> 1
