"""What a fault patches: one vLLM attribute (:class:`PatchTarget`), found and checked in
the installed vLLM; :class:`FaultConfigError` when it is not there or a fault is unknown."""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass


class FaultConfigError(ValueError):
    """``EVALRUN_FAULT`` names no known fault, or a patch target is missing in vLLM."""


@dataclass(frozen=True)
class PatchTarget:
    """One vLLM attribute a fault replaces.

    Attributes:
        module: dotted module path, e.g. ``vllm.v1.spec_decode.llm_base_proposer``.
        qualname: ``Class.method`` inside that module, or a module-level function.
        params: the leading parameter names (after ``self``) the wrapper relies on, in
            order; a vLLM upgrade that renames or reorders them fails
            :func:`harness.faults.registry.check_patch_targets` (and ``register()``) loudly.
        reads: instance attribute paths the wrapper reads at run time; each must
            appear as ``self.<path>`` in the module's source (a cheap check that
            catches renames; the engine run checks the values).
        patched: False for a function the fault relies on but does not replace (it
            consumes the perturbed value); checked all the same.
    """

    module: str
    qualname: str
    params: tuple[str, ...]
    reads: tuple[str, ...] = ()
    patched: bool = True

    def resolve(self) -> tuple[object, str, object]:
        """Import the module and return ``(owner, attribute name, current function)``.

        ``owner`` is the class for ``Class.method`` and the module itself for a
        module-level function (``qualname`` without a dot); the function is the
        ``classmethod`` / ``staticmethod`` object itself for those (callers unwrap
        ``__func__``).

        Raises:
            FaultConfigError: the module, class or attribute does not exist.
        """
        cls_name, _, attr = self.qualname.rpartition(".")
        try:
            mod = importlib.import_module(self.module)
        except ImportError as e:
            raise FaultConfigError(f"patch target module {self.module} not importable: {e}") from e
        if not cls_name:
            # a module-level function (patched where the caller looks it up)
            fn = mod.__dict__.get(attr)
            if fn is None or not callable(fn):
                raise FaultConfigError(f"patch target {self.module}.{attr} not found")
            return mod, attr, fn
        cls = getattr(mod, cls_name, None)
        if not isinstance(cls, type):
            raise FaultConfigError(f"patch target class {self.module}.{cls_name} not found")
        fn = cls.__dict__.get(attr)
        if isinstance(fn, (classmethod, staticmethod)):
            return cls, attr, fn  # callers unwrap ``__func__``
        if fn is None or not callable(fn):
            raise FaultConfigError(
                f"patch target {self.module}.{self.qualname} not found "
                f"(not defined on {cls_name} itself)"
            )
        return cls, attr, fn

    def problems(self) -> list[str]:
        """What is wrong with this target in the installed vLLM (empty = fine)."""
        try:
            _, _, fn = self.resolve()
        except FaultConfigError as e:
            return [str(e)]
        out = []
        inner = fn.__func__ if isinstance(fn, (classmethod, staticmethod)) else fn
        assert callable(inner)  # resolve() returns callables only
        names = list(inspect.signature(inspect.unwrap(inner)).parameters)
        if "." in self.qualname:
            names = names[1:]  # drop self / cls
        if tuple(names[: len(self.params)]) != self.params:
            out.append(
                f"{self.module}.{self.qualname}: expected leading parameters "
                f"{list(self.params)}, found {names}"
            )
        if self.reads:
            source = inspect.getsource(importlib.import_module(self.module))
            for path in self.reads:
                if f"self.{path}" not in source:
                    out.append(f"{self.module}: attribute self.{path} not found in the source")
        return out
