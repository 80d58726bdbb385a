"""evalrun's vLLM plugin: faults injected into vLLM's own speculative-decoding path.

evalrun exists to catch two classes of bugs that only show up end to end
(design notes, ../shared/docs/DESIGN.md, summarised in README "Why"): the drafter fed the wrong token, and recurrent (Mamba / Gated
DeltaNet) state rolled back by the wrong number of tokens. To prove that the gates
catch them, a variant can ask for one of them with ``fault: <name>`` in its config;
the runner then sets ``EVALRUN_FAULT=<name>`` (:data:`FAULT_ENV`, same value as
``harness.config.plan.FAULT_ENV``) on that variant's server, and this plugin breaks the
engine the same way the real bug did, at run time, without touching vLLM's files.

How vLLM runs it: ``pyproject.toml`` declares the entry point
``[project.entry-points."vllm.general_plugins"] evalrun_faults =
"harness.faults.plugin:register"``. vLLM calls :func:`register` once per process (API
server, engine core, each worker) through ``vllm.plugins.load_general_plugins``; a
worker started by ``fork`` inherits the patches of its parent instead (vLLM then
skips plugin loading because its ``plugins_loaded`` flag is inherited too), which is
why the patches are applied eagerly in every process rather than only in the
worker. The patched code runs in the worker process that owns the model runner
(``vllm.v1.worker.cpu_worker.CPUWorker`` -> ``CPUModelRunner``, a subclass of
``GPUModelRunner`` that overrides none of the patched methods).

Without ``EVALRUN_FAULT`` (or with it empty) :func:`register` returns at once: it
patches nothing and imports nothing beyond the standard library. An unknown name
raises :class:`FaultConfigError`, naming the variable and the known faults; vLLM
logs and swallows errors raised by ``plugin.load()``, but not those raised by the
plugin function itself, so a misspelt fault stops the server at start-up instead of
running an unfaulted engine.

When a fault is active, every process logs ``evalrun fault <name> active in process
<pid>`` (logger ``vllm.evalrun.faults``, so it lands in the server log in vLLM's
format), and the first time the fault actually changes something in a process it
logs ``evalrun fault <name> fired in process <pid>: ...``. With
``EVALRUN_FAULT_DEBUG=1`` (:data:`DEBUG_ENV`) every application is logged with the
values before and after.

Faults (:data:`FAULTS`; see each ``_install_*`` docstring for the exact logic):

``draft-input``
    The MTP/EAGLE drafter receives the token *before* the last committed one instead
    of the last committed token. Mirrors design notes (../shared/docs/DESIGN.md) bug 1 (index off by one, drafter
    fed the wrong token). Greedy outputs unchanged, acceptance length down.
``draft-input-placeholder``
    The drafter receives token id 0 instead of the last committed token: the
    placeholder variant of bug 1 (-1 placeholder; id 0 is what it becomes once
    clamped into the vocabulary, -1 itself would crash the embedding). Same effect.
``state-rollback``
    After verification, the accepted-token count that the next step's Mamba / GDN
    metadata uses to pick the recurrent-state slot is off by one for every request
    that verified draft tokens. Mirrors design notes (../shared/docs/DESIGN.md) bug 2 (stale accepted counts, state
    rolled back by the wrong amount). Greedy outputs diverge from the reference,
    accuracy down.
``noop``
    Patches nothing; only logs the ``active`` line. Tests the plumbing (entry point,
    environment propagation to every process, log capture).

Public API: :data:`FAULT_ENV`, :data:`DEBUG_ENV`, :data:`FAULTS`, :class:`Fault`,
:class:`PatchTarget`, :class:`FaultConfigError`, :func:`known_faults`,
:func:`requested_fault`, :func:`register`, :func:`check_patch_targets`,
:func:`applied_patches`, :func:`unpatch_all`.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

#: Environment variable naming the fault (same value as ``harness.config.plan.FAULT_ENV``;
#: not imported from there so that vLLM's processes load only this module).
FAULT_ENV = "EVALRUN_FAULT"
#: Set to ``1`` to log every application of the fault with before/after values.
DEBUG_ENV = "EVALRUN_FAULT_DEBUG"
#: Marker attribute set on every wrapper this module installs.
_MARK = "__evalrun_fault__"

logger = logging.getLogger("vllm.evalrun.faults")


class FaultConfigError(ValueError):
    """``EVALRUN_FAULT`` names no known fault, or a patch target is missing in vLLM."""


@dataclass(frozen=True)
class PatchTarget:
    """One vLLM attribute a fault replaces.

    Attributes:
        module: dotted module path, e.g. ``vllm.v1.spec_decode.llm_base_proposer``.
        qualname: ``Class.method`` inside that module.
        params: the leading parameter names (after ``self``) the wrapper relies on, in
            order; a vLLM upgrade that renames or reorders them fails
            :func:`check_patch_targets` (and :func:`register`) loudly.
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

    def resolve(self) -> tuple[type, str, Callable[..., Any]]:
        """Import the module and return ``(class, attribute name, current function)``.

        Raises:
            FaultConfigError: the module, class or attribute does not exist.
        """
        cls_name, _, attr = self.qualname.rpartition(".")
        try:
            mod = importlib.import_module(self.module)
        except ImportError as e:
            raise FaultConfigError(f"patch target module {self.module} not importable: {e}") from e
        cls = getattr(mod, cls_name, None)
        if not isinstance(cls, type):
            raise FaultConfigError(f"patch target class {self.module}.{cls_name} not found")
        fn = cls.__dict__.get(attr)
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
        fn = inspect.unwrap(fn)
        names = [p for p in inspect.signature(fn).parameters][1:]  # drop self
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


