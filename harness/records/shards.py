"""A shard of a model list (``--shard i/n``) and the shard runs a merged run combines
(``run.json``'s ``shard`` and ``merged_from``; :mod:`harness.run.merge`)."""

from __future__ import annotations

from pydantic import BaseModel

from harness.records.bounds import Bounded


class _Model(Bounded, BaseModel):
    """Every shard type (:class:`harness.records.bounds.Bounded`)."""


class ShardListRef(_Model):
    """Identity of a whole model list: every config's name and SHA-256, and a hash of both."""

    configs: list[dict[str, str]] = []
    sha256: str


class ShardInfo(_Model):
    """``--shard i/n``: which shard this run is and which configs it ran (:mod:`harness.run.merge`)."""

    index: int
    count: int
    configs: list[str]
    weights: dict[str, int] = {}
    list: ShardListRef


class MergedShard(_Model):
    """One shard run of a merged run (``evalrun merge``)."""

    run_id: str
    path: str | None = None
    shard: int
    exit_code: int | None = None
