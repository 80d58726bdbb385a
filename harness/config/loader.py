"""Configs: one YAML file read safely, validated into a frozen, typed
:class:`~harness.config.schema.ModelConfig` (:func:`load_config`).

Two forms are read (see docs/configuration.md):

* **vLLM's GSM8K form**, unchanged (``tests/evals/gsm8k/configs/*.yaml`` in vLLM):
  ``model_name``, ``accuracy_threshold``, ``server_args``, ...
  (:mod:`harness.config.vllm_form`);
* **the native form**, recognised by a top-level ``variants`` key, with explicit
  variants, tasks, comparisons and gates (:mod:`harness.config.native_form`).

Every error is a :class:`~harness.config.schema.ConfigError` that names the file, the key
path, the line (from the YAML node marks) and, for unknown keys, the nearest valid key.
"""

from __future__ import annotations

import difflib
import hashlib
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from harness.config.checks import check_acceptance_floor, check_config, check_shapes
from harness.config.expected import check_expected_failures
from harness.config.native_form import NativeConfig, from_native
from harness.config.reader import MAX_RECORD_BYTES, read_bytes
from harness.config.schema import ConfigError, ModelConfig, RawValue
from harness.config.vllm_form import VllmGsm8kConfig, from_vllm, vllm_form_warnings
from harness.config.yaml_load import KeyPath, YamlCostError, key_lines, load_yaml
from harness.config.yaml_pitfalls import check_yaml

_M = TypeVar("_M", bound=BaseModel)


def _valid_keys(model: type[BaseModel], loc: tuple[str, ...]) -> list[str]:
    """The field names valid at ``loc`` (the parent of an offending key)."""
    cur: object = model
    for part in loc:
        if not (isinstance(cur, type) and issubclass(cur, BaseModel)):
            return []
        field = cur.model_fields.get(part)
        if field is None:
            return []
        ann = field.annotation
        cur = _inner_model(ann)
    if isinstance(cur, type) and issubclass(cur, BaseModel):
        return list(cur.model_fields)
    return []


def _inner_model(ann: object) -> type[BaseModel] | None:
    """The BaseModel inside an annotation like ``dict[str, X]``, ``list[X]``, ``X | None``."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in getattr(ann, "__args__", ()) or ():
        m = _inner_model(arg)
        if m is not None:
            return m
    return None


def _format_validation_error(
    e: ValidationError, model: type[BaseModel], path: Path, lines: dict[KeyPath, int]
) -> str:
    msgs = []
    for err in e.errors():
        loc = tuple(err["loc"])
        # dict[str, Model] entries put the dict key in loc; keep it for the path.
        dotted = ".".join(str(p) for p in loc) or "(top level)"
        line = None
        for n in range(len(loc), 0, -1):
            if loc[:n] in lines:
                line = lines[loc[:n]]
                break
        where = f"{path}:{line}" if line else f"{path}"
        if err["type"] == "extra_forbidden":
            key = str(loc[-1])
            parent = [p for p in loc[:-1] if not isinstance(p, int)]
            valid = _valid_keys(model, tuple(_strip_dict_keys(model, parent)))
            near = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
            hint = f"; did you mean '{near[0]}'?" if near else ""
            msgs.append(
                f"{where}: unknown key '{dotted}'{hint} (valid keys here: {', '.join(valid)})"
            )
        elif err["type"] == "missing":
            msgs.append(f"{where}: missing required key '{dotted}'")
        else:
            msgs.append(f"{where}: key '{dotted}': {err['msg']} (got {err.get('input')!r})")
    return "\n".join(msgs)


def _strip_dict_keys(model: type[BaseModel], parts: list[str]) -> list[str]:
    """Drop user-chosen dict keys (variant / task names) from a location path."""
    out = []
    cur: object = model
    skip_next = False
    for p in parts:
        if skip_next:
            skip_next = False
            continue
        out.append(p)
        if isinstance(cur, type) and issubclass(cur, BaseModel) and p in cur.model_fields:
            ann = cur.model_fields[p].annotation
            origin = getattr(ann, "__origin__", None)
            if origin is dict:
                skip_next = True
            cur = _inner_model(ann)
    return out


def _validate(model: type[_M], data: dict[str, RawValue], path: Path, lines: dict[KeyPath, int]) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_validation_error(e, model, path, lines)) from None


def load_config(path: str | Path) -> ModelConfig:
    """Load and validate one config YAML (either form).

    Args:
        path: the YAML file.

    Returns:
        The validated :class:`ModelConfig`.

    Raises:
        ConfigError: the file is missing or unreadable, is not a YAML mapping, has an
            unknown key, a wrong type or a missing required key, names a variant that
            does not exist in a comparison, or has unbalanced quotes in server args.
    """
    path = Path(path)
    try:
        raw_bytes = read_bytes(path, MAX_RECORD_BYTES, "config")
    except OSError as e:  # the one reader: missing, a named pipe, a folder, too large (named)
        raise ConfigError(str(e)) from None
    text = raw_bytes.decode("utf-8", errors="replace")
    try:
        loaded = load_yaml(text, str(path))  # aliases expanded beyond a bound are refused here
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    except YamlCostError as e:
        raise ConfigError(str(e)) from None
    node, data = loaded.node, loaded.data
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a YAML mapping of keys, got {type(data).__name__}")
    check_yaml(node, path)
    lines = key_lines(node) if node is not None else {}
    sha = hashlib.sha256(raw_bytes).hexdigest()
    if "variants" in data:
        native = _validate(NativeConfig, data, path, lines)
        cfg = from_native(native, path, sha, lines)
    else:
        kept, warns = vllm_form_warnings(data, path, lines)
        try:
            vcfg = _validate(VllmGsm8kConfig, kept, path, lines)
        except ConfigError as e:
            # a required key missing next to an unknown key close to it: name the typo
            near = [w.message for w in warns if w.nearest and w.nearest not in kept]
            raise ConfigError("\n".join([str(e), *near])) from None
        cfg = from_vllm(vcfg, path, sha, lines, warns)
    check_acceptance_floor(cfg, lines)

    check_config(cfg, lines)
    check_shapes(cfg, lines)
    check_expected_failures(cfg)
    return cfg
