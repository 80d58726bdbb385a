"""The one reader of the files evalrun reads (configs, model lists, data files, and through
:mod:`harness.records.files` run records, samples, baselines, claims, pid files): a file is
read only when it is a regular file (after following symlinks), opened with ``O_NONBLOCK``
so that a named pipe or a device never blocks the open, checked with ``fstat`` on the open
descriptor (no race between the check and the read), and read up to a stated size. Every
refusal is an :class:`UnreadableFile` (an :class:`OSError`) whose message names the file.

It lives in the config stage, the earliest that reads files, so every later stage reads
through it too (``tests/test_architecture.py``).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["MAX_RECORD_BYTES", "UnreadableFile", "read_bytes", "read_text", "present"]

#: Largest ``run.json`` (or baseline, ``bisect.json``, config, model list) read: the H200
#: lists' records stay under 5 MB; 256 MiB is a bound against a file that is not a record,
#: not an estimate.
MAX_RECORD_BYTES = 256 * 2**20


class UnreadableFile(OSError):
    """A file evalrun reads is not a regular file, is larger than its bound, or cannot be
    opened or read; the message names the file and why."""

    def __str__(self) -> str:
        """The message alone (it names the file), without ``[Errno n]`` and the repeated name."""
        return str(self.strerror) if self.strerror else super().__str__()


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


def present(path: str | Path) -> bool:
    """Whether anything is at ``path`` (a file, folder, pipe, or a symlink, dangling or not):
    where ``is_file()`` would say "does not exist" of a named pipe, the caller reads it and
    :func:`read_bytes` says what it is."""
    return os.path.lexists(path)
