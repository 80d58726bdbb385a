"""The base of every strict config type, and the names of raw and outside JSON values.

:class:`StrictModel` is what every config type of :mod:`harness.config.schema` (and
:mod:`harness.config.shape_spec`) derives from: frozen, unknown keys refused, no
conversion of a value of the wrong type.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["JsonValue", "RawValue", "StrictModel", "is_int"]

#: A value as YAML or JSON from outside gives it, before validation (a mapping, a list,
#: a string, a number, a boolean or None): the input of a field's ``BeforeValidator``.
RawValue = object
#: A JSON value whose shape is owned outside evalrun (a speculative-config value passed to
#: vLLM unchanged, a setting the engine reports, what ``json.loads`` returns for a file,
#: an engine's answer or lm-eval's results): any of JSON's types, checked where read.
JsonValue = Any


def is_int(x: RawValue) -> bool:
    """``x`` is an integer and not a boolean (YAML's ``true`` is a Python ``bool``, an ``int``)."""
    return isinstance(x, int) and not isinstance(x, bool)


class StrictModel(BaseModel):
    """Frozen, unknown keys refused, and strict: a value of the wrong type is refused, never
    converted (``accuracy_threshold: "0.9"`` or ``true``, ``num_questions: 5.5``); an integer
    is accepted where a float is asked. No float is infinite or NaN (YAML's ``.inf``,
    ``.nan``): every number of a config is finite, whatever its field's range."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
