"""A config's server arguments: split like a shell, flags evalrun owns refused, the
speculative config taken out and typed, and warnings for what evalrun passes to vLLM
without reading it. Both forms (:mod:`harness.config.native_form`,
:mod:`harness.config.vllm_form`) read their ``server_args`` and speculative configs here.
"""

from __future__ import annotations

import difflib
import shlex
from pathlib import Path

from pydantic import ValidationError

from harness.config.schema import ConfigError, ConfigWarning, JsonValue, SpeculativeConfigSpec
from harness.config.vllm_args import SPEC_FLAG, ArgsError, hits_of, pop_json_flag
from harness.config.vllm_parser import current_table, speculative_doubts


def split_args(text: str, where: str) -> list[str]:
    """Split a server-args string like a shell would (never running one).

    Raises:
        ConfigError: naming ``where`` when quotes are unbalanced.
    """
    try:
        return shlex.split(text or "")
    except ValueError as e:
        raise ConfigError(f"{where}: cannot split server_args: {e}") from e


#: Server settings evalrun sets itself (it picks a free port and binds to loopback, where
#: the dev endpoint ``/server_info`` is safe), as destinations of vLLM's parser; a config
#: may not set them. ``uds`` (a Unix socket instead of host and port) would leave evalrun
#: no address to reach.
OWNED_DESTS = ("port", "host", "uds")
OWNED_FLAGS = ("--port", "--host")


def refuse_owned_flags(argv: list[str], where: str) -> None:
    """Refuse server arguments that evalrun owns (:data:`OWNED_DESTS`).

    Args:
        argv: split server arguments.
        where: ``<file>: <key>`` for the message.

    Raises:
        ConfigError: naming the file, key and flag, when a flag that sets ``port``,
            ``host`` or ``uds`` is present in any spelling vLLM's parser accepts
            (``--port=N``, ``--po 8000`` as an unambiguous prefix; see
            :mod:`harness.config.vllm_parser`). vLLM's own test refuses a ``--port`` too
            (``RemoteOpenAIServer`` picks the port).
    """
    for dest in OWNED_DESTS:
        for h in hits_of(argv, dest):
            raise ConfigError(
                f"{where}: remove {h.spelled}: evalrun sets {' and '.join(OWNED_FLAGS)} itself "
                "(a free port on 127.0.0.1 for each server)"
            )


def doubt_warnings(argv: list[str], path: Path, line: int | None) -> list[ConfigWarning]:
    """One warning per item of ``argv`` that may change speculation but that evalrun cannot
    read (:func:`harness.config.vllm_parser.speculative_doubts`): never a silent pass-through
    into a variant planned without speculation; the pre-launch check parses the commands
    with the installed vLLM and refuses a reference that speculates."""
    where = f"{path}:{line}" if line else f"{path}"
    table = current_table()
    return [ConfigWarning(
        file=str(path), line=line, key="server_args", nearest=None,
        message=(f"{where}: server_args: {d}: evalrun cannot tell whether it changes speculation "
                 f"({table.source} of vLLM {table.vllm_version}'s parser); every variant keeps it, and the "
                 "pre-launch check refuses a variant planned without speculation whose arguments "
                 "speculate under the installed vLLM"),
    ) for d in speculative_doubts(argv, table)]


def pop_speculative_config(argv: list[str], where: str) -> tuple[list[str], dict[str, JsonValue] | None]:
    """Remove the speculative config from ``argv`` in every spelling vLLM's parser
    accepts (every option string of its ``speculative_config`` action, e.g. ``-sc``, with
    ``=``, ``_`` for ``-``, prefixes and dotted sub-keys, and the shorthands that feed it,
    ``--spec-method`` / ``--spec-model`` / ``--spec-tokens``;
    :func:`harness.config.vllm_args.pop_json_flag`).

    Returns:
        (argv without the flag, the JSON mapping vLLM would receive, or None when absent).

    Raises:
        ConfigError: when a value is missing or the whole-JSON value is not a JSON object.
    """
    try:
        out, spec, _ = pop_json_flag(argv, SPEC_FLAG, where)
    except ArgsError as e:
        raise ConfigError(str(e)) from None
    return out, spec



def typed_speculative_config(spec: dict[str, JsonValue], where: str) -> SpeculativeConfigSpec:
    """Validate a ``--speculative-config`` JSON mapping into :class:`SpeculativeConfigSpec`.

    Args:
        spec: the parsed JSON object.
        where: ``"<file>:<line>: server_args"``, put in front of every message.

    Raises:
        ConfigError: a wrong type or a value out of range of a typed key, named by its
            key inside the JSON (a key evalrun does not type is passed through; see
            :func:`speculative_warnings`).
    """
    try:
        return SpeculativeConfigSpec.model_validate(spec)  # untyped keys pass through
    except ValidationError as e:
        valid = list(SpeculativeConfigSpec.model_fields)
        msgs = []
        for err in e.errors():
            key = ".".join(str(x) for x in err["loc"]) or "(the object)"
            if err["type"] == "extra_forbidden":
                near = difflib.get_close_matches(str(err["loc"][-1]), valid, n=1, cutoff=0.5)
                hint = f"; did you mean '{near[0]}'?" if near else ""
                msgs.append(f"{where}: {SPEC_FLAG}: unknown key '{key}'{hint} (valid keys: {', '.join(valid)})")
            else:
                msgs.append(f"{where}: {SPEC_FLAG}: key '{key}': {err['msg']} (got {err.get('input')!r})")
        raise ConfigError("\n".join(msgs)) from None



def speculative_warnings(spec: SpeculativeConfigSpec, path: Path, line: int | None, key: str) -> list[ConfigWarning]:
    """One warning per speculative-config key evalrun does not type: passed to vLLM
    unchanged, checked by vLLM's own parser before launch."""
    known = [k for k in SpeculativeConfigSpec.model_fields]
    out = []
    where = f"{path}:{line}" if line else f"{path}"
    for k in spec.untyped_keys():
        near = difflib.get_close_matches(k, known, n=1, cutoff=0.75)
        hint = f"; did you mean '{near[0]}'?" if near else ""
        out.append(ConfigWarning(
            file=str(path), line=line, key=f"{key}.{k}", nearest=near[0] if near else None,
            message=(f"{where}: {key}: key '{k}' is not one evalrun knows; passed to vLLM unchanged "
                     f"(vLLM's parser checks it before launch){hint}"),
        ))
    return out

