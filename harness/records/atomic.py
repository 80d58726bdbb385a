"""Atomic file writes and the results-folder check made before any server starts.

Every file of a run folder that a reader may open while evalrun is still writing
(``run.json``, samples, reports) is written here: to a temporary file in the same
folder, flushed and fsynced, then renamed over the target with :func:`os.replace`
(atomic on POSIX and Windows within one file system). A reader sees the old file or
the new one, never a partial one; when the write fails (full disk, read-only folder,
quota) the temporary file is removed and the old file is left as it was.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["MIN_FREE_BYTES", "ResultsFolderError", "check_results_folder", "write_atomic"]

#: Free space the results folder must have before a run starts (bytes). A run of the
#: CPU list writes about 2 MB (record, samples, logs, reports); the H200 lists' logs and
#: samples stay well under 100 MB. 100 MiB is a floor, not an estimate: a disk that
#: fills mid-run is still caught by the atomic writes.
MIN_FREE_BYTES = 100 * 1024 * 1024


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: Mode of a new file: what ``open()`` would give (0666 less the umask), not mkstemp's 0600.
_FILE_MODE = 0o666 & ~_umask()


class ResultsFolderError(OSError):
    """The results folder cannot be written (not creatable, read-only, or too little
    free space); the message names the folder and the error."""


def write_atomic(path: str | Path, data: str | bytes, encoding: str = "utf-8") -> Path:
    """Write ``data`` to ``path`` atomically (module docstring).

    Args:
        path: the target file; its folder must exist.
        data: text (encoded with ``encoding``) or bytes.
        encoding: for text.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OSError: the temporary file cannot be created, written, fsynced or renamed
            (``filename`` is the target); the target is unchanged and no temporary
            file is left.
    """
    path = Path(path)
    raw = data.encode(encoding) if isinstance(data, str) else data
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, _FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        if e.filename is None:
            e.filename = str(path)
        raise
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return path


def check_results_folder(folder: str | Path, min_free_bytes: int = MIN_FREE_BYTES) -> Path:
    """Check, before any server starts, that run folders can be written under ``folder``.

    Creates ``folder`` if needed, writes and removes a probe file in it (the real test
    of permissions, quotas and read-only mounts), and reads its free space with
    :func:`shutil.disk_usage`.

    Args:
        folder: the results folder (``--results-dir``) or a run folder in it.
        min_free_bytes: the least free space accepted (default :data:`MIN_FREE_BYTES`).

    Returns:
        ``folder`` as a Path.

    Raises:
        ResultsFolderError: naming the folder and the error (cannot be created, cannot
            be written, or less than ``min_free_bytes`` free).
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ResultsFolderError(f"results folder {folder}: cannot be created: {e.strerror or e}") from e
    try:
        write_atomic(folder / ".evalrun-write-check", b"ok\n")
        (folder / ".evalrun-write-check").unlink()
    except OSError as e:
        raise ResultsFolderError(f"results folder {folder}: cannot be written: {e.strerror or e}") from e
    free = shutil.disk_usage(folder).free
    if free < min_free_bytes:
        raise ResultsFolderError(
            f"results folder {folder}: only {free / 2**20:.1f} MiB free, at least "
            f"{min_free_bytes / 2**20:.0f} MiB needed for the run record, samples and logs")
    return folder
