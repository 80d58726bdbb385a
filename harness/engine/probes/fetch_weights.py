"""Probe: download a hub model's weights before its server's start-up clock, as vLLM's
``RemoteOpenAIServer`` does.

Run by path in the servers' interpreter (:mod:`harness.engine.probes`) by
:func:`harness.engine.launch.fetch_weights`, with the variant's environment; standard
library only at module level. Arguments: the ``vllm serve`` arguments after ``serve``
(``MODEL ARGS...``). It runs the lines of vLLM's ``tests/utils.py`` (``RemoteVLLMServer``:
"download the model before starting the server to avoid timeout"): the serve subcommand's
own parser (``ServeSubcommand().subparser_init``) on ``["--model", MODEL, *ARGS]``,
``AsyncEngineArgs.from_cli_args``, ``create_model_config``, ``create_load_config``,
``get_model_loader(load_config).download_model(model_config)``. Prints :data:`MARKER` and
``done`` when the weights are there; a traceback and exit code 1 otherwise.
"""

from __future__ import annotations

import os
import sys

#: marks the result line on stdout.
MARKER = "EVALRUN_FETCH_WEIGHTS "


def fetch(model: str, args: list[str]) -> None:
    """vLLM's download step for ``model`` started with ``args`` (module docstring)."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.model_executor.model_loader import get_model_loader
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vLLM's remote OpenAI server.")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    parser = ServeSubcommand().subparser_init(subparsers)
    parsed = parser.parse_args(["--model", model, *args])
    engine_args = AsyncEngineArgs.from_cli_args(parsed)
    model_config = engine_args.create_model_config()
    load_config = engine_args.create_load_config()
    get_model_loader(load_config).download_model(model_config)


def main(argv: list[str]) -> None:
    """Fetch, then print :data:`MARKER` ``done``."""
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        sys.path[0] = ""
    fetch(argv[0], argv[1:])
    print(MARKER + "done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