@dataclass(frozen=True)
class Fault:
    """One injectable fault.

    Attributes:
        name: the value of ``EVALRUN_FAULT``.
        summary: one line for humans (``evalrun --dry-run``, error messages).
        mirrors: which real bug of DESIGN.md it reproduces.
        expected: the effect the gates should see.
        targets: what it patches (and, ``patched=False``, what it relies on).
        install: ``install(fault)`` applies the patches in this process.
    """

    name: str
    summary: str
    mirrors: str
    expected: str
    targets: tuple[PatchTarget, ...]
    install: Callable[["Fault"], None]


# ---------------------------------------------------------------------------
# patching machinery
# ---------------------------------------------------------------------------

#: (class, attribute, original) of every patch applied in this process, in order.
_APPLIED: list[tuple[type, str, Callable[..., Any]]] = []
#: Faults that already logged their first firing in this process.
_FIRED: set[str] = set()


def _debug() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip() not in ("", "0", "false", "no")


def _info(message: str, *args: Any) -> None:
    """Log at INFO through vLLM's logger, or print to stderr when nothing would show it.

    vLLM 0.32 configures its ``vllm`` logger from the parsed arguments, and the API
    server loads general plugins while it builds the argument parser, i.e. before
    that: an INFO record would be dropped there. Engine core and workers configure
    logging before loading plugins.
    """
    if logger.isEnabledFor(logging.INFO) and (
        logging.getLogger("vllm").handlers or logging.getLogger().handlers
    ):
        logger.info(message, *args)
    else:
        print(message % args, file=sys.stderr, flush=True)


def _should_report(fault: str) -> bool:
    """True for the first firing of ``fault`` in this process, and every one when debugging."""
    return _debug() or fault not in _FIRED


def _report(fault: str, message: str, *args: Any) -> None:
    """Log a firing of ``fault`` (call only when :func:`_should_report` is True)."""
    if _debug():
        _info("evalrun fault %s fired in process %d: " + message, fault, os.getpid(), *args)
    else:
        _FIRED.add(fault)
        _info(
            "evalrun fault %s fired in process %d (first time; set %s=1 to log every "
            "time): " + message,
            fault, os.getpid(), DEBUG_ENV, *args,
        )


