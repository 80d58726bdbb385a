"""One run, one folder: every path of a run folder (:class:`RunFolder`), and the claim a run
takes atomically before it writes anything.

The claim is ``<run folder>/.evalrun-claim.json`` (who holds the folder: pid, host,
start time, command line), created with ``link(2)`` from a complete temporary file, so
exactly one of two runs started together with the same ``--run-id`` gets it, and the
loser reads the winner's details, never a half-written file. The winner also holds an
exclusive ``flock`` on the claim for as long as the run lasts, so a refusal can say
whether the holder still runs.

A claim is never released by deleting it: a folder that was claimed once belongs to
that attempt (its record and logs are never overwritten); a rerun needs another id.
A folder that already holds files of a run (``run.json``, ``samples/``, ``logs/``)
without a claim (written by an older evalrun) is refused the same way. The one exception
is ``--resume``: :func:`reclaim_run_folder` takes over the claim of a run whose holder
no longer runs (its ``flock`` is free), so the same run continues in its own folder.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import secrets
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.records.files import MAX_SMALL_BYTES, check_record_name, check_relative, read_text
from harness.records.run_record import RunRecord, TaskResult
from harness.records.samples import Sample, read_jsonl

__all__ = ["CLAIM_FILE", "RunFolderTaken", "RunFolderClaim", "claim_run_folder", "reclaim_run_folder", "RunFolder",
           "TaskSamples", "refuse_symlinks"]

CLAIM_FILE = ".evalrun-claim.json"
#: Open flag that refuses a symlink as the last component (0 where it does not exist).
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
#: Entries that show a folder already holds (part of) a run.
_RUN_ENTRIES = ("run.json", "samples", "logs", "summary.md", "junit.xml")


class RunFolderTaken(FileExistsError):
    """The run folder is claimed by another run (running or finished), or already holds
    an earlier run's files; the message names the folder and the holder."""


@dataclass
class RunFolderClaim:
    """A held claim: keep it for the whole run (the ``flock`` lives as long as ``fd``).

    Attributes:
        run_dir: the claimed folder.
        path: the claim file.
        fd: open descriptor holding the lock (closed by :meth:`release`).
        command_line: what :meth:`take_over` records by default.
    """

    run_dir: Path
    path: Path
    fd: int | None
    command_line: list[str] | None = None

    def take_over(self, command_line: list[str] | None = None) -> None:
        """Rewrite the held claim (same inode, still locked) with this process as holder
        (``resumed: true``); called once a resume is decided.

        Raises:
            OSError: the claim cannot be written.
        """
        if self.fd is None:
            raise OSError(f"{self.path}: the claim is no longer held")
        info = {
            "pid": os.getpid(), "hostname": platform.node(),
            "started_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command_line": list(command_line or self.command_line or sys.argv), "resumed": True,
        }
        data = (json.dumps(info, indent=1) + "\n").encode("utf-8")
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)
        os.fsync(self.fd)

    def release(self) -> None:
        """Drop the lock (the claim file stays: the folder still belongs to this run)."""
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None


def _lock(fd: int) -> bool:
    """Take an exclusive non-blocking flock on ``fd``; False when another process has it
    (True where flock does not exist)."""
    try:
        import fcntl  # noqa: PLC0415 - POSIX only: its absence is handled below
    except ImportError:  # not POSIX: the link(2) claim alone decides
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def _holder(path: Path) -> str:
    """Who holds a claim, in words (pid, host, start, command; still running or not)."""
    try:
        info = json.loads(read_text(path, MAX_SMALL_BYTES, "claim"))
        if not isinstance(info, dict):
            raise ValueError("not an object")
    except (OSError, ValueError):
        return f"an unreadable claim {path}"
    alive = None
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
        try:
            alive = not _lock(fd)
        finally:
            os.close(fd)
    except OSError:
        pass
    state = {True: "still running", False: "no longer running", None: "state unknown"}[alive]
    cl = info.get("command_line")
    cmd = " ".join(map(str, cl if isinstance(cl, list) else []))[:200]
    return (f"evalrun pid {info.get('pid')} on host {info.get('hostname')!r}, started {info.get('started_at')} "
            f"({state}; claim {path}; command: {cmd})")


