"""Start-up checks of a config (``startup_rpc_checks``), called as vLLM's GSM8K test calls
them: methods of the server's worker extension, through the dev-mode RPC endpoint.

vLLM's config ``DeepSeek-V4-Flash-EPLB-TEP4.yaml`` names ``startup_rpc_checks:
[check_eplb_replica_slots]``, starts the server with ``--worker-extension-cls
tests.evals.gsm8k.eplb_checks.EplbCheckExtension`` and ``VLLM_SERVER_DEV_MODE=1``; each
check is a method of that extension which returns None when the check holds and a message
(``"3 redundant expert slots differ from their source"``) when it does not. The call is
vLLM's ``POST /collective_rpc`` with ``{"method": <name>}`` (vLLM's
``tests/entrypoints/openai/test_collective_rpc.py`` calls it so), which answers
``{"results": [<one value per worker>]}``. (The version of vLLM's
``test_gsm8k_correctness.py`` that reads ``startup_rpc_checks`` is not in the code search's
store; the call here is the endpoint's documented one and the extension's contract.)

Verdicts (:class:`RpcCheckOutcome`): ``passed`` when every worker answered None;
``failed`` with the workers' messages otherwise; ``not_run`` when the extension's module
cannot be imported in the servers' interpreter (:func:`missing_extension`, asked before any
server starts: vLLM itself cannot start such a server); ``error`` for anything else (no
dev mode: 404; an unknown method; a body that is not ``{"results": [...]}``): fail closed.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import httpx
from pydantic import ValidationError

from harness.config.schema import JsonValue
from harness.config.vllm_args import hits_of
from harness.engine.probes import command, module_spec
from harness.records.run_record import StartupCheckRecord

#: vLLM's dev-mode endpoint (``VLLM_SERVER_DEV_MODE=1``).
COLLECTIVE_RPC = "/collective_rpc"
#: The destination of ``--worker-extension-cls`` in vLLM's parser.
EXTENSION_DEST = "worker_extension_cls"

Verdict = Literal["passed", "failed", "not_run", "error"]


#: One start-up check's answer: the record's type (``name``, ``verdict``, ``detail``, ``results``).
RpcCheckOutcome = StartupCheckRecord


def _outcome(name: str, verdict: Verdict, detail: str, results: list[JsonValue] | None = None) -> RpcCheckOutcome:
    """One answer (keyword fields of the record type); a worker's value the record refuses
    (a non-finite number) is kept as its text."""
    try:
        return RpcCheckOutcome(name=name, verdict=verdict, detail=detail, results=results or [])
    except ValidationError:
        return RpcCheckOutcome(name=name, verdict=verdict, detail=detail, results=[repr(x) for x in results or []])


def worker_extension(argv: Sequence[str]) -> str | None:
    """The ``--worker-extension-cls`` of a server command (any spelling vLLM's parser
    accepts; the last wins), or None."""
    found = hits_of(argv, EXTENSION_DEST)
    return found[-1].value if found else None


def missing_extension(python: str, extension: str, cwd: Path | None = None, timeout: float = 60) -> str | None:
    """Why the extension class ``extension`` (``package.module.Class``) cannot be loaded by
    the servers' interpreter ``python`` started in ``cwd``, or None when its module is
    found (:mod:`harness.engine.probes.module_spec`, nothing imported)."""
    module = extension.rpartition(".")[0]
    if not module:
        return f"--worker-extension-cls {extension!r} names no module"
    try:
        proc = subprocess.run(command(python, module_spec, module), capture_output=True, text=True,
                              timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot ask {python!r} for the worker extension's module {module}: {e}"
    lines = [x for x in proc.stdout.splitlines() if x.startswith(module_spec.MARKER)]
    if not lines:
        return f"{python!r} could not look for the worker extension's module {module} (exit code {proc.returncode})"
    if not json.loads(lines[-1][len(module_spec.MARKER):]).get(module):
        where = f" from {cwd}" if cwd is not None else ""
        return (f"the worker extension {extension} is not installed: its module {module} cannot be imported by "
                f"{python}{where} (vLLM's checks live in vLLM's source tree, tests/evals/gsm8k/)")
    return None


def call_check(client: httpx.Client, base_url: str, name: str) -> RpcCheckOutcome:
    """Call one check on a running server (``POST /collective_rpc {"method": name}``)."""
    try:
        r = client.post(base_url.rstrip("/") + COLLECTIVE_RPC, json={"method": name})
    except httpx.HTTPError as e:
        return _outcome(name, "error", f"{COLLECTIVE_RPC} {name}: {type(e).__name__}: {e}")
    if r.status_code != 200:
        hint = " (the endpoint needs VLLM_SERVER_DEV_MODE=1)" if r.status_code == 404 else ""
        return _outcome(name, "error", f"{COLLECTIVE_RPC} {name}: HTTP {r.status_code}{hint}: {r.text[:300]}")
    try:
        body = r.json()
    except ValueError:
        body = None
    results = body.get("results") if isinstance(body, dict) else None
    if not isinstance(results, list) or not results:
        return _outcome(name, "error", f"{COLLECTIVE_RPC} {name}: expected {{\"results\": [...]}}, "
                                              f"got {r.text[:300]}")
    bad = [(i, x) for i, x in enumerate(results) if x is not None]
    if not bad:
        return _outcome(name, "passed", f"{name}: all {len(results)} worker(s) answered None", results)
    msgs = "; ".join(f"worker {i}: {x}" for i, x in bad)
    return _outcome(name, "failed", f"{name}: {len(bad)} of {len(results)} worker(s) report: {msgs}", results)


def run_checks(base_url: str, names: Sequence[str], missing: str | None = None, timeout: float = 600,
               transport: httpx.BaseTransport | None = None) -> list[RpcCheckOutcome]:
    """Call every check of a config, in order, on the server at ``base_url``.

    Args:
        names: the config's ``startup_rpc_checks``.
        missing: :func:`missing_extension`'s answer: every check is then ``not_run`` with
            it (no call is made).
        timeout: seconds per call (a check may gather over every worker).
        transport: an httpx transport (tests), else the network.
    """
    if missing is not None:
        return [_outcome(n, "not_run", f"{n}: not run: {missing}") for n in names]
    with httpx.Client(timeout=timeout, transport=transport) as client:
        return [call_check(client, base_url, n) for n in names]
