"""The server's watchdog: kills a process group when evalrun ends.

Run by path in a fresh interpreter of evalrun's own (:mod:`harness.engine.probes`;
standard library only) as ``python group_watchdog.py PGID`` with stdin a pipe whose only
writer is evalrun. It waits until that pipe ends, which happens when evalrun exits in any
way (SIGKILL included: the kernel closes the write end), then sends SIGKILL to process
group ``PGID`` (children that the parent-death signal does not reach). evalrun writes
:data:`DONE` before closing the pipe when the group was checked empty, so the watchdog
never signals a process group number that may have been reused. Started by
:func:`harness.engine.server.start_watchdog`.
"""

from __future__ import annotations

import os
import signal
import sys

#: written by evalrun before it closes the pipe: the group is gone, nothing to kill.
DONE = b"done"


def last_bytes(fd: int, keep: int = len(DONE)) -> bytes:
    """The last ``keep`` bytes read from ``fd`` until it ends (or cannot be read)."""
    seen = b""
    try:
        while True:
            b = os.read(fd, 4096)
            if not b:
                break
            seen = (seen + b)[-keep:]
    except OSError:
        pass
    return seen


def main(argv: list[str]) -> None:
    """Wait for stdin to end; SIGKILL process group ``argv[0]`` unless :data:`DONE` came."""
    pgid = int(argv[0])
    if last_bytes(0) != DONE:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


if __name__ == "__main__":
    main(sys.argv[1:])
