"""The ``evalrun`` command line: :mod:`harness.cli.app` parses the run command and dispatches
the subcommands (``diff``, ``calibrate``, ``selfcheck``, ``train-tiny``, ``doctor``, ``merge``,
``bisect``, ``history``), each in its own module, imported when it runs."""

from harness.cli.app import console_main, main

__all__ = ["console_main", "main"]
