"""What the run record says of server processes: a variant's server, the pre-launch check
of every server command, servers an earlier run left, evalrun's vLLM plugin's report.

Part of the run record (:mod:`harness.records.run_record`, which re-exports every name).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from harness.records.bounds import Bounded


class _Model(Bounded, BaseModel):
    """Every run record type (:class:`harness.records.bounds.Bounded`)."""


class ServerRecord(_Model):
    """What happened to a variant's server process (start-up outcomes are distinct).

    Attributes:
        status: ``ready`` (answered ``/health``), ``exited_early`` (exited during
            start-up), ``not_ready_timeout`` (no ``/health`` before
            ``startup_max_wait_seconds``), ``launch_failed`` (the command could not be
            executed), ``args_rejected`` (vLLM's parser rejected the arguments before
            launch), ``died_mid_task``, ``interrupted`` (a signal stopped the run),
            ``not_started`` (the run stopped before this variant), ``build_failed`` (the
            engine build the variant names could not be made), or None before start.
        exit_code: the process's exit code (negative: killed by that signal), or None.
        seconds: from launch to ready, or to the failure.
        pid: the server's process id (also its process group id).
    """

    status: Literal["ready", "exited_early", "not_ready_timeout", "launch_failed", "args_rejected",
                    "died_mid_task", "interrupted", "not_started", "build_failed"] | None = None
    exit_code: int | None = None
    seconds: float | None = None
    pid: int | None = None


class PreflightProblemRecord(_Model):
    """A server command rejected before launch (:mod:`harness.engine.preflight`).

    Attributes:
        variant: ``<config>/<variant>``.
        config_path: its config file.
        python: the interpreter of the command.
        kind: ``launch_failed`` (the interpreter cannot be executed or has no vLLM),
            ``args_rejected`` (vLLM's parser or validation rejected the arguments) or
            ``async_not_supported`` (the arguments parse, but vLLM's
            ``VllmConfig.__post_init__`` would refuse explicit async scheduling with this
            drafter at start-up; the runner then runs the variant as not applicable).
        message: what failed, naming the flag (vLLM's own error text).
    """

    variant: str
    config_path: str
    python: str
    kind: Literal["launch_failed", "args_rejected", "async_not_supported"]
    message: str

    def describe(self) -> str:
        """One paragraph naming the variant, the config, the interpreter and the error."""
        return f"{self.variant} (config {self.config_path}, python {self.python}): {self.message}"


class PreflightRecord(_Model):
    """The pre-launch check of every server command with the installed vLLM's parser:
    how many commands, how long (seconds) and what it rejected; ``cached`` when the
    all-clear came from the results folder's cache of an earlier identical check
    (:mod:`harness.engine.preflight_cache`) instead of running vLLM's parser."""

    checked: int
    seconds: float
    problems: list[PreflightProblemRecord] = []
    cached: bool = False


#: The verdicts on a pid file of an earlier run (:func:`harness.engine.leftovers.judge_pid_file`).
LeftoverVerdict = Literal["leftover", "cannot_tell", "invalid"]


class LeftoverServerRecord(_Model):
    """A pid file of an earlier run whose process may still run (found before this run
    launched anything; :mod:`harness.engine.leftovers`).

    Attributes:
        verdict: ``leftover`` (pid, start time and command line match the record and
            its run is gone), ``cannot_tell`` (the file lacks what it takes to be sure)
            or ``invalid`` (the file cannot be the record of an evalrun server).
        pid: the recorded pid (None when the file names no usable one).
        pid_file: the file read.
        command: the server's command line (live for a leftover, else as recorded).
        reason: why this verdict.
        kill_command: the shell command that ends its process group; only for a leftover.
    """

    verdict: LeftoverVerdict = "leftover"
    pid: int | None = None
    pid_file: str
    command: str = ""
    reason: str = ""
    kill_command: str | None = None

    def describe(self) -> str:
        """One line for the terminal: what was found and, only for a leftover, how to end it."""
        cmd = self.command[:160]
        if self.verdict == "leftover" and self.kill_command:
            return (f"a vLLM server started by an earlier evalrun run is still running: pid {self.pid} "
                    f"(recorded in {self.pid_file}): {cmd}; end it with: {self.kill_command}")
        if self.verdict == "cannot_tell":
            return (f"cannot tell whether live process {self.pid} is the vLLM server recorded in {self.pid_file}: "
                    f"{self.reason}; no command suggested (check it with: ps -o pid,pgid,lstart,args -p {self.pid})")
        return f"pid file {self.pid_file} ignored: {self.reason}; no command suggested"


class PluginReport(_Model):
    """What evalrun's vLLM plugin reported for one variant's server (``harness.faults.plugin``).

    Attributes:
        processes: server processes that wrote a report (0: the plugin never loaded).
        faults: fault names active in those processes.
        cpu_async: the plugin was asked to keep async scheduling on the CPU.
        model_runners: ``module.Class`` of the model runner(s) in use.
        patched: what the plugin patched (``module.Class.attr``).
        counts: counters summed over processes: ``<fault>.executions``,
            ``<fault>.changed``, ``batch.*`` (condense / reorder events),
            ``cpu_async.kept``.
        errors: unreadable report files.
        dir: the reports' folder, relative to the run folder.
        async_scheduling_via: for a variant that asked for async scheduling, how it was
            obtained (``"engine"`` or the plugin).
        exercised: for a fault variant, whether its patched code ran and changed a value.
        not_exercised_reason: why not.
    """

    processes: int = 0
    faults: list[str] = []
    cpu_async: bool = False
    model_runners: list[str] = []
    patched: list[str] = []
    counts: dict[str, int] = {}
    errors: list[str] = []
    dir: str | None = None
    async_scheduling_via: str | None = None
    exercised: bool | None = None
    not_exercised_reason: str | None = None
