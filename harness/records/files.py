"""The one reader of the files evalrun reads back (run records, samples, baselines, claims,
pid files, bisection records) and the checks on names and paths that come from a record.

A file is read only when it is a regular file (after following symlinks: a run folder may
be reached through ``latest``), opened with ``O_NONBLOCK`` so that a named pipe or a
device never blocks the open, checked with ``fstat`` on the open descriptor (no race
between the check and the read), and read up to a stated size. Every refusal is an
:class:`UnreadableFile` (an :class:`OSError`, so the callers' ``except OSError`` keeps
working) whose message names the file.

Names read from a record (config, variant, task, run id) are checked as names are when a
config is loaded (:data:`harness.config.checks.NAME_PATTERN`): one path component, no
``..``. A relative path read from a record (``TaskResult.samples``) must stay inside the
run folder: relative, no ``..`` component.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath

from harness.config.types import check_name_text

__all__ = ["MAX_RECORD_BYTES", "MAX_SAMPLES_BYTES", "MAX_SMALL_BYTES", "UnreadableFile", "UnsafeName",
           "read_bytes", "read_text", "check_record_name", "check_relative", "no_symlink_below"]

#: Largest ``run.json`` (or baseline, ``bisect.json``) read: the H200 lists' records stay
#: under 5 MB; 256 MiB is a bound against a file that is not a record, not an estimate.
MAX_RECORD_BYTES = 256 * 2**20
#: Largest samples file read (a 1319-question GSM8K task with top-k log-probabilities is
#: about 30 MB).
MAX_SAMPLES_BYTES = 1024 * 2**20
#: Largest claim or pid file read (a few hundred bytes each).
MAX_SMALL_BYTES = 1 * 2**20

class UnreadableFile(OSError):
    """A file evalrun reads is not a regular file, is larger than its bound, or cannot be
    opened or read; the message names the file and why."""

    def __str__(self) -> str:
        """The message alone (it names the file), without ``[Errno n]`` and the repeated name."""
        return str(self.strerror) if self.strerror else super().__str__()


class UnsafeName(ValueError):
    """A name or relative path read from a record would leave its folder; the message
    names the record, the field and the value."""


def _refuse(path: Path, why: str, err: int = errno.EINVAL) -> UnreadableFile:
    e = UnreadableFile(err, f"{path}: {why}")
    e.filename = str(path)
    return e


def read_bytes(path: str | Path, limit: int = MAX_RECORD_BYTES, what: str = "file") -> bytes:
    """The bytes of the regular file ``path`` (module docstring).

    Args:
        path: the file (a symlink is followed; its target must be a regular file).
        limit: the most bytes accepted.
        what: what the file is, for the message (``run record``, ``samples file``).

    Raises:
        UnreadableFile: missing, not a regular file (a named pipe, a folder, a device),
            over ``limit`` bytes, or an I/O error; the message names ``path``.
    """
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise _refuse(p, f"cannot read {what}: {e.strerror or e}", e.errno or errno.EIO) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a named pipe" if stat.S_ISFIFO(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode)
                    else "a socket" if stat.S_ISSOCK(st.st_mode) else "a device or special file")
            raise _refuse(p, f"cannot read {what}: it is {kind}, not a regular file")
        if st.st_size > limit:
            raise _refuse(p, f"cannot read {what}: {st.st_size} bytes, more than the {limit} this evalrun reads",
                          errno.EFBIG)
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # grew while read
                raise _refuse(p, f"cannot read {what}: more than the {limit} bytes this evalrun reads", errno.EFBIG)
        return b"".join(chunks)
    except UnreadableFile:
        raise
    except OSError as e:
        raise _refuse(p, f"cannot read {what}: {e.strerror or e}", e.errno or errno.EIO) from None
    finally:
        os.close(fd)


def read_text(path: str | Path, limit: int = MAX_RECORD_BYTES, what: str = "file") -> str:
    """:func:`read_bytes` decoded as UTF-8.

    Raises:
        UnreadableFile: as :func:`read_bytes`, or the bytes are not UTF-8 (named).
    """
    raw = read_bytes(path, limit, what)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _refuse(Path(path), f"cannot read {what}: not UTF-8 text (byte {e.start})") from None


def check_record_name(name: object, where: str, field: str) -> str:
    """``name`` (a config, variant, task or run id read from ``where``) as a safe path
    component: the one rule of names, :func:`harness.config.types.check_name_text`.

    Raises:
        UnsafeName: not a string, empty, longer than 100 characters, a character outside
            letters, digits, ``.``, ``_``, ``+``, ``-``, not starting with a letter or
            digit, or containing ``..``; the message names ``where`` and ``field``.
    """
    try:
        return check_name_text(name)
    except ValueError as e:
        raise UnsafeName(f"{where}: {field} {repr(name)[:120]} is not a safe name: {e}; refused, it would name "
                         "a path outside its folder") from None


def check_relative(rel: object, where: str, field: str) -> str:
    """``rel`` (a path relative to a run folder, read from ``where``) when it stays inside:
    relative, ``/``-separated, no empty, ``.`` or ``..`` component, no NUL.

    Raises:
        UnsafeName: otherwise, naming ``where``, ``field`` and the value.
    """
    ok = isinstance(rel, str) and rel and "\0" not in rel and "\\" not in rel
    if ok:
        parts = PurePosixPath(str(rel)).parts
        ok = (not PurePosixPath(str(rel)).is_absolute() and bool(parts)
              and all(p not in ("", ".", "..") for p in parts) and not str(rel).startswith("/"))
    if not ok:
        raise UnsafeName(f"{where}: {field} {str(rel)[:200]!r} is not a path inside the run folder: refused")
    return str(rel)


def no_symlink_below(root: Path, path: Path) -> None:
    """Refuse when any component of ``path`` below ``root`` (``path`` itself included) is
    a symlink, or ``path`` is not below ``root``: what is written or moved there stays in
    ``root``. Components that do not exist yet are fine.

    Raises:
        UnreadableFile: naming the symlink (errno ``ELOOP``) or the path outside.
    """
    try:
        rel = path.relative_to(root)
    except ValueError:
        raise _refuse(path, f"not inside {root}: refused") from None
    cur = root
    for part in rel.parts:
        if part in ("..", "."):
            raise _refuse(path, f"'{part}' in a path inside {root}: refused")
        cur = cur / part
        try:
            if stat.S_ISLNK(os.lstat(cur).st_mode):
                raise _refuse(cur, f"is a symlink inside the run folder {root}: evalrun never writes or moves "
                                   "files through one", errno.ELOOP)
        except FileNotFoundError:
            return
