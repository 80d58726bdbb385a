"""The numerics noise a run's servers ran with (part of the run record,
:class:`~harness.records.run_record.RunRecord`'s ``numerics_noise``; absent without it).

``EVALRUN_NUMERICS_NOISE`` (:mod:`harness.faults.noise`, docs/numerics.md) makes the CPU
engine's logits GPU-like: a run with it is not the deterministic CPU engine, and its
record says so with the level, the setting as given and every server start's seed.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping

from pydantic import BaseModel, Field

from harness.faults.noise import NOISE_ENV, NOISE_SEED_ENV, draw_seed, level_from_env, noise_key
from harness.records.bounds import Bounded

__all__ = ["NumericsNoiseRecord", "joined_noise", "noise_record", "server_seed"]


class NumericsNoiseRecord(Bounded, BaseModel):
    """The numerics noise of a run.

    Attributes:
        spec: ``EVALRUN_NUMERICS_NOISE`` as given (``gpu`` or a number of nats).
        level_nats: the standard deviation of the logit perturbation, in nats (> 0).
        base_seed: ``EVALRUN_NUMERICS_NOISE_SEED`` of evalrun's environment (each
            server's seed then derives from it and the server's name), else None
            (each server start draws its own).
        seeds: server name (``<config>/<variant>[ (<purpose>)]``) -> the seed of that
            server start (``EVALRUN_NUMERICS_NOISE_SEED`` in its environment).
    """

    spec: str
    level_nats: float = Field(gt=0)
    base_seed: int | None = Field(default=None, ge=0)
    seeds: dict[str, int] = {}

    def describe(self) -> str:
        """One line for people: ``numerics noise: gpu (0.02 nats), seeds cfg/ref=..., ...``."""
        seeds = ", ".join(f"{k}={v}" for k, v in self.seeds.items()) or "none yet"
        return (f"numerics noise: {self.spec} ({self.level_nats:g} nats; {NOISE_ENV}): GPU-like logits, "
                f"not the deterministic CPU engine; seeds {seeds}")


def noise_record(environ: Mapping[str, str] | None = None) -> NumericsNoiseRecord | None:
    """The run's noise from evalrun's environment (``os.environ`` by default), None when off.

    Raises:
        harness.faults.noise.NoiseSettingError: either variable is invalid (the message
            names it).
    """
    setting = level_from_env(environ)
    if setting is None:
        return None
    env = os.environ if environ is None else environ
    base = setting.seed if env.get(NOISE_SEED_ENV, "").strip() else None
    return NumericsNoiseRecord(spec=setting.spec, level_nats=setting.level_nats, base_seed=base)


def server_seed(noise: NumericsNoiseRecord, server: str) -> int:
    """The seed of one server start named ``server``: a fresh draw, or, with
    ``base_seed``, a hash of it and the name (a run reproduced with the same base seed
    gives every server its earlier seed). Recorded in ``noise.seeds``."""
    seed = draw_seed() if noise.base_seed is None else noise_key(noise.base_seed, 0, 0, 0) ^ _name_key(server)
    noise.seeds[server] = seed
    return seed


def joined_noise(shards: list[NumericsNoiseRecord | None]) -> NumericsNoiseRecord | None:
    """The noise of a run merged from shards (``evalrun merge``): the first noisy shard's
    setting with every shard's seeds; None when no shard had noise."""
    noisy = [x for x in shards if x is not None]
    if not noisy:
        return None
    return noisy[0].model_copy(update={"seeds": {k: v for x in noisy for k, v in x.seeds.items()}})


def _name_key(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big") >> 1
