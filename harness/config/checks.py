"""Checks of a loaded config that keep it from writing outside its run folder or from
gating on a limit that can never fail. Called by
:func:`harness.config.loader.load_config` on every config, either form.

Names that become paths (``<run>/samples/<config>/<variant>/<task>.jsonl``,
``<run>/logs/<config>/<variant>.log``): the config name (the file stem, or the native
form's ``name``), every variant name and every task name must match
:data:`NAME_PATTERN`, letters, digits, ``.``, ``_``, ``+`` and ``-``, starting with a
letter or digit, at most :data:`MAX_NAME_LENGTH` characters, and must not contain
``..``. So no separator, no ``..`` and no name a file system refuses (255 bytes is the
usual limit of one path component; the run folder adds its own components).

Limits on the fraction scale that make a gate unable to fail (a value meant on the
percent scale, ``tolerance: 1`` for one point, is the usual cause):

* accuracy floor ``accuracy_threshold - tolerance <= 0`` for a threshold above 0: every
  accuracy passes (a threshold of 0 itself, which vLLM's configs may carry, asks for no
  floor and is left as written);
* ``max_accuracy_drop`` / ``baseline_max_accuracy_drop >= 1``: an accuracy cannot drop
  by more than 1;
* ``max_error_rate >= 1``, ``max_truncation_rate >= 1``: a share cannot exceed 1;
* ``min_output_match <= 0``: every output match passes;
* ``max_acceptance_length_drop >= k`` (``num_speculative_tokens`` of the variants it
  compares): mean acceptance length lies in [1, 1 + k], so it cannot drop by k or more.

Also a ``min_acceptance_length`` above ``1 + k``, which no mean acceptance length
reaches (:func:`check_acceptance_floor`).

Each is a :class:`~harness.config.schema.ConfigError` naming the file, the line when
known, and the key.
"""

from __future__ import annotations

import shlex

from harness.config.schema import ConfigError, ModelConfig, VariantSpec
from harness.config.types import MAX_NAME_LENGTH, NAME_PATTERN, check_name_text
from harness.config.yaml_load import KeyPath

__all__ = ["NAME_PATTERN", "MAX_NAME_LENGTH", "check_name", "check_config", "check_acceptance_floor", "check_run_id",
           "check_shapes"]

def check_name(name: str, where: str, key: str) -> None:
    """Refuse a name that cannot be a single safe path component (the rule of
    :data:`harness.config.types.Name`).

    Args:
        name: the config, variant or task name.
        where: the file (and line) for the message.
        key: the key the name comes from (``name``, ``variants.<v>``, ...).

    Raises:
        ConfigError: the name is empty, too long, has a character outside
            :data:`NAME_PATTERN` (a ``/``, ``\\``, space, ...) or contains ``..``.
    """
    try:
        check_name_text(name)
    except ValueError as e:
        raise ConfigError(f"{where}: key '{key}': {e}") from None


def _where(cfg: ModelConfig, lines: dict[KeyPath, int], keypath: tuple) -> str:
    line = lines.get(keypath)
    return f"{cfg.path}:{line}" if line else str(cfg.path)


def _find_key(lines: dict[KeyPath, int], field: str, *, under: tuple = (), default: tuple | None = None) -> tuple:
    """The key path (as written in the file) of ``field``: ``under + (field,)`` when the
    file has it, else any path ending in ``field`` (the first in file order), else
    ``default`` or ``(field,)``."""
    if under + (field,) in lines:
        return under + (field,)
    hits = sorted((ln, kp) for kp, ln in lines.items() if kp and kp[-1] == field)
    if hits:
        return hits[0][1]
    return default or (field,)


def _gate_key(cfg: ModelConfig, lines: dict[KeyPath, int], task: str, field: str) -> tuple:
    over = cfg.tasks[task].gates
    if over is not None and field in over.model_fields_set:
        return ("tasks", task, "gates", field)
    return _find_key(lines, field, under=("gates",) if cfg.form == "native" else ())


def _refuse(cfg: ModelConfig, lines: dict[KeyPath, int], keypath: tuple, text: str) -> None:
    key = ".".join(str(k) for k in keypath)
    raise ConfigError(f"{_where(cfg, lines, keypath)}: key '{key}': {text}; such a gate can never fail "
                      "(limits are fractions: 0.01 is one percentage point)")


def _refuse_shape(cfg: ModelConfig, lines: dict[KeyPath, int], keypath: tuple, text: str) -> None:
    key = ".".join(str(k) for k in keypath) or "tasks"
    raise ConfigError(f"{_where(cfg, lines, keypath)}: key '{key}': {text}")