def _patch(
    fault: Fault,
    target: PatchTarget,
    make: Callable[[Callable[..., Any]], Callable[..., Any]],
) -> None:
    """Replace ``target`` by ``make(original)``; idempotent per process.

    Raises:
        FaultConfigError: the target is missing or its signature changed.
    """
    problems = target.problems()
    if problems:
        raise FaultConfigError(
            f"{FAULT_ENV}={fault.name}: cannot patch the installed vLLM: " + "; ".join(problems)
        )
    cls, attr, original = target.resolve()
    if getattr(original, _MARK, None) == fault.name:
        return  # register() ran twice in this process (or the parent already patched)
    wrapper = functools.wraps(original)(make(original))
    setattr(wrapper, _MARK, fault.name)
    setattr(cls, attr, wrapper)
    _APPLIED.append((cls, attr, original))


def applied_patches() -> list[str]:
    """``module.Class.attr`` of every patch applied in this process (for tests, logs)."""
    return [f"{cls.__module__}.{cls.__qualname__}.{attr}" for cls, attr, _ in _APPLIED]


def unpatch_all() -> None:
    """Restore every patched attribute (tests; a server never needs this)."""
    while _APPLIED:
        cls, attr, original = _APPLIED.pop()
        setattr(cls, attr, original)
    _FIRED.clear()


# ---------------------------------------------------------------------------
# draft-input
# ---------------------------------------------------------------------------

_PROPOSE = PatchTarget(
    module="vllm.v1.spec_decode.llm_base_proposer",
    qualname="SpecDecodeBaseProposer.propose",
    params=(
        "num_speculative_tokens",
        "target_token_ids",
        "target_positions",
        "target_hidden_states",
        "next_token_ids",
        "token_indices_to_sample",
        "common_attn_metadata",
    ),
)


def _wrong_next_token_ids(bound: inspect.BoundArguments, mode: str):
    """The replacement for ``next_token_ids`` in ``SpecDecodeBaseProposer.propose``.

    ``propose`` builds the drafter's input ids by shifting ``target_token_ids`` left
    by one and writing ``next_token_ids[i]`` (the last committed token of request
    ``i``: the bonus token, or the last accepted draft) at
    ``token_indices_to_sample[i]`` (``set_inputs_first_pass``), the position whose
    target hidden state is paired with it. The token *at* that position in
    ``target_token_ids`` is the committed token just before it. ``prev`` returns
    exactly that token, ``placeholder`` returns id 0.
    """
    import torch

    args = bound.arguments
    next_ids: torch.Tensor = args["next_token_ids"]
    if mode == "placeholder":
        return torch.zeros_like(next_ids)
    target_ids: torch.Tensor = args["target_token_ids"]
    idx = args["token_indices_to_sample"]
    if idx is None:
        # Unpadded path: the last token of each (rejection-trimmed) query.
        idx = args["common_attn_metadata"].query_start_loc[1:] - 1
        rejected = args.get("num_rejected_tokens_gpu")
        if rejected is not None:
            idx = idx - rejected
    n = min(int(next_ids.shape[0]), int(idx.shape[0]))
    idx = idx[:n].long().clamp(0, max(int(target_ids.shape[0]) - 1, 0))
    wrong = next_ids.clone()
    wrong[:n] = target_ids[idx].to(next_ids.dtype)
    return wrong


