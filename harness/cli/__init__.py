"""The ``evalrun`` command line: :mod:`harness.cli.app` parses the run command and dispatches
the subcommands (``diff``, ``calibrate``, ``selfcheck``, ``train-tiny``, ``doctor``, ``merge``,
``bisect``, ``history``). One convention: each subcommand is a module with
``cli_main(argv) -> exit code`` (``harness/cli/<command>.py``, imported when it runs); a
command that runs a plan calls the front door, :func:`harness.api.run`."""

from harness.cli.app import console_main, main

__all__ = ["console_main", "main"]
