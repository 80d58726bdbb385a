"""The plugin's log lines: through vLLM's logger where it shows them, else stderr; a
fault's first firing per process (every firing with ``EVALRUN_FAULT_DEBUG=1``)."""

from __future__ import annotations

import logging
import os
import sys

from harness.faults.env import DEBUG_ENV, flag
from harness.faults.state import STATE

logger = logging.getLogger("vllm.evalrun.faults")


def debugging() -> bool:
    """Whether ``EVALRUN_FAULT_DEBUG`` asks to log every firing."""
    return flag(DEBUG_ENV)


def info(message: str, *args: object) -> None:
    """Log at INFO through vLLM's logger, or print to stderr when nothing would show it.

    vLLM 0.32 configures its ``vllm`` logger from the parsed arguments, and the API
    server loads general plugins while it builds the argument parser, i.e. before
    that: an INFO record would be dropped there. Engine core and workers configure
    logging before loading plugins.
    """
    if logger.isEnabledFor(logging.INFO) and (
        logging.getLogger("vllm").handlers or logging.getLogger().handlers
    ):
        logger.info(message, *args)
    else:
        print(message % args, file=sys.stderr, flush=True)


def should_report(fault: str) -> bool:
    """True for the first firing of ``fault`` in this process, and every one when debugging."""
    return debugging() or fault not in STATE.fired


def report_firing(fault: str, message: str, *args: object) -> None:
    """Log a firing of ``fault`` (call only when :func:`should_report` is True)."""
    if debugging():
        info("evalrun fault %s fired in process %d: " + message, fault, os.getpid(), *args)
    else:
        STATE.fired.add(fault)
        info(
            "evalrun fault %s fired in process %d (first time; set %s=1 to log every "
            "time): " + message,
            fault, os.getpid(), DEBUG_ENV, *args,
        )