def claim_run_folder(run_dir: str | Path, command_line: list[str] | None = None) -> RunFolderClaim:
    """Claim ``run_dir`` for this process, creating it (and its parents) as needed.

    Args:
        run_dir: the run folder (``<results dir>/<run id>``).
        command_line: recorded in the claim, for the refusal message of a second run.

    Returns:
        The held claim (keep it until the run ends; :meth:`RunFolderClaim.release`).

    Raises:
        RunFolderTaken: another run claimed the folder (the message names its pid, host,
            start time, command and whether it still runs), or the folder holds an
            earlier run's files.
        OSError: the folder cannot be created or written (the caller reports it).
    """
    run_dir = Path(run_dir)
    if run_dir.is_symlink():
        raise RunFolderTaken(f"{run_dir}: is a symlink (to {os.readlink(run_dir)!r}); a run folder is a real folder "
                             "inside the results folder: choose another --run-id")
    run_dir.mkdir(parents=True, exist_ok=True)
    refuse_symlinks(run_dir)
    path = run_dir / CLAIM_FILE
    info = {
        "pid": os.getpid(), "hostname": platform.node(),
        "started_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command_line": list(command_line if command_line is not None else sys.argv),
    }
    tmp = run_dir / f".evalrun-claim.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fdt = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | _NOFOLLOW, 0o644)
    with os.fdopen(fdt, "w", encoding="utf-8") as ft:
        ft.write(json.dumps(info, indent=1) + "\n")
    try:
        os.link(tmp, path)  # atomic, fails when the claim exists; content complete
    except FileExistsError:
        raise RunFolderTaken(
            f"{run_dir}: this run folder is already claimed by {_holder(path)}; a run id is used "
            "once (runs are never mixed or overwritten): choose another --run-id") from None
    except OSError:  # a file system without hard links: exclusive create instead
        try:
            fd0 = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | _NOFOLLOW, 0o644)
        except FileExistsError:
            raise RunFolderTaken(
                f"{run_dir}: this run folder is already claimed by {_holder(path)}; choose another --run-id"
            ) from None
        with os.fdopen(fd0, "w", encoding="utf-8") as f:
            f.write(json.dumps(info, indent=1) + "\n")
    finally:
        try:
            tmp.unlink()
        except OSError:
            pass
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    _lock(fd)
    earlier = [e for e in _RUN_ENTRIES if (run_dir / e).exists()]
    if earlier:
        os.close(fd)
        try:
            path.unlink()  # nothing of this attempt was written: the folder stays the earlier run's
        except OSError:
            pass
        raise RunFolderTaken(
            f"{run_dir}: this folder already holds an earlier run ({', '.join(earlier)}); it is kept as it is: "
            "choose another --run-id")
    return RunFolderClaim(run_dir=run_dir, path=path, fd=fd)


