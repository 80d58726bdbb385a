"""Probe: the installed torch's CUDA device count.

Run by path in the servers' interpreter (:mod:`harness.engine.probes`), so that evalrun
itself never imports torch (the dry run's cost). Prints one integer:
``torch.cuda.device_count()``, or 0 when CUDA is not available; without torch it fails
(a traceback, exit code 1). Read by :func:`harness.engine.devices.probed_devices`.
"""

from __future__ import annotations

import os
import sys


def device_count() -> int:
    """``torch.cuda.device_count()``, 0 without CUDA.

    Raises:
        ImportError: torch is not installed.
    """
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def path_as_dash_c() -> None:
    """``sys.path`` as ``python -c`` has it: the current folder first (``""``), not this
    file's folder (no probe's name can shadow a module the interpreter asked imports)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        sys.path[0] = ""


def main() -> None:
    """Print the device count."""
    path_as_dash_c()
    print(device_count())


if __name__ == "__main__":
    main()
