"""One run, one folder: a run claims its folder atomically before it writes anything.

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
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CLAIM_FILE", "RunFolderTaken", "RunFolderClaim", "claim_run_folder", "reclaim_run_folder"]

CLAIM_FILE = ".evalrun-claim.json"
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
    """

    run_dir: Path
    path: Path
    fd: int | None

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
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f"an unreadable claim {path}"
    alive = None
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            alive = not _lock(fd)
        finally:
            os.close(fd)
    except OSError:
        pass
    state = {True: "still running", False: "no longer running", None: "state unknown"}[alive]
    cmd = " ".join(info.get("command_line") or [])[:200]
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
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / CLAIM_FILE
    info = {
        "pid": os.getpid(), "hostname": platform.node(),
        "started_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command_line": list(command_line if command_line is not None else sys.argv),
    }
    tmp = run_dir / f".evalrun-claim.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    tmp.write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    try:
        os.link(tmp, path)  # atomic, fails when the claim exists; content complete
    except FileExistsError:
        raise RunFolderTaken(
            f"{run_dir}: this run folder is already claimed by {_holder(path)}; a run id is used "
            "once (runs are never mixed or overwritten): choose another --run-id") from None
    except OSError:  # a file system without hard links: exclusive create instead
        try:
            fd0 = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
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
    fd = os.open(path, os.O_RDONLY)
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
    """Take over the claim of ``run_dir`` for a resumed run (``--resume``): the folder's
    claim must exist and its holder must no longer run (its ``flock`` is free); the claim
    file is then rewritten in place (same inode, still locked) with this process as holder.

    Raises:
        RunFolderTaken: the folder has no claim (never a run's folder, or written by an
            evalrun older than claims) or its holder still runs (the message names it).
        OSError: the claim cannot be opened or written (the caller reports it).
    """
    run_dir = Path(run_dir)
    path = run_dir / CLAIM_FILE
    if not path.is_file():
        raise RunFolderTaken(f"{run_dir}: no run claimed this folder ({CLAIM_FILE} missing): nothing to resume")
    fd = os.open(path, os.O_RDWR)
    if not _lock(fd):
        os.close(fd)
        raise RunFolderTaken(f"{run_dir}: cannot resume: the folder is held by {_holder(path)}")
    info = {
        "pid": os.getpid(), "hostname": platform.node(),
        "started_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command_line": list(command_line if command_line is not None else sys.argv), "resumed": True,
    }
    data = (json.dumps(info, indent=1) + "\n").encode("utf-8")
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    os.fsync(fd)
    return RunFolderClaim(run_dir=run_dir, path=path, fd=fd)
