"""The files evalrun reads back (run records, samples, baselines, claims, pid files,
bisection records), read through the one reader (:mod:`harness.config.reader`, re-exported
here: :func:`read_bytes`, :func:`read_text`, :class:`UnreadableFile`), and the checks on
names and paths that come from a record.

A file is read only when it is a regular file (after following symlinks: a run folder may
be reached through ``latest``), never blocks on a named pipe or a device, and is read up
to a stated size; every refusal names the file.

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

from harness.config.reader import MAX_RECORD_BYTES, UnreadableFile, _refuse, read_bytes, read_text
from harness.config.types import check_name_text

__all__ = ["MAX_RECORD_BYTES", "MAX_SAMPLES_BYTES", "MAX_SMALL_BYTES", "UnreadableFile", "UnsafeName",
           "read_bytes", "read_text", "check_record_name", "check_relative", "no_symlink_below"]

#: Largest samples file read (a 1319-question GSM8K task with top-k log-probabilities is
#: about 30 MB).
MAX_SAMPLES_BYTES = 1024 * 2**20
#: Largest claim or pid file read (a few hundred bytes each).
MAX_SMALL_BYTES = 1 * 2**20

class UnsafeName(ValueError):
    """A name or relative path read from a record would leave its folder; the message
    names the record, the field and the value."""


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