def check_config(cfg: ModelConfig, lines: dict[KeyPath, int] | None = None) -> None:
    """Every check of this module on one loaded config (module docstring).

    Args:
        cfg: the validated config.
        lines: key path -> line in the file, for the message.

    Raises:
        ConfigError: the first unsafe name or unfailable limit, naming file and key.
    """
    lines = lines or {}
    name_key = ("name",) if ("name",) in lines else None
    check_name(cfg.name, _where(cfg, lines, name_key) if name_key else str(cfg.path),
               "name" if name_key else "name (the file name without .yaml)")
    for v in cfg.variants:
        check_name(v, _where(cfg, lines, ("variants", v)), f"variants.{v}")
    for t in cfg.tasks:
        check_name(t, _where(cfg, lines, ("tasks", t)), f"tasks.{t}")
    for t in cfg.tasks:
        g = cfg.gates_for(t)
        if g.accuracy_threshold is not None and g.accuracy_threshold > 0 and g.accuracy_threshold - g.tolerance <= 0:
            _refuse(cfg, lines, _gate_key(cfg, lines, t, "tolerance"),
                    f"accuracy floor accuracy_threshold - tolerance = {g.accuracy_threshold} - {g.tolerance} = "
                    f"{g.accuracy_threshold - g.tolerance:.4g} <= 0 (task {t})")
        limits: list[tuple[str, float | None, str]] = [
            ("max_error_rate", g.max_error_rate, ">= 1"),
            ("max_truncation_rate", g.max_truncation_rate, ">= 1"),
            ("baseline_max_accuracy_drop", g.baseline_max_accuracy_drop, ">= 1"),
        ]
        for field, val, how in limits:
            if val is not None and val >= 1:
                _refuse(cfg, lines, _gate_key(cfg, lines, t, field), f"{field} {val} {how} (task {t})")
    for i, comp in enumerate(cfg.comparisons):
        under = ("comparisons", i) if cfg.form == "native" else ()
        if comp.max_accuracy_drop is not None and comp.max_accuracy_drop >= 1:
            _refuse(cfg, lines, _find_key(lines, "max_accuracy_drop", under=under),
                    f"max_accuracy_drop {comp.max_accuracy_drop} >= 1 ({comp.baseline} -> {comp.candidate})")
        if comp.min_output_match is not None and comp.min_output_match <= 0:
            _refuse(cfg, lines, _find_key(lines, "min_output_match", under=under),
                    f"min_output_match {comp.min_output_match} <= 0 ({comp.baseline} -> {comp.candidate})")
        drop = comp.max_acceptance_length_drop
        specs = [cfg.variants[n].speculative_config for n in (comp.baseline, comp.candidate) if n in cfg.variants]
        ks = [s.num_speculative_tokens for s in specs if s is not None and s.num_speculative_tokens]
        if drop is not None and ks and drop >= max(ks):
            _refuse(cfg, lines, _find_key(lines, "max_acceptance_length_drop", under=under),
                    f"max_acceptance_length_drop {drop} >= num_speculative_tokens {max(ks)} "
                    f"({comp.baseline} -> {comp.candidate}: mean acceptance length lies in [1, 1 + {max(ks)}])")


#: The server setting that makes the KV cache small for a ``cache_pressure`` shape (vLLM's
#: ``CacheConfig.num_gpu_blocks_override``, applied by ``may_override_num_blocks`` in
#: ``vllm/v1/core/kv_cache_utils.py`` on every platform, the CPU included; the CPU's
#: ``VLLM_CPU_KVCACHE_SPACE`` is whole GiB, thousands of blocks for a tiny model).
PRESSURE_SETTING = "num_gpu_blocks_override"


def _server_value(cfg: ModelConfig, v: VariantSpec, dest: str) -> str | None:
    """The value a variant's server command gives ``dest`` (the last flag wins, as in
    vLLM's parser; any spelling it accepts), or None when not set."""
    from harness.config.vllm_args import hits_of  # noqa: PLC0415 - the parser table loads on first use

    found = [h.value for h in hits_of([*cfg.server_args, *shlex.split(v.server_args or "")], dest)]
    return found[-1] if found else None


def _server_count(cfg: ModelConfig, v: VariantSpec, dest: str) -> int | str | None:
    """:func:`_server_value` of a count flag as the number vLLM reads (``1024``, ``01024``
    and ``1K`` alike: vLLM's ``human_readable_int``, which also reads plain integers), the
    text as given when it is no number (vLLM's parser refuses it before launch), or None."""
    from harness.config.vllm_args import human_readable_int  # noqa: PLC0415 - beside hits_of's first use

    raw = _server_value(cfg, v, dest)
    if raw is None:
        return None
    try:
        return human_readable_int(raw)
    except ValueError:
        return raw