def reclaim_run_folder(run_dir: str | Path, command_line: list[str] | None = None) -> RunFolderClaim:
    """Take the lock of the claim of ``run_dir`` for a resumed run (``--resume``): the
    folder must be a real folder holding no symlink (:func:`refuse_symlinks`), its claim
    a regular file (opened without following a symlink) whose holder no longer runs (its
    ``flock`` is free). The claim file is not changed here: :meth:`RunFolderClaim.take_over`
    rewrites it once the resume is decided (a refused resume leaves it as it was).

    Raises:
        RunFolderTaken: the folder is a symlink or holds one, has no claim (never a run's
            folder, or written by an evalrun older than claims), its claim is not a regular
            file, or its holder still runs (the message names it).
        OSError: the claim cannot be opened (the caller reports it).
    """
    run_dir = Path(run_dir)
    if run_dir.is_symlink():
        raise RunFolderTaken(f"{run_dir}: is a symlink; resume the folder it names ({run_dir.resolve()})")
    path = run_dir / CLAIM_FILE
    if not path.is_file() and not path.is_symlink():
        raise RunFolderTaken(f"{run_dir}: no run claimed this folder ({CLAIM_FILE} missing): nothing to resume")
    refuse_symlinks(run_dir)
    try:
        fd = os.open(path, os.O_RDWR | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise RunFolderTaken(f"{path}: cannot open the claim ({e.strerror or e}): nothing resumed") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RunFolderTaken(f"{path}: the claim is not a regular file: nothing resumed")
    if not _lock(fd):
        os.close(fd)
        raise RunFolderTaken(f"{run_dir}: cannot resume: the folder is held by {_holder(path)}")
    return RunFolderClaim(run_dir=run_dir, path=path, fd=fd, command_line=command_line)


def refuse_symlinks(run_dir: Path, limit: int = 1_000_000) -> None:
    """Refuse a run folder that holds a symlink anywhere inside it (a claim, ``run.json``,
    ``attempts``, ``samples``, a log ...): evalrun writes and moves files only inside
    ``--results-dir``, and never through a link (the folder is walked without following
    links; at most ``limit`` entries).

    Raises:
        RunFolderTaken: naming the first symlink found, or a folder of more than ``limit``
            entries.
    """
    seen = 0
    for top, dirs, files in os.walk(run_dir, followlinks=False):
        for name in dirs + files:
            seen += 1
            p = Path(top) / name
            if p.is_symlink():
                raise RunFolderTaken(f"{p}: a symlink inside the run folder {run_dir} (to {os.readlink(p)!r}); "
                                     "evalrun never writes, moves or resumes through one: refused")
        if seen > limit:
            raise RunFolderTaken(f"{run_dir}: more than {limit} entries: not a run folder evalrun wrote")


@dataclass(frozen=True)
class TaskSamples:
    """One task of one variant of one config in a run record, with where its samples are
    (:meth:`RunFolder.tasks`); :meth:`read` reads them.

    Attributes:
        config, variant, task: the names.
        result: the task's record (``samples`` is its path relative to the run folder).
        path: its samples file.
    """

    config: str
    variant: str
    task: str
    result: TaskResult
    path: Path

    def read(self) -> list[Sample]:
        """The task's samples, in file order.

        Raises:
            OSError, ValueError: the file cannot be read or holds a malformed line.
        """
        return read_jsonl(self.path)

    def by_question(self) -> dict[str, Sample]:
        """The task's samples by question id (:meth:`read`; raises as it does)."""
        return {s.question_id: s for s in self.read()}


@dataclass(frozen=True)
class RunFolder:
    """Every path of one run folder, named once: the claim, the record and its reports,
    server logs and their pid files, the plugin's reports, samples, the earlier attempts
    of a resumed run, and the walk over a record's tasks and their samples
    (:meth:`tasks`).

    Layout (``<purpose>``: ``rerun`` or ``scoring`` for a server started again)::

        .evalrun-claim.json  run.json  summary.md  summary.html  junit.xml
        logs/evalrun-error.log
        logs/<config>/<variant>[.<purpose>].log   (and .pid.json beside it)
        plugin/<config>/<variant>[.<purpose>]/
        samples/<config>/<variant>/<task>[.raw|.rerun|.target_logprobs].jsonl
        attempts/<n>/   (--resume: the earlier attempts' files, same relative paths)

    Attributes:
        root: the run folder (``<results dir>/<run id>``).
    """

    root: Path

    @property
    def claim_file(self) -> Path:
        """Who holds the folder (:func:`claim_run_folder`)."""
        return self.root / CLAIM_FILE

    @property
    def record(self) -> Path:
        """``run.json``."""
        return self.root / "run.json"

    @property
    def error_log(self) -> Path:
        """The traceback of an unexpected exception (``logs/evalrun-error.log``)."""
        return self.root / "logs" / "evalrun-error.log"

    def log(self, config: str, variant: str, purpose: str = "") -> Path:
        """A server's log: ``logs/<config>/<variant>[.<purpose>].log``."""
        return self.root / "logs" / self._name(config) / f"{_stem(self._name(variant), purpose)}.log"

    def pid_file(self, config: str, variant: str, purpose: str = "") -> Path:
        """A server's pid file, beside its log (``<variant>[.<purpose>].pid.json``)."""
        return self.root / "logs" / self._name(config) / f"{_stem(self._name(variant), purpose)}.pid.json"

    def plugin(self, config: str, variant: str, purpose: str = "") -> Path:
        """Where evalrun's vLLM plugin writes a server's reports: ``plugin/<config>/<variant>[.<purpose>]/``."""
        return self.root / "plugin" / self._name(config) / _stem(self._name(variant), purpose)

    def samples(self, config: str, variant: str, task: str, kind: str = "") -> Path:
        """A task's samples: ``samples/<config>/<variant>/<task>[.<kind>].jsonl`` (kind
        ``raw``: the engine's answers before judging, ``rerun``: the noise rerun,
        ``target_logprobs``: the sampled scorer's scores)."""
        return (self.root / "samples" / self._name(config) / self._name(variant)
                / f"{_stem(self._name(task), kind)}.jsonl")

    def attempt(self, n: int) -> Path:
        """``attempts/<n>/``: the files of the n-th earlier attempt of a resumed run."""
        return self.root / "attempts" / str(int(n))

    def next_attempt(self) -> int:
        """The first ``n`` whose ``attempts/<n>/`` does not exist yet (1, 2, ...)."""
        n = 1
        while self.attempt(n).exists():
            n += 1
        return n

    def read(self, samples: str) -> list[Sample]:
        """The samples at ``samples``, a path relative to the folder as the record holds
        it (``TaskResult.samples``, ``RerunRecord.samples``).

        Raises:
            OSError, ValueError: the file cannot be read (not a regular file, too large)
                or holds a malformed line; :class:`~harness.records.files.UnsafeName`
                (a ValueError): ``samples`` would leave the folder.
        """
        return read_jsonl(self.root / check_relative(samples, str(self.record), "samples path"))

    def _name(self, name: str) -> str:
        """``name`` as one safe path component (:func:`harness.records.files.check_record_name`).

        Raises:
            UnsafeName: a ``/``, ``..``, absolute or otherwise unsafe name (named).
        """
        return check_record_name(name, str(self.root), "name")

    def tasks(self, record: RunRecord, config: str | None = None) -> Iterator[TaskSamples]:
        """Every task of ``record`` (of ``config`` only, when given) with its samples file,
        config by config, variant by variant, in record order; nothing is read until
        :meth:`TaskSamples.read`.

        Raises:
            UnsafeName: a recorded samples path that would leave the folder (named).
        """
        for c in record.configs:
            if config is not None and c.name != config:
                continue
            for vname, v in c.variants.items():
                for tname, t in v.tasks.items():
                    rel = check_relative(t.samples, str(self.record), f"configs.{c.name}.variants.{vname}.tasks."
                                                                       f"{tname}.samples")
                    yield TaskSamples(c.name, vname, tname, t, self.root / rel)

    def task(self, record: RunRecord, config: str, variant: str, task: str) -> TaskSamples | None:
        """One task of ``record`` (None when the record has no such config, variant or task)."""
        return next((ts for ts in self.tasks(record, config) if (ts.variant, ts.task) == (variant, task)), None)


def _stem(name: str, suffix: str) -> str:
    return f"{name}.{suffix}" if suffix else name