def draft_input_wrapper(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``make(original) -> wrapper`` for ``SpecDecodeBaseProposer.propose`` (fault ``name``).

    The wrapper binds the call to the original's signature, replaces
    ``next_token_ids`` by :func:`_wrong_next_token_ids` and calls the original.
    """
    mode = "placeholder" if name.endswith("placeholder") else "prev"

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(original)

        def propose(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(*args, **kwargs)
            before = bound.arguments["next_token_ids"]
            after = _wrong_next_token_ids(bound, mode)
            bound.arguments["next_token_ids"] = after
            if _should_report(name):
                _report(
                    name,
                    "drafter input (last committed token per request) %s -> %s",
                    before[:8].tolist(), after[:8].tolist(),
                )
            return original(*bound.args, **bound.kwargs)

        return propose

    return make


def _install_draft_input(fault: Fault) -> None:
    """Feed the drafter a wrong "last committed token" (design notes (../shared/docs/DESIGN.md) bug 1).

    Patches ``vllm.v1.spec_decode.llm_base_proposer.SpecDecodeBaseProposer.propose``
    (inherited unchanged by ``EagleProposer``, which the model runner uses for
    ``method: mtp``, ``eagle`` and ``eagle3``; also ``DraftModelProposer``). The
    wrapper replaces the ``next_token_ids`` argument before the original runs:

    * ``draft-input``: ``next_token_ids[i] := target_token_ids[token_indices_to_sample[i]]``,
      the committed token before the last one (when ``token_indices_to_sample`` is
      None, the unpadded path, the index is ``query_start_loc[1:] - 1``, minus
      ``num_rejected_tokens_gpu`` when given). The drafter then embeds token ``t-1``
      where the target's hidden state at ``t-1`` expects token ``t``.
    * ``draft-input-placeholder``: ``next_token_ids[i] := 0``.

    Only the drafter's own input buffer sees the wrong token: the runner keeps its
    ``next_token_ids`` (``_copy_valid_sampled_token_count`` stores them for async
    scheduling before ``propose`` runs), the target model's inputs, the KV cache of
    the target and the rejection sampler are untouched. So the verifier still decides
    every token: greedy outputs are identical to the unfaulted run, while the draft
    tokens (and so the acceptance length) are worse. The CPU model runner takes the
    padded path (``disable_padded_drafter_batch`` is False by default):
    ``prepare_next_token_ids_padded`` -> ``prepare_inputs_padded`` -> ``propose``
    with ``token_indices_to_sample`` set, before ``_bookkeeping_sync``.
    """
    _patch(fault, _PROPOSE, draft_input_wrapper(fault.name))


# ---------------------------------------------------------------------------
# state-rollback
# ---------------------------------------------------------------------------

_UPDATE_AFTER_EXECUTE = PatchTarget(
    module="vllm.v1.worker.gpu_model_runner",
    qualname="GPUModelRunner._update_states_after_model_execute",
    params=("output_token_ids", "scheduler_output"),
    reads=(
        "speculative_config",
        "model_config.is_hybrid",
        "input_batch.req_ids",
        "input_batch.num_accepted_tokens_cpu_tensor",
        "num_accepted_tokens",
        "num_accepted_tokens_event",
        "use_async_scheduling",
        "cache_config.mamba_cache_mode",
    ),
)
#: Consumes the perturbed counts (not patched); checked so that a rename fails the tests.
_GDN_BUILD = PatchTarget(
    module="vllm.v1.attention.backends.gdn_attn",
    qualname="GDNAttentionMetadataBuilder.build",
    params=("common_prefix_len", "common_attn_metadata", "num_accepted_tokens",
            "num_decode_draft_tokens_cpu"),
    patched=False,
)


def off_by_one_counts(counts: list[int], num_drafts: list[int]) -> list[int]:
    """The perturbed accepted counts: ``k -> k+1`` if ``k <= d`` else ``k-1``; d = 0 keeps k.

    ``k`` is the number of valid tokens of the step (accepted drafts + the bonus
    token, 1..d+1) and ``d`` the number of draft tokens the request verified. The
    result stays in 1..d+1, so the recurrent-state slot it selects (``k-1``) was
    written by this very step: the corruption is deterministic (no stale memory).
    """
    out = []
    for k, d in zip(counts, num_drafts):
        if d <= 0 or k <= 0:
            out.append(k)
        else:
            out.append(k + 1 if k <= d else k - 1)
    return out


def state_rollback_wrapper(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``make(original) -> wrapper`` for ``GPUModelRunner._update_states_after_model_execute``.

    The wrapper runs the original, then overwrites the accepted counts it recorded
    with :func:`off_by_one_counts` (see :func:`_install_state_rollback`).
    """

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        warned: list[bool] = []

        def _update_states_after_model_execute(
            self: Any, output_token_ids: Any, scheduler_output: Any, *a: Any, **kw: Any
        ) -> Any:
            result = original(self, output_token_ids, scheduler_output, *a, **kw)
            if not self.speculative_config or not self.model_config.is_hybrid:
                return result
            if (
                self.use_async_scheduling
                and self.cache_config.mamba_cache_mode != "align"
                and not warned
            ):
                warned.append(True)
                logger.warning(
                    "evalrun fault %s: async scheduling without mamba align mode reads "
                    "accepted counts on the device; this fault perturbs the host copy "
                    "and has no effect in this configuration",
                    name,
                )
            num_reqs = int(output_token_ids.size(0))
            if num_reqs == 0:
                return result
            counts = (output_token_ids != -1).sum(dim=1).tolist()
            spec = scheduler_output.scheduled_spec_decode_tokens or {}
            req_ids = self.input_batch.req_ids[:num_reqs]
            drafts = [len(spec.get(r, ())) for r in req_ids]
            wrong = off_by_one_counts(counts, drafts)
            if wrong == counts:
                return result
            event = getattr(self, "num_accepted_tokens_event", None)
            if event is not None:
                event.synchronize()  # the original's non-blocking D2H copy must land first
            import torch

            host = self.input_batch.num_accepted_tokens_cpu_tensor
            host[:num_reqs] = torch.tensor(wrong, dtype=host.dtype)
            dev = self.num_accepted_tokens.gpu
            dev[:num_reqs] = host[:num_reqs].to(dev.device, non_blocking=False)
            if _should_report(name):
                _report(
                    name,
                    "accepted counts per request %s -> %s (drafts %s)",
                    counts[:8], wrong[:8], drafts[:8],
                )
            return result

        return _update_states_after_model_execute

    return make


def _install_state_rollback(fault: Fault) -> None:
    """Give the next step a stale accepted-token count (design notes (../shared/docs/DESIGN.md) bug 2).

    Patches ``vllm.v1.worker.gpu_model_runner.GPUModelRunner._update_states_after_model_execute``
    (``CPUModelRunner`` inherits it). After verification, the original computes
    ``num_accepted_tokens = (output_token_ids != -1).sum(dim=1)`` per request and
    copies it to ``input_batch.num_accepted_tokens_cpu_tensor``. The next step's
    ``_prepare_inputs`` copies that host tensor into ``runner.num_accepted_tokens``,
    which ``_build_attention_metadata`` passes as ``num_accepted_tokens`` to the
    Mamba2 / GDN / short-conv metadata builders; the GDN kernel
    (``ops/cpu/gdn_attention.py: _spec_forward`` on CPU) resumes the recurrent state
    from slot ``num_accepted_tokens - 1`` and shifts the conv rolling buffer by the
    same offset.

    The wrapper runs the original, waits for its copy (``num_accepted_tokens_event``),
    then overwrites the host counts (and the device buffer) of every request that
    verified ``d >= 1`` draft tokens in this step with :func:`off_by_one_counts`:
    ``k -> k+1`` when a draft was rejected (the state keeps one rejected draft
    token), ``k -> k-1`` when all drafts were accepted (the state loses the last
    accepted token). Requests without drafts (prefill) keep their count. Token ids,
    the scheduler's ``num_computed_tokens`` and the acceptance metrics stay true; only
    the recurrent state is wrong, so later logits and greedy outputs diverge from
    the reference.

    Effective where the runner reads host counts (``needs_cpu_accepted_counts`` in
    ``_prepare_inputs``): synchronous scheduling (always on CPU, the platform forces
    it) or ``mamba_cache_mode == "align"``. With async scheduling and no align mode
    (GPU default for MTP) the next step recomputes the counts on device and this
    fault does nothing; it logs a warning then.
    """

    _patch(fault, _UPDATE_AFTER_EXECUTE, state_rollback_wrapper(fault.name))


def _install_noop(fault: Fault) -> None:
    """Patch nothing: the ``active`` log line alone proves the plugin ran."""


# ---------------------------------------------------------------------------
# registry and entry point
# ---------------------------------------------------------------------------

FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault(
            name="draft-input",
            summary="the MTP/EAGLE drafter is fed the committed token before the last one",
            mirrors="design notes (../shared/docs/DESIGN.md) bug 1: drafter fed the wrong token (wrong index into the "
            "sequence when looking up the last committed token)",
            expected="greedy outputs identical to the unfaulted run; acceptance length down",
            targets=(_PROPOSE,),
            install=_install_draft_input,
        ),
        Fault(
            name="draft-input-placeholder",
            summary="the MTP/EAGLE drafter is fed token id 0 instead of the last committed token",
            mirrors="design notes (../shared/docs/DESIGN.md) bug 1: drafter fed the -1 placeholder of an optimistic draft "
            "slot (as id 0, the clamped placeholder)",
            expected="greedy outputs identical to the unfaulted run; acceptance length down",
            targets=(_PROPOSE,),
            install=_install_draft_input,
        ),
        Fault(
            name="state-rollback",
            summary="after verification, accepted-token counts used for the Mamba/GDN "
            "state slot are off by one for every request that verified drafts",
            mirrors="design notes (../shared/docs/DESIGN.md) bug 2: stale accepted-token counts roll recurrent state "
            "back by the wrong amount",
            expected="greedy outputs diverge from the reference; accuracy down",
            targets=(_UPDATE_AFTER_EXECUTE, _GDN_BUILD),
            install=_install_state_rollback,
        ),
        Fault(
            name="noop",
            summary="patches nothing; logs that the plugin is active (plumbing test)",
            mirrors="none",
            expected="identical to the unfaulted run",
            targets=(),
            install=_install_noop,
        ),
    )
}