def check_shapes(cfg: ModelConfig, lines: dict[KeyPath, int] | None = None) -> None:
    """Refuse a traffic shape that cannot be what it says.

    ``prompt_edges``: a speculative variant whose ``num_speculative_tokens`` is not among
    the shape's ``speculative_tokens``, or a ``chunk_size`` other than every variant's
    ``--max-num-batched-tokens`` (any spelling vLLM's parser accepts; the shape's chunk is
    a server setting applied to every compared variant alike). ``cache_pressure``: a
    config whose variants do not all set ``--num-gpu-blocks-override``
    (:data:`PRESSURE_SETTING`) to the same value (the small KV cache is a server setting
    applied to every variant alike), or a ``max_concurrency`` below ``prompts`` (they must
    all be in flight at once). A ``concurrency_sweep`` passes its own concurrency per pass
    and is not bounded by ``max_concurrency`` (:mod:`harness.tasks.shape_load`).

    Raises:
        ConfigError: naming the file, the task's line, the variant and both values.
    """
    lines = lines or {}
    for tname, t in cfg.tasks.items():
        if t.shape is None:
            continue
        key = ("tasks", tname, "shape") if ("tasks", tname, "shape") in lines else ()
        if t.shape.kind == "cache_pressure":
            _check_pressure(cfg, lines, tname, key)
        if t.shape.kind != "prompt_edges":
            continue
        for vname, v in cfg.variants.items():
            k = v.speculative_config.num_speculative_tokens if v.speculative_config else None
            if k is not None and k not in t.shape.speculative_tokens:
                _refuse_shape(cfg, lines, key, f"task {tname}: variant {vname} speculates with "
                              f"num_speculative_tokens {k}, not among the shape's speculative_tokens "
                              f"{list(t.shape.speculative_tokens)}")
            if t.shape.chunk_size is None:
                continue
            found = _server_count(cfg, v, "max_num_batched_tokens")
            if found != t.shape.chunk_size:
                _refuse_shape(cfg, lines, key, f"task {tname}: shape chunk_size {t.shape.chunk_size} but variant "
                              f"{vname}'s server sets --max-num-batched-tokens {found or '(not set)'}")


def _check_pressure(cfg: ModelConfig, lines: dict[KeyPath, int], tname: str, key: tuple) -> None:
    """:func:`check_shapes` for one ``cache_pressure`` task."""
    shape = cfg.tasks[tname].shape
    assert shape is not None
    if cfg.max_concurrency < shape.prompts:
        _refuse_shape(cfg, lines, key, f"task {tname}: cache_pressure sends {shape.prompts} prompts all at once but "
                f"max_concurrency is {cfg.max_concurrency}")
    values = {vname: _server_count(cfg, v, PRESSURE_SETTING) for vname, v in cfg.variants.items()}
    unset = sorted(n for n, x in values.items() if x is None)
    if unset:
        _refuse_shape(cfg, lines, key, f"task {tname}: cache_pressure needs a small KV cache, but variant(s) "
                f"{', '.join(unset)} set no --num-gpu-blocks-override")
    if len(set(values.values())) > 1:
        shown = ", ".join(f"{n} {x}" for n, x in values.items())
        _refuse_shape(cfg, lines, key, f"task {tname}: cache_pressure's --num-gpu-blocks-override differs between "
                f"variants ({shown}); the small KV cache must be the same for every compared variant")


def check_acceptance_floor(cfg: ModelConfig, lines: dict[KeyPath, int] | None = None) -> None:
    """Refuse a ``min_acceptance_length`` no speculative variant can reach.

    Mean acceptance length = 1 + accepted tokens / drafts, and a draft has at most
    ``num_speculative_tokens`` (k) tokens, so it is at most ``1 + k`` (vLLM's
    spec-decode metrics, ``vllm/v1/spec_decode/metrics.py``). A floor above
    that fails on every run, whatever the build.

    Raises:
        ConfigError: naming the file, the line of the floor, the floor and ``1 + k``.
    """
    lines = lines or {}
    for vname, v in cfg.variants.items():
        k = v.speculative_config.num_speculative_tokens if v.speculative_config else None
        if k is None:
            continue
        for tname in cfg.tasks:
            floor = cfg.gates_for(tname).min_acceptance_length
            if floor is None or floor <= 1 + k:
                continue
            over = cfg.tasks[tname].gates
            keypath = (("tasks", tname, "gates", "min_acceptance_length")
                       if over is not None and "min_acceptance_length" in over.model_fields_set
                       else ("gates", "min_acceptance_length") if cfg.form == "native"
                       else ("min_acceptance_length",))
            line = lines.get(keypath)
            where = f"{cfg.path}:{line}" if line else f"{cfg.path}"
            raise ConfigError(
                f"{where}: key '{'.'.join(keypath)}': min_acceptance_length {floor} is above "
                f"1 + num_speculative_tokens = {1 + k} (variant {vname}, task {tname}); a mean "
                f"acceptance length can never exceed 1 + {k}, so this gate could never pass"
            )


def check_run_id(run_id: str | None) -> str | None:
    """Why ``--run-id`` cannot be a run folder's name (same rule as :func:`check_name`:
    it becomes ``<results dir>/<run id>``), or None when it can (or is not given)."""
    if run_id is None:
        return None
    try:
        check_name(run_id, "--run-id", "--run-id")
    except ConfigError as e:
        return str(e).split(": ", 1)[1]
    return None
