"""``python -m harness.cli``: the ``evalrun`` console script."""

from harness.cli.app import console_main

console_main()
