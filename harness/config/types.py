"""One validated type per kind of value evalrun reads: config keys, command-line options
and environment variables alike.

Each type is a pydantic ``Annotated`` type (finite, in range, the right shape), so the same
rule serves a config field (``alpha: Alpha = 0.05`` in :mod:`harness.config.schema`), an
``argparse`` option (``type=cli_type(Alpha)``: argparse names the option in its error and
exits 2 before anything runs) and an environment variable (:func:`env_value`, naming the
variable).

Bounds and their sources:

* :data:`MAX_TOKENS` = 2**20 tokens: the longest context a served model has today
  (1,048,576 tokens, e.g. Llama 4 Scout's 10M aside, which no shape here needs); a token
  count above it cannot be a prompt or completion length evalrun can send.
* :data:`MAX_SECONDS` = 7 days: longer than any CI job; a wait beyond it is a typo.
* :data:`MAX_STOP_GRACE_SECONDS` = 600 s: CI cancel graces are seconds (Buildkite 10 s,
  GitHub Actions 7.5 s); ten minutes between SIGTERM and SIGKILL is already a hang.
* :data:`MAX_NAME_LENGTH` = 100 characters for a name that becomes one path component
  (255 bytes is the usual file-system limit; the run folder adds its own parts).
* Seeds: ``0 <= seed < 2**63`` (vLLM's ``SamplingParams.seed`` feeds
  ``torch.Generator.manual_seed``, a signed 64-bit integer).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import stat
import string
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, StrictInt, TypeAdapter, ValidationError

__all__ = [
    "MAX_NAME_LENGTH", "MAX_SECONDS", "MAX_SHARDS", "MAX_SIMULATED_NIGHTS", "MAX_STOP_GRACE_SECONDS", "MAX_TOKENS",
    "MAX_SEED", "NAME_PATTERN",
    "BISECT_ID_MAX_LENGTH", "Alpha", "BisectId", "Count", "DeviceList", "DirPath", "DraftCount", "IndexTemplate",
    "Multiplier", "Name", "Nats", "NightCount", "OptionalPath", "OutputFile", "PositiveCount", "PositiveSeconds",
    "Probability", "RunId", "Seconds", "Seed", "Shard",
    "SeedOffset", "StopGraceSeconds", "Temperature", "TokenCount", "TokenId", "TokenOffset", "check_name_text",
    "ENVIRONMENT", "ParserChoice", "ShellArgs", "check_environment", "cli_type", "env_value", "is_finite_number",
    "value_error",
]

#: Most shards a list is split into (``--shard I/N``): more than any CI runs agents.
MAX_SHARDS = 4096
#: Most clean nights ``calibrate --simulate-nights`` simulates: at 10,000 nights a rate of 0
#: has the exact 95% interval [0, 0.00037], far below any false-alarm budget; more only costs
#: minutes.
MAX_SIMULATED_NIGHTS = 10_000
#: Longest context in tokens evalrun sends or plans (module docstring).
MAX_TOKENS = 2**20
#: Longest wait in seconds (module docstring).
MAX_SECONDS = 7 * 24 * 3600.0
#: Longest SIGTERM -> SIGKILL grace in seconds (module docstring).
MAX_STOP_GRACE_SECONDS = 600.0
#: Largest seed (exclusive bound is ``2**63``).
MAX_SEED = 2**63 - 1
#: The character set of a name that becomes a path component.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
#: Longest name accepted (characters; all ASCII, so also bytes).
MAX_NAME_LENGTH = 100
#: Longest ``--bisect-id``: its steps' run ids are ``<id>-<label>`` with a label of up to 60
#: characters (:func:`harness.cli.bisect._label`), and a run id is a name.
BISECT_ID_MAX_LENGTH = MAX_NAME_LENGTH - 61


def check_name_text(name: object, max_length: int = MAX_NAME_LENGTH) -> str:
    """``name`` as a safe single path component, or ValueError saying why not.

    Raises:
        ValueError: not a string, empty, longer than ``max_length``, containing ``..``, or
            a character outside :data:`NAME_PATTERN` (``/``, ``\\``, space, non-ASCII, ...).
    """
    why = None
    if not isinstance(name, str) or not name:
        why = "is empty" if name == "" else f"is {type(name).__name__}, not text"
    elif len(name) > max_length:
        why = f"is {len(name)} characters long (at most {max_length})"
    elif ".." in name:
        why = "contains '..'"
    elif not NAME_PATTERN.fullmatch(name):
        bad = sorted({ch for ch in name if not re.fullmatch(r"[A-Za-z0-9._+-]", ch)})
        why = ("contains " + ", ".join(repr(c) for c in bad)) if bad else "does not start with a letter or digit"
    if why:
        shown = name if not isinstance(name, str) or len(name) <= 120 else name[:120] + "..."
        raise ValueError(
            f"name {shown!r} {why}; names become folder and file names of the run, so they may hold only "
            f"letters, digits, '.', '_', '+', '-' (starting with a letter or digit, no '..', at most "
            f"{max_length} characters)")
    assert isinstance(name, str)
    return name


def _bisect_id(name: str) -> str:
    return check_name_text(name, BISECT_ID_MAX_LENGTH)


def _index_template(text: str) -> str:
    """A wheel-index URL template: ``{commit}`` its only field, at least once.

    Raises:
        ValueError: another ``{field}``, a format spec or conversion, unbalanced braces,
            or no ``{commit}``.
    """
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as e:
        raise ValueError(f"{text!r} is not a template ({e}); write e.g. https://wheels.vllm.ai/{{commit}}") from None
    fields = [(f, spec, conv) for _, f, spec, conv in parts if f is not None]
    unknown = sorted({f for f, _, _ in fields if f != "commit"})
    if unknown:
        raise ValueError(f"{text!r} has the field(s) {', '.join('{' + f + '}' for f in unknown)}; "
                         "the only field is {commit}")
    if any(spec or conv for _, spec, conv in fields):
        raise ValueError(f"{text!r}: write {{commit}} plainly (no format spec or conversion)")
    if not fields:
        raise ValueError(f"{text!r} has no {{commit}}")
    return text


#: One device id of ``--gpus``: an index (``0``), a UUID (``GPU-8f2c...``) or a MIG id
#: (``MIG-GPU-<uuid>/1/0``, as ``CUDA_VISIBLE_DEVICES`` takes them).
DEVICE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9:._/-]*")


def _device_list(text: str) -> str:
    t = text.strip()
    if t.isdigit():
        if int(t) > 2**16:
            raise ValueError(f"{t} devices is more than any host holds (at most {2**16})")
        return t
    ids = [x.strip() for x in t.split(",")]
    bad = [x for x in ids if not DEVICE_ID.fullmatch(x)]
    if bad:
        raise ValueError(f"{text!r}: {bad[0]!r} is not a device id (a count, or device ids joined by commas: "
                         "0,1,4)")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{text!r}: a device is listed twice")
    return t


def _shard(text: str) -> str:
    """``I/N`` with integers ``1 <= I <= N <= MAX_SHARDS``, returned as ``"I/N"`` (spaces and
    leading zeros dropped)."""
    i_s, sep, n_s = text.strip().partition("/")
    if not sep or not i_s.strip().isdigit() or not n_s.strip().isdigit():
        raise ValueError(f"{text!r}: expected I/N with integers, e.g. 2/4 (shard I of N, numbered from 1)")
    i, n = int(i_s), int(n_s)
    if not 1 <= i <= n:
        raise ValueError(f"{text!r}: need 1 <= I <= N (shards are numbered from 1)")
    if n > MAX_SHARDS:
        raise ValueError(f"{text!r}: at most {MAX_SHARDS} shards")
    return f"{i}/{n}"


def _path_text(p: Path) -> Path:
    text = str(p)
    if not text:
        raise ValueError("is empty")
    if "\x00" in text:
        raise ValueError("contains a NUL byte")
    return p


def _dir_path(p: Path) -> Path:
    _path_text(p)
    if p.exists() and not p.is_dir():
        raise ValueError(f"{p} is not a directory")
    return p


def _output_file(p: Path) -> Path:
    _path_text(p)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return p
    except OSError as e:
        raise ValueError(f"{p}: {e.strerror or e}") from None
    if stat.S_ISLNK(st.st_mode):
        raise ValueError(f"{p} is a symlink (to {os.readlink(p)!r}); evalrun never writes through one: "
                         "name the file itself")
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{p} exists and is not a regular file")
    return p


_Finite = {"allow_inf_nan": False}

#: Clean nights to simulate: ``0 <= n <= MAX_SIMULATED_NIGHTS``.
NightCount = Annotated[int, Field(ge=0, le=MAX_SIMULATED_NIGHTS)]
#: ``--shard I/N``: shard I of N, ``1 <= I <= N <= MAX_SHARDS`` (:func:`_shard`).
Shard = Annotated[str, AfterValidator(_shard)]
#: Seconds of a wait or timeout: finite, ``0 <= s <= MAX_SECONDS``.
Seconds = Annotated[float, Field(ge=0.0, le=MAX_SECONDS, **_Finite)]
#: Seconds of a wait that must be positive: finite, ``0 < s <= MAX_SECONDS``.
PositiveSeconds = Annotated[float, Field(gt=0.0, le=MAX_SECONDS, **_Finite)]
#: Seconds between SIGTERM and SIGKILL: finite, ``0 <= s <= MAX_STOP_GRACE_SECONDS``.
StopGraceSeconds = Annotated[float, Field(ge=0.0, le=MAX_STOP_GRACE_SECONDS, **_Finite)]
#: A fraction or probability: finite, ``0 <= p <= 1``.
Probability = Annotated[float, Field(ge=0.0, le=1.0, **_Finite)]
#: A significance level: finite, ``0 < alpha < 1``.
Alpha = Annotated[float, Field(gt=0.0, lt=1.0, **_Finite)]
#: A non-negative count, at most ``2**31 - 1``.
Count = Annotated[int, Field(ge=0, le=2**31 - 1)]
#: A count of at least one, at most ``2**31 - 1``.
PositiveCount = Annotated[int, Field(ge=1, le=2**31 - 1)]
#: A multiplier of a spread (``k`` sigmas): finite, ``0 < k <= 100``.
Multiplier = Annotated[float, Field(gt=0.0, le=100.0, **_Finite)]
#: Natural-log units (a log-probability gap or its standard deviation): finite, ``>= 0``, at most 1000.
Nats = Annotated[float, Field(ge=0.0, le=1000.0, **_Finite)]
#: A sampling temperature: finite, ``0 <= t <= 100`` (0: greedy).
Temperature = Annotated[float, Field(ge=0.0, le=100.0, **_Finite)]
#: A length in tokens: ``1 <= n <= MAX_TOKENS``.
TokenCount = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
#: An offset in tokens around an edge: ``|n| <= MAX_TOKENS``.
TokenOffset = Annotated[int, Field(ge=-MAX_TOKENS, le=MAX_TOKENS)]
#: Draft tokens per speculative step: ``1 <= k <= 64``.
DraftCount = Annotated[int, Field(ge=1, le=64)]
#: A token id as an engine returns it: a non-negative integer (never a bool).
TokenId = Annotated[StrictInt, Field(ge=0)]
#: A sampling seed: ``0 <= seed <= MAX_SEED``.
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
#: An offset added to seeds: ``|n| < 2**31``.
SeedOffset = Annotated[int, Field(ge=-(2**31) + 1, le=2**31 - 1)]
#: A name that becomes a path component (config, variant, task).
Name = Annotated[str, AfterValidator(check_name_text)]
#: A run id: a name (it becomes ``<results dir>/<run id>``).
RunId = Annotated[str, AfterValidator(check_name_text)]
#: A bisection id: a name short enough for its steps' run ids (:data:`BISECT_ID_MAX_LENGTH`).
BisectId = Annotated[str, AfterValidator(_bisect_id)]
#: A wheel-index URL template whose only field is ``{commit}``.
IndexTemplate = Annotated[str, AfterValidator(_index_template)]
#: ``--gpus``: a count of devices (the first N), or device ids joined by commas.
DeviceList = Annotated[str, AfterValidator(_device_list)]
#: A path given by the user: non-empty, no NUL byte.
OptionalPath = Annotated[Path, AfterValidator(_path_text)]
#: A folder: as :data:`OptionalPath`, and not an existing non-folder.
DirPath = Annotated[Path, AfterValidator(_dir_path)]
#: A file a command writes where the user names it (``--output``, ``--markdown``, ``--junit``,
#: ``--csv``): as :data:`OptionalPath`, and not an existing symlink, folder, pipe or device
#: (an existing regular file is replaced atomically).
OutputFile = Annotated[Path, AfterValidator(_output_file)]



def _shell_words(text: str) -> str:
    try:
        shlex.split(text)
    except ValueError as e:
        raise ValueError(f"cannot be split into words as a shell would ({e})") from None
    return text


def _lower(v: object) -> object:
    return v.strip().lower() if isinstance(v, str) else v


#: Arguments written as one shell-like string (split with :func:`shlex.split`).
ShellArgs = Annotated[str, AfterValidator(_shell_words)]
#: ``EVALRUN_SERVER_PARSER``: which vLLM argument parser plans server arguments.
ParserChoice = Annotated[Literal["installed", "snapshot"], BeforeValidator(_lower)]

#: Every environment variable evalrun reads that the user sets, and its type; checked
#: before any command does anything (:func:`check_environment`). ``EVALRUN_NUMERICS_NOISE``
#: is read by :func:`harness.faults.noise.parse_level` (its one home).
ENVIRONMENT: dict[str, object] = {
    "EVALRUN_STOP_GRACE_SECONDS": StopGraceSeconds,
    "EVALRUN_DATA_DIR": DirPath,
    "EVALRUN_CACHE_DIR": DirPath,
    "EVALRUN_BUILD_CACHE": DirPath,
    "EVALRUN_BUILD_PIP_ARGS": ShellArgs,
    "EVALRUN_SERVER_PARSER": ParserChoice,
    "EVALRUN_NUMERICS_NOISE_SEED": Seed,
}


def value_error(e: ValidationError) -> str:
    """The first error of ``e`` as one short sentence (pydantic's message, "Value error, "
    dropped)."""
    err = e.errors()[0]
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ")


def cli_type(tp: object, what: str = "") -> Callable[[str], object]:
    """An ``argparse`` ``type=`` callable that validates the option's text as ``tp``.

    argparse prefixes the option (``argument --alpha: ...``) and exits 2 before the
    command does anything.

    Args:
        tp: one of this module's types.
        what: what the value is, for the message (e.g. ``"seconds"``).

    Raises:
        argparse.ArgumentTypeError: the text is not a valid ``tp`` (its message says why).
    """
    adapter: TypeAdapter[object] = TypeAdapter(tp)  # type: ignore[arg-type]  # an Annotated type form

    def parse(text: str) -> object:
        try:
            return adapter.validate_python(text, strict=False)
        except ValidationError as e:
            msg = value_error(e)
            shown = "" if text[:40] in msg else f"{text if len(text) <= 80 else text[:80] + '...'!r}: "
            raise argparse.ArgumentTypeError(f"{shown}{msg}{f' ({what})' if what else ''}") from None

    parse.__name__ = what or getattr(tp, "__name__", "value")  # argparse says "invalid <name> value" otherwise
    return parse


def env_value(environ: Mapping[str, str], name: str, tp: object, default: object) -> object:
    """The environment variable ``name`` validated as ``tp``; ``default`` when unset or blank.

    Raises:
        ValueError: the value is not a valid ``tp``, naming the variable and its value.
    """
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        adapter: TypeAdapter[object] = TypeAdapter(tp)  # type: ignore[arg-type]  # an Annotated type form
        return adapter.validate_python(raw.strip(), strict=False)
    except ValidationError as e:
        raise ValueError(f"{name}={raw!r}: {value_error(e)}") from None


def check_environment(environ: Mapping[str, str]) -> list[str]:
    """Why each variable of :data:`ENVIRONMENT` set in ``environ`` is invalid (one line
    each, naming the variable and its value); empty when all are valid or unset."""
    from harness.faults.noise import NoiseSettingError, parse_level  # noqa: PLC0415 - its one home

    out = []
    for name, tp in ENVIRONMENT.items():
        try:
            env_value(environ, name, tp, None)
        except ValueError as e:
            out.append(str(e))
    try:
        parse_level(environ.get("EVALRUN_NUMERICS_NOISE"))
    except NoiseSettingError as e:
        out.append(str(e))
    return out


def is_finite_number(x: object) -> bool:
    """``x`` is an int or a finite float (not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