def known_faults() -> list[str]:
    """Names accepted in ``EVALRUN_FAULT`` (and in a variant's ``fault:``), sorted."""
    return sorted(FAULTS)


def requested_fault(environ: dict[str, str] | None = None) -> Fault | None:
    """The fault named by ``EVALRUN_FAULT``, or None when unset or empty.

    Raises:
        FaultConfigError: the name is not a known fault.
    """
    env = os.environ if environ is None else environ
    name = env.get(FAULT_ENV, "").strip()
    if not name:
        return None
    fault = FAULTS.get(name)
    if fault is None:
        raise FaultConfigError(
            f"{FAULT_ENV}={name!r} is not a known evalrun fault; known faults: "
            + ", ".join(known_faults())
            + f" (unset {FAULT_ENV} to run without a fault)"
        )
    return fault


def check_patch_targets(name: str | None = None) -> list[str]:
    """Problems of the patch targets in the installed vLLM (empty list = all fine).

    Args:
        name: one fault, or None for all of them.
    """
    faults = [FAULTS[name]] if name is not None else list(FAULTS.values())
    out: list[str] = []
    for f in faults:
        for t in f.targets:
            out += [f"{f.name}: {p}" for p in t.problems()]
    return out


def register() -> None:
    """vLLM ``general_plugins`` entry point: apply the fault named by ``EVALRUN_FAULT``.

    Inert when the variable is unset or empty. Idempotent within a process.

    Raises:
        FaultConfigError: unknown fault name, or a patch target is missing in the
            installed vLLM.
    """
    fault = requested_fault()
    if fault is None:
        return
    fault.install(fault)
    _info("evalrun fault %s active in process %d", fault.name, os.getpid())
