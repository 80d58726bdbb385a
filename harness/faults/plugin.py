"""evalrun's vLLM plugin: faults injected into vLLM's own speculative-decoding path.

evalrun exists to catch two classes of bugs that only show up end to end
(docs/FAULTS.md, "The two bugs"): the drafter fed the wrong token, and recurrent (Mamba / Gated
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
    of the last committed token. Mirrors docs/FAULTS.md bug 1 (index off by one, drafter
    fed the wrong token). Greedy outputs unchanged, acceptance length down.
``draft-input-placeholder``
    The drafter receives token id 0 instead of the last committed token: the
    placeholder variant of bug 1 (-1 placeholder; id 0 is what it becomes once
    clamped into the vocabulary, -1 itself would crash the embedding). Same effect.
``state-rollback``
    After verification, the accepted-token count that the next step's Mamba / GDN
    metadata uses to pick the recurrent-state slot is off by one for every request
    that verified draft tokens. Mirrors docs/FAULTS.md bug 2 (stale accepted counts, state
    rolled back by the wrong amount). Greedy outputs diverge from the reference,
    accuracy down.
``async-placeholder-token``
    The seed's bug 1 in vLLM's own async path: the drafter's backup token is looked
    up at the optimistic (placeholder-inflated) sequence length
    (``SpecDecodeBaseProposer.prepare_next_token_ids_padded`` before vLLM's fix "Fix
    backup token index in async spec decode"), and the placeholder reaches the drafter.
``async-stale-accepted``
    The seed's bug 2 in vLLM's own async path: the accepted counts used for the
    recurrent-state update are taken by row index instead of following the batch
    reorder (``update_num_computed_tokens_for_batch_change``).
``noop``
    Patches nothing; only logs the ``active`` line. Tests the plumbing (entry point,
    environment propagation to every process, log capture).

Beyond faults (same entry point, each behind its own evalrun variable):
``EVALRUN_CPU_ASYNC_SCHEDULING=1`` (:data:`CPU_ASYNC_ENV`) keeps a requested async
scheduling on the CPU platform (:func:`_install_cpu_async`);
``EVALRUN_PLUGIN_REPORT_DIR`` (:data:`REPORT_ENV`) makes every process write its
counters (fault executions and changes, batch condense / reorder events, the model
runner in use) to ``plugin-<pid>.json`` there (:func:`flush_report`,
:func:`read_reports`, :func:`exercised`). A fault refuses to run on a model runner
its patches do not reach (:func:`check_model_runner`).

Public API: :data:`FAULT_ENV`, :data:`DEBUG_ENV`, :data:`CPU_ASYNC_ENV`,
:data:`REPORT_ENV`, :data:`FAULTS`, :class:`Fault`, :class:`PatchTarget`,
:class:`FaultConfigError`, :func:`known_faults`, :func:`requested_fault`,
:func:`register`, :func:`check_patch_targets`, :func:`applied_patches`,
:func:`unpatch_all`, :func:`count`, :func:`counts`, :func:`flush_report`,
:func:`read_reports`, :func:`exercised`, :func:`check_model_runner`.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import inspect
import json
import logging
import os
import sys
import threading
import time
import types
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

#: Environment variable naming the fault (same value as ``harness.config.plan.FAULT_ENV``;
#: not imported from there so that vLLM's processes load only this module).
FAULT_ENV = "EVALRUN_FAULT"
#: Set to ``1`` to log every application of the fault with before/after values.
DEBUG_ENV = "EVALRUN_FAULT_DEBUG"
#: Set to ``1`` by evalrun for a variant that asks for async scheduling: on the CPU
#: platform the plugin then keeps ``scheduler_config.async_scheduling = True`` (which
#: ``CpuPlatform.check_and_update_config`` would reset to False) and installs no-op
#: stand-ins for CUDA events and streams (:func:`_install_cpu_async`).
CPU_ASYNC_ENV = "EVALRUN_CPU_ASYNC_SCHEDULING"
#: A folder: every process the plugin is active in writes ``plugin-<pid>.json`` there
#: with its counters (:func:`read_reports`). Setting it alone activates the observers
#: (which model runner runs, batch condense / reorder events), nothing else.
REPORT_ENV = "EVALRUN_PLUGIN_REPORT_DIR"
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

    def resolve(self) -> tuple[Any, str, Any]:
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
        fn = inspect.unwrap(fn.__func__ if isinstance(fn, (classmethod, staticmethod)) else fn)
        names = [p for p in inspect.signature(fn).parameters]
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


@dataclass(frozen=True)
class Fault:
    """One injectable fault.

    Attributes:
        name: the value of ``EVALRUN_FAULT``.
        summary: one line for humans (``evalrun --dry-run``, error messages).
        mirrors: which real bug of docs/FAULTS.md ("The two bugs") it reproduces.
        expected: the effect the gates should see.
        targets: what it patches (and, ``patched=False``, what it relies on).
        install: ``install(fault)`` applies the patches in this process.
        runner: the model runner class whose code path the patches sit on
            (``module.Class``); the worker refuses to start when another runner
            is in use (:func:`check_model_runner`). None: no runner needed (``noop``).
        scheduling: ``"async"`` when the patched code belongs to vLLM's async
            scheduling path (the self-check runs it with async scheduling and
            contrasts it with synchronous scheduling), else ``"any"``.
    """

    name: str
    summary: str
    mirrors: str
    expected: str
    targets: tuple[PatchTarget, ...]
    install: Callable[["Fault"], None]
    runner: str | None = "vllm.v1.worker.gpu_model_runner.GPUModelRunner"
    scheduling: str = "any"


# ---------------------------------------------------------------------------
# patching machinery
# ---------------------------------------------------------------------------

#: (class, attribute, original) of every patch applied in this process, in order.
_APPLIED: list[tuple[Any, str, Any]] = []
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
    _patch_as(fault.name, target, make, what=f"{FAULT_ENV}={fault.name}")


def _patch_as(
    label: str,
    target: PatchTarget,
    make: Callable[[Callable[..., Any]], Callable[..., Any]],
    what: str,
) -> None:
    """Replace ``target`` by ``make(original)``, marked ``label``; idempotent per process.

    Raises:
        FaultConfigError: the target is missing or its signature changed (``what``
            names the setting that asked for the patch).
    """
    problems = target.problems()
    if problems:
        raise FaultConfigError(f"{what}: cannot patch the installed vLLM: " + "; ".join(problems))
    cls, attr, original = target.resolve()
    if getattr(original, _MARK, None) == label:
        return  # register() ran twice in this process (or the parent already patched)
    wrapper = functools.wraps(original)(make(original))
    setattr(wrapper, _MARK, label)
    setattr(cls, attr, wrapper)
    _APPLIED.append((cls, attr, original))


def _owner_name(owner: Any) -> str:
    if isinstance(owner, types.ModuleType):
        return owner.__name__
    return f"{owner.__module__}.{owner.__qualname__}"


def applied_patches() -> list[str]:
    """``module.Class.attr`` (or ``module.function``) of every patch applied in this
    process (for tests, logs and the plugin report)."""
    return [f"{_owner_name(owner)}.{attr}" for owner, attr, _ in _APPLIED]


def unpatch_all() -> None:
    """Restore every patched attribute (tests; a server never needs this)."""
    while _APPLIED:
        cls, attr, original = _APPLIED.pop()
        setattr(cls, attr, original)
    _restore_torch()
    _FIRED.clear()
    _COUNTS.clear()
    _STATE.clear()
    global _RUNNER
    _RUNNER = None


# ---------------------------------------------------------------------------
# counters and the per-process report file
# ---------------------------------------------------------------------------

#: Counters of this process: ``<fault>.executions`` (the patched code ran),
#: ``<fault>.changed`` (it changed a value the engine then used), ``batch.*``
#: (condense / reorder events), ``cpu_async.kept``.
_COUNTS: Counter = Counter()
#: Facts of this process for the report (fault, model runner, ...).
_STATE: dict[str, Any] = {}
#: The V1 model runner of this process (a weak reference), for faults that need its state.
_RUNNER: Any = None
_FLUSH_LOCK = threading.Lock()
FLUSH_INTERVAL_S = 0.5


def count(key: str, n: int = 1) -> None:
    """Add ``n`` to counter ``key`` of this process (written to the report file)."""
    if n:
        if _STATE.get("flusher") not in (None, os.getpid()):
            _start_flusher()  # a forked child: its own file, its own flusher thread
        _COUNTS[key] += int(n)
        _STATE["dirty"] = True


def counts() -> dict[str, int]:
    """A copy of this process's counters."""
    return dict(_COUNTS)


def _report_path() -> str | None:
    folder = os.environ.get(REPORT_ENV, "").strip()
    return os.path.join(folder, f"plugin-{os.getpid()}.json") if folder else None


def flush_report() -> str | None:
    """Write this process's counters to ``$EVALRUN_PLUGIN_REPORT_DIR/plugin-<pid>.json``.

    Atomic (temporary file + rename). Returns the path, or None without the variable.
    Called every :data:`FLUSH_INTERVAL_S` seconds by a daemon thread while counters
    change, and at interpreter exit.
    """
    path = _report_path()
    if path is None:
        return None
    with _FLUSH_LOCK:
        _STATE["dirty"] = False
        doc = {
            "pid": os.getpid(),
            "argv0": os.path.basename(sys.argv[0]) if sys.argv else "",
            "fault": _STATE.get("fault"),
            "cpu_async": bool(_STATE.get("cpu_async")),
            "model_runner": _STATE.get("model_runner"),
            "patched": applied_patches(),
            "counts": dict(_COUNTS),
            "written_at": time.time(),
        }
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:  # the atomic writer's steps (this module imports no evalrun)
            json.dump(doc, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    return path


def _start_flusher() -> None:
    if _report_path() is None or _STATE.get("flusher") == os.getpid():
        return
    if _STATE.get("flusher") is not None:  # forked from a reporting parent: start afresh
        _COUNTS.clear()
    _STATE["flusher"] = os.getpid()
    flush_report()

    def loop() -> None:
        while True:
            time.sleep(FLUSH_INTERVAL_S)
            if _STATE.get("dirty"):
                try:
                    flush_report()
                except OSError:
                    pass

    threading.Thread(target=loop, name="evalrun-plugin-report", daemon=True).start()

    atexit.register(lambda: _STATE.get("dirty") and flush_report())


def read_reports(folder: str | os.PathLike) -> dict[str, Any]:
    """Merge the ``plugin-<pid>.json`` files of one server (one variant) into one report.

    Args:
        folder: the variant's ``$EVALRUN_PLUGIN_REPORT_DIR``.

    Returns:
        ``{"processes": n, "faults": [...], "cpu_async": bool, "model_runners": [...],
        "patched": [...], "counts": {key: sum over processes}}``; ``processes`` is 0
        when the folder is missing or empty (the plugin never loaded: is evalrun
        installed in the server's environment?). Unreadable files are listed under
        ``"errors"``.
    """
    out: dict[str, Any] = {"processes": 0, "faults": [], "cpu_async": False, "model_runners": [],
                           "patched": [], "counts": {}, "errors": []}
    total: Counter = Counter()
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith("plugin-") and n.endswith(".json"))
    except OSError:
        return out
    for n in names:
        try:
            with open(os.path.join(folder, n), encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            out["errors"].append(f"{n}: {e}")
            continue
        out["processes"] += 1
        if doc.get("fault") and doc["fault"] not in out["faults"]:
            out["faults"].append(doc["fault"])
        out["cpu_async"] = out["cpu_async"] or bool(doc.get("cpu_async"))
        if doc.get("model_runner") and doc["model_runner"] not in out["model_runners"]:
            out["model_runners"].append(doc["model_runner"])
        for p in doc.get("patched", []):
            if p not in out["patched"]:
                out["patched"].append(p)
        total.update({k: int(v) for k, v in (doc.get("counts") or {}).items()})
    out["counts"] = dict(sorted(total.items()))
    return out


def exercised(report: dict[str, Any], fault: str) -> tuple[bool, str]:
    """Whether ``fault``'s patched code ran and changed something, from :func:`read_reports`.

    Returns:
        ``(True, "")`` when ``<fault>.executions > 0`` and ``<fault>.changed > 0``,
        else ``(False, reason)`` naming what was (not) seen. ``noop`` patches
        nothing: it counts as exercised when a process reported it active.
    """
    c = report.get("counts") or {}
    if report.get("processes", 0) == 0:
        return False, "no plugin report: the plugin did not load in the server (is evalrun installed there?)"
    if fault == "noop":
        return (fault in report.get("faults", []), "" if fault in report.get("faults", []) else "noop not active")
    ex, ch = int(c.get(f"{fault}.executions", 0)), int(c.get(f"{fault}.changed", 0))
    if ex == 0:
        return False, f"fault not exercised: its patched code never ran ({fault}.executions = 0)"
    if ch == 0:
        return False, (f"fault not exercised: its patched code ran {ex} times but never changed a value "
                       f"({fault}.changed = 0)")
    return True, ""


# ---------------------------------------------------------------------------
# observers: which model runner runs, batch condense / reorder events
# ---------------------------------------------------------------------------

_WORKER_INIT = PatchTarget(
    module="vllm.v1.worker.worker_base",
    qualname="WorkerWrapperBase.init_device",
    params=(),
    reads=("worker",),
)
_CONDENSE = PatchTarget(
    module="vllm.v1.worker.gpu_input_batch",
    qualname="InputBatch.condense",
    params=(),
    reads=("_req_ids", "spec_token_ids", "num_reqs"),
)
_SWAP = PatchTarget(
    module="vllm.v1.worker.gpu_input_batch",
    qualname="InputBatch.swap_states",
    params=("i1", "i2"),
    reads=("spec_token_ids",),
)


def _class_path(obj: Any) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def check_model_runner(runner: Any, fault: Fault | None) -> str:
    """Record which model runner this worker uses; refuse a fault whose target is not it.

    Args:
        runner: the worker's ``model_runner`` (any object).
        fault: the active fault, or None.

    Returns:
        ``module.Class`` of the runner, plus the V1 class it derives from when it is
        a subclass (e.g. ``vllm.v1.worker.cpu_model_runner.CPUModelRunner (a
        vllm.v1.worker.gpu_model_runner.GPUModelRunner)``).

    Raises:
        FaultConfigError: ``fault.runner`` names a class ``runner`` is not an
            instance of (for example vLLM's V2 runner, ``vllm.v1.worker.gpu.model_runner``,
            which CUDA builds use by default from vLLM 0.33 on): the patches would
            never run. The message names both and how to select the V1 runner.
    """
    name = _class_path(runner)
    if fault is None or fault.runner is None:
        return name
    mod, _, cls_name = fault.runner.rpartition(".")
    target = getattr(importlib.import_module(mod), cls_name)
    if not isinstance(runner, target):
        raise FaultConfigError(
            f"{FAULT_ENV}={fault.name}: the fault patches the code path of {fault.runner} "
            f"(vLLM's V1 model runner), but this worker runs {name}, which does not use it; "
            f"the fault would never execute. Run the server with VLLM_USE_V2_MODEL_RUNNER=0 "
            f"to select the V1 runner, or run without the fault."
        )
    return name if type(runner) is target else f"{name} (a {fault.runner})"


def _worker_init_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    def init_device(self: Any, *a: Any, **kw: Any) -> Any:
        result = original(self, *a, **kw)
        runner = getattr(getattr(self, "worker", None), "model_runner", None)
        if runner is not None:
            fault = FAULTS.get(_STATE.get("fault") or "")
            _STATE["model_runner"] = check_model_runner(runner, fault)
            global _RUNNER
            _RUNNER = weakref.ref(runner)
            _info("evalrun plugin: model runner in process %d is %s%s", os.getpid(), _STATE["model_runner"],
                  f"; fault {fault.name} patches {', '.join(applied_patches())}" if fault else "")
            flush_report()
        return result

    return init_device


def current_runner() -> Any:
    """The model runner of this worker process (None before it exists or elsewhere)."""
    return _RUNNER() if _RUNNER is not None else None


def _condense_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    def condense(self: Any, *a: Any, **kw: Any) -> Any:
        before = {r: i for i, r in enumerate(self._req_ids) if r is not None}
        result = original(self, *a, **kw)
        count("batch.condense_calls")
        moved = with_drafts = 0
        for i, r in enumerate(self._req_ids[: self.num_reqs]):
            if r is not None and before.get(r, i) != i:
                moved += 1
                with_drafts += bool(self.spec_token_ids[i])
        count("batch.rows_moved_by_condense", moved)
        count("batch.rows_moved_with_drafts_in_flight", with_drafts)
        return result

    return condense


def _swap_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    def swap_states(self: Any, i1: int, i2: int, *a: Any, **kw: Any) -> Any:
        drafts = bool(self.spec_token_ids[i1]) or bool(self.spec_token_ids[i2])
        result = original(self, i1, i2, *a, **kw)
        count("batch.reorder_swaps")
        count("batch.reorder_swaps_with_drafts_in_flight", drafts)
        return result

    return swap_states


def _install_observers() -> None:
    """Count batch condense / reorder events and record the model runner (every process).

    Patches (wrappers that call the original unchanged and count):

    * ``vllm.v1.worker.worker_base.WorkerWrapperBase.init_device``: after the worker
      built its model runner, :func:`check_model_runner` records its class and
      refuses an active fault whose target runner is not in use.
    * ``vllm.v1.worker.gpu_input_batch.InputBatch.condense`` (called by
      ``GPUModelRunner._update_states`` after finished requests leave the batch):
      rows that moved to another index, and how many of them had draft tokens
      scheduled (``spec_token_ids`` non-empty: drafts in flight).
    * ``InputBatch.swap_states`` (called by
      ``vllm.v1.attention.backends.utils.reorder_batch_to_split_decodes_and_prefills``
      from ``GPUModelRunner._may_reorder_batch``, which puts decodes before prefills
      for the GDN / Mamba backends): swaps, and those involving a row with drafts.
    """
    for target, make in ((_WORKER_INIT, _worker_init_wrapper), (_CONDENSE, _condense_wrapper),
                         (_SWAP, _swap_wrapper)):
        try:
            _patch_as("observe", target, make, what=REPORT_ENV)
        except FaultConfigError as e:
            # observers only count: a vLLM that renamed their target still runs, unobserved
            # (a fault needs the runner check: register() refuses it without one)
            count("observer_missing")
            logger.warning("evalrun plugin: observer not installed: %s", e)


# ---------------------------------------------------------------------------
# async scheduling on the CPU platform
# ---------------------------------------------------------------------------

_CPU_CHECK = PatchTarget(
    module="vllm.platforms.cpu",
    qualname="CpuPlatform.check_and_update_config",
    params=("vllm_config",),
    reads=(),
)


class _NoOpEvent:
    """Stand-in for ``torch.cuda.Event`` / ``torch.Event`` on a CPU-only host: CPU
    work is synchronous, so recording and waiting have nothing to do."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record(self, *args: Any, **kwargs: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait(self, *args: Any, **kwargs: Any) -> None:
        pass

    def query(self) -> bool:
        return True


class _NoOpStream:
    """Stand-in for ``torch.cuda.Stream`` (and what ``torch.cuda.current_stream``
    returns) on a CPU-only host."""

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        import torch

        self.device = torch.device("cpu")

    def wait_stream(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_event(self, *args: Any, **kwargs: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def record_event(self, event: Any = None) -> Any:
        return event if event is not None else _NoOpEvent()

    def query(self) -> bool:
        return True


_TORCH_SAVED: dict[str, Any] = {}


def _install_torch_standins() -> None:
    """Replace ``torch.cuda.Event``, ``torch.Event``, ``torch.cuda.Stream``,
    ``torch.cuda.current_stream`` and ``torch.cuda.stream`` by no-op stand-ins, on a
    host without CUDA only (``torch.cuda.is_available()`` False). vLLM's
    ``GPUModelRunner`` creates events and side streams for its non-blocking
    device-to-host copies when ``use_async_scheduling`` is True
    (``__init__``: ``async_output_copy_stream``, ``prepare_inputs_event``,
    ``valid_sampled_token_count_event``; ``AsyncGPUModelRunnerOutput``;
    ``_copy_valid_sampled_token_count``); on the CPU those copies are synchronous.
    ``cpu_model_runner._torch_cuda_wrapper`` does the same for ``torch.Event`` and
    ``torch.cuda.Stream`` but only while the runner is constructed."""
    import torch

    if torch.cuda.is_available() or _TORCH_SAVED:
        return
    _TORCH_SAVED.update(
        event=torch.Event, cuda_event=torch.cuda.Event, stream=torch.cuda.Stream,
        current_stream=torch.cuda.current_stream, stream_ctx=torch.cuda.stream,
    )
    # replacing torch's classes and functions on a CPU-only host is the point (type: ignore)
    torch.Event = _NoOpEvent  # type: ignore[misc,assignment]
    torch.cuda.Event = _NoOpEvent  # type: ignore[misc,assignment]
    torch.cuda.Stream = _NoOpStream  # type: ignore[misc,assignment]
    torch.cuda.current_stream = lambda *_a, **_k: _NoOpStream()  # type: ignore[assignment]
    torch.cuda.stream = lambda *_a, **_k: contextlib.nullcontext()  # type: ignore[assignment]


def _restore_torch() -> None:
    if not _TORCH_SAVED:
        return
    import torch

    # putting torch's own classes back (type: ignore: assigning to a class name)
    torch.Event = _TORCH_SAVED["event"]  # type: ignore[misc]
    torch.cuda.Event = _TORCH_SAVED["cuda_event"]  # type: ignore[misc]
    torch.cuda.Stream = _TORCH_SAVED["stream"]  # type: ignore[misc]
    torch.cuda.current_stream = _TORCH_SAVED["current_stream"]
    torch.cuda.stream = _TORCH_SAVED["stream_ctx"]
    _TORCH_SAVED.clear()


def keep_requested_async(asked: Any, vllm_config: Any) -> bool:
    """After ``CpuPlatform.check_and_update_config``: restore ``async_scheduling = True``
    when it was requested (``asked is True``) and the platform reset it.

    Returns:
        True when the value was restored (counted as ``cpu_async.kept``).
    """
    sched = vllm_config.scheduler_config
    if asked is True and sched.async_scheduling is not True:
        sched.async_scheduling = True
        count("cpu_async.kept")
        _info(
            "evalrun plugin: kept the requested async scheduling on the CPU platform "
            "(CpuPlatform.check_and_update_config had set scheduler_config.async_scheduling "
            "= False) in process %d", os.getpid(),
        )
        return True
    return False


def _install_cpu_async() -> None:
    """Let a variant that asks for ``--async-scheduling`` run with it on the CPU platform.

    ``vllm/platforms/cpu.py``, ``CpuPlatform.check_and_update_config``, ends its
    scheduler settings with ``scheduler_config.async_scheduling = False`` ("async
    scheduling is not required on CPU"), which ``VllmConfig.__post_init__`` calls
    after resolving the requested value. The wrapper remembers the requested value,
    runs the original and restores it (:func:`keep_requested_async`); only a request
    of exactly True is kept, so the engine default and ``--no-async-scheduling``
    are unchanged. Then :func:`_install_torch_standins`. The engine reports the
    effective value in ``/server_info`` as usual.
    """
    import torch

    if torch.cuda.is_available():
        return  # a CUDA host: vLLM honours --async-scheduling itself; nothing to keep
    problems = _CPU_CHECK.problems()
    if problems:
        raise FaultConfigError(f"{CPU_ASYNC_ENV}=1: cannot patch the installed vLLM: " + "; ".join(problems))
    mod = importlib.import_module(_CPU_CHECK.module)
    cls = mod.CpuPlatform
    original = cls.__dict__["check_and_update_config"]
    if getattr(original.__func__, _MARK, None) == "cpu-async":
        return
    func = original.__func__

    @functools.wraps(func)
    def check_and_update_config(klass: Any, vllm_config: Any) -> Any:
        asked = vllm_config.scheduler_config.async_scheduling
        result = func(klass, vllm_config)
        keep_requested_async(asked, vllm_config)
        return result

    setattr(check_and_update_config, _MARK, "cpu-async")
    cls.check_and_update_config = classmethod(check_and_update_config)
    _APPLIED.append((cls, "check_and_update_config", original))
    _install_torch_standins()


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
            count(f"{name}.executions")
            count(f"{name}.changed", int((after != before).sum()))
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
    """Feed the drafter a wrong "last committed token" (docs/FAULTS.md bug 1).

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


def prompt_edge_rows(runner: Any, req_ids: list[str]) -> list[bool]:
    """Which rows the ``spec-prompt-edge`` fault perturbs: requests whose prompt holds
    exactly ``num_speculative_tokens + 1`` tokens (``runner.requests[id].num_prompt_tokens``,
    vLLM's ``CachedRequestState``)."""
    edge = int(runner.speculative_config.num_speculative_tokens) + 1
    states = runner.requests
    return [r in states and int(states[r].num_prompt_tokens) == edge for r in req_ids]


def state_rollback_wrapper(
    name: str, rows: Callable[[Any, list[str]], list[bool]] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``make(original) -> wrapper`` for ``GPUModelRunner._update_states_after_model_execute``.

    The wrapper runs the original, then overwrites the accepted counts it recorded
    with :func:`off_by_one_counts` (see :func:`_install_state_rollback`); with ``rows``
    (``rows(runner, req_ids) -> mask``) only the rows it selects.
    """

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        warned: list[bool] = []

        def _update_states_after_model_execute(
            self: Any, output_token_ids: Any, scheduler_output: Any, *a: Any, **kw: Any
        ) -> Any:
            result = original(self, output_token_ids, scheduler_output, *a, **kw)
            if not self.speculative_config or not self.model_config.is_hybrid:
                return result
            count(f"{name}.executions")
            if self.use_async_scheduling and self.cache_config.mamba_cache_mode != "align":
                # the next step recomputes the counts on the device: nothing to perturb
                count(f"{name}.ineffective_async")
                if not warned:
                    warned.append(True)
                    logger.warning(
                        "evalrun fault %s: async scheduling without mamba align mode reads "
                        "accepted counts on the device; this fault has no effect in this "
                        "configuration (use async-stale-accepted)",
                        name,
                    )
                return result
            num_reqs = int(output_token_ids.size(0))
            if num_reqs == 0:
                return result
            counts = (output_token_ids != -1).sum(dim=1).tolist()
            spec = scheduler_output.scheduled_spec_decode_tokens or {}
            req_ids = self.input_batch.req_ids[:num_reqs]
            drafts = [len(spec.get(r, ())) for r in req_ids]
            wrong = off_by_one_counts(counts, drafts)
            if rows is not None:
                wrong = [w if keep else k for w, k, keep in zip(wrong, counts, rows(self, list(req_ids)))]
            if wrong == counts:
                return result
            count(f"{name}.changed", sum(w != k for w, k in zip(wrong, counts)))
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
    """Give the next step a stale accepted-token count (docs/FAULTS.md bug 2).

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


def _install_spec_prompt_edge(fault: Fault) -> None:
    """The ``state-rollback`` off-by-one, only for requests whose prompt holds exactly
    ``num_speculative_tokens + 1`` tokens (:func:`prompt_edge_rows`; docs/FAULTS.md,
    "prompt-length edge"): the shape of the public reports of garbage output at that
    one prompt length with MTP on hybrids.

    Patches ``GPUModelRunner._update_states_after_model_execute`` exactly as
    :func:`_install_state_rollback` does, with the rows restricted to those requests
    (``runner.requests[req_id].num_prompt_tokens``); every other request keeps its true
    count, so a task whose prompts are all longer (GSM8K, the synthetic task) never
    triggers it (``spec-prompt-edge.changed`` stays 0: "not exercised")."""
    _patch(fault, _UPDATE_AFTER_EXECUTE, state_rollback_wrapper(fault.name, prompt_edge_rows))


def _install_noop(fault: Fault) -> None:
    """Patch nothing: the ``active`` log line alone proves the plugin ran."""


# ---------------------------------------------------------------------------
# async-placeholder-token (the seed's bug 1 in vLLM's own async path)
# ---------------------------------------------------------------------------

_PREPARE_PADDED = PatchTarget(
    module="vllm.v1.spec_decode.llm_base_proposer",
    qualname="SpecDecodeBaseProposer.prepare_next_token_ids_padded",
    params=("sampled_token_ids", "requests", "gpu_input_batch", "discard_request_mask"),
    reads=("backup_next_token_ids",),
)
#: Holds the optimistic sequence lengths the pre-fix lookup used (not patched).
_OPTIMISTIC_SEQ_LENS = PatchTarget(
    module="vllm.v1.worker.gpu_model_runner",
    qualname="GPUModelRunner._prepare_inputs",
    params=("scheduler_output",),
    reads=("optimistic_seq_lens_cpu", "use_async_scheduling"),
    patched=False,
)


class _InflatedLengths:
    """A view of an ``InputBatch`` whose ``num_tokens_no_spec`` is the optimistic
    sequence length plus one, so that vLLM's own lookup
    ``get_token_id(num_tokens_no_spec[i] - 1)`` reads index ``seq_lens_cpu[i]``: the
    lookup before the fix. Every other attribute is the real batch's."""

    def __init__(self, batch: Any, seq_lens: Any) -> None:
        self._batch = batch
        self.num_tokens_no_spec = seq_lens + 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)


def placeholder_token_wrapper(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``make(original) -> wrapper`` for ``SpecDecodeBaseProposer.prepare_next_token_ids_padded``.

    The wrapper runs the original twice on the same inputs: once as vLLM does
    (the fixed lookup), once with the backup-token index taken from the
    runner's optimistic sequence length (:class:`_InflatedLengths`). It returns the
    second result, where in addition every row whose looked-up token is the
    placeholder and whose request was in the previous async step's batch
    (``input_batch.prev_req_id_to_index``, set only under async scheduling: its
    last committed token exists only on the device) gets the placeholder as the
    drafter's input, as in the seed's engine; placeholder ids (-1) are clamped to 0. Counters:
    ``<name>.executions`` (calls), ``<name>.backup_placeholder`` (rows whose backup
    token became the placeholder), ``<name>.changed`` (rows whose next token, the
    drafter's input, differs from the fixed run's).
    """

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def prepare_next_token_ids_padded(
            self: Any, sampled_token_ids: Any, requests: Any, gpu_input_batch: Any,
            discard_request_mask: Any, *a: Any, **kw: Any,
        ) -> Any:
            runner = current_runner()
            fixed = original(self, sampled_token_ids, requests, gpu_input_batch, discard_request_mask, *a, **kw)
            if runner is None:
                return fixed
            count(f"{name}.executions")
            n = int(gpu_input_batch.num_reqs)
            fixed_next = fixed[0].clone()
            fixed_backup = self.backup_next_token_ids.np[:n].copy()
            seq_lens = runner.optimistic_seq_lens_cpu[:n].numpy().astype("int64")
            view = _InflatedLengths(gpu_input_batch, seq_lens)
            next_ids, valid = original(self, sampled_token_ids, requests, view, discard_request_mask, *a, **kw)
            backup = self.backup_next_token_ids.np[:n]
            count(f"{name}.backup_placeholder", int(((backup == -1) & (fixed_backup != -1)).sum()))
            # rows carried over from the previous async step: their last committed token
            # exists only on the device, the host-side lookup returns the placeholder
            prev = getattr(gpu_input_batch, "prev_req_id_to_index", None) or {}
            ids = gpu_input_batch.req_ids
            fed = [i for i in range(n) if backup[i] == -1 and ids[i] in prev]
            if fed:
                next_ids = next_ids.clone()
                next_ids[fed] = -1
            next_ids = next_ids.clamp(min=0)  # -1 would fail the CPU embedding lookup
            changed = int((next_ids[:n] != fixed_next[:n]).sum())
            count(f"{name}.changed", changed)
            if changed and _should_report(name):
                _report(name, "drafter input %s -> %s (backup %s -> %s)", fixed_next[:8].tolist(),
                        next_ids[:8].tolist(), fixed_backup[:8].tolist(), backup[:8].tolist())
            return next_ids, valid

        return prepare_next_token_ids_padded

    return make


def _install_async_placeholder_token(fault: Fault) -> None:
    """Take the backup token at the optimistic sequence length (docs/FAULTS.md
    bug 1, in vLLM's own async path).

    Patches ``vllm.v1.spec_decode.llm_base_proposer.SpecDecodeBaseProposer.prepare_next_token_ids_padded``
    (inherited by ``EagleProposer``, which serves ``method: mtp``), the function the
    seed's fix 1 changed (vLLM's fix "Fix backup token index in async spec decode
    (fixes Nemotron BF16 accuracy)"). vLLM computes, per request, the
    "backup" next token (the drafter's input token when the step sampled none for
    the request, e.g. a chunk of a prompt) as
    ``requests[req_id].get_token_id(gpu_input_batch.num_tokens_no_spec[i] - 1)``,
    the last committed token. Before the fix it was
    ``get_token_id(common_attn_metadata.seq_lens_cpu[i])``: under async scheduling
    that length is optimistic (it counts the draft slots of the step before as if
    accepted, ``GPUModelRunner._prepare_inputs``: ``optimistic_seq_lens_cpu =
    num_computed_tokens_cpu + num_scheduled_tokens``), so the index lands on a
    placeholder slot and ``get_token_id`` returns -1, which was fed to the drafter.
    The wrapper (:func:`placeholder_token_wrapper`) reproduces exactly that lookup
    with the runner's ``optimistic_seq_lens_cpu``. In vLLM 0.32 the kernel
    ``_eagle_prepare_next_token_padded`` consults the backup only for discarded
    rows (partial prefills), whose length carries no draft slots, so the lookup
    alone never reaches the drafter (measured: docs/FAULTS.md, first self-check
    run). The wrapper therefore also feeds the looked-up placeholder to the drafter
    for the rows where the seed's engine did: rows carried over from the previous
    async step (``input_batch.prev_req_id_to_index``), whose last committed token
    the host does not have. The placeholder -1 is clamped to token id 0: on the
    CPU an embedding lookup of -1 raises instead of reading garbage.

    In the async path the returned next tokens are not only the drafter's input:
    ``GPUModelRunner._copy_valid_sampled_token_count`` stores them as
    ``input_batch.prev_sampled_token_ids``, the next step's input of the target
    model. So the placeholder also reaches the target, and greedy outputs diverge
    (the seed saw GSM8K fall from 0.93 to 0.74), besides the acceptance collapse.

    Under synchronous scheduling the same lookup runs (the function is shared) but
    ``prev_req_id_to_index`` is never set (``_bookkeeping_sync`` sets it only on
    its async branch): the drafter's input changes only where vLLM itself uses the
    backup, a partial-prefill row whose prompt was chunked (the pre-fix index there
    is the next prompt token instead of the last one; rare with these prompts).
    """
    _patch(fault, _PREPARE_PADDED, placeholder_token_wrapper(fault.name))


# ---------------------------------------------------------------------------
# async-stale-accepted (the seed's bug 2 in vLLM's own async path)
# ---------------------------------------------------------------------------

_BATCH_CHANGE = PatchTarget(
    module="vllm.v1.worker.gpu_model_runner",
    qualname="update_num_computed_tokens_for_batch_change",
    params=("num_computed_tokens", "num_accepted_tokens", "prev_positions",
            "valid_sampled_token_count", "prev_num_draft_tokens", "cpu_num_computed_tokens"),
)


def stale_accepted_counts(num_accepted_tokens: Any, prev_positions: Any,
                          valid_sampled_token_count: Any, prev_num_draft_tokens: Any):
    """The accepted counts as taken without following the batch reorder.

    Args:
        num_accepted_tokens: int tensor ``[n]``, vLLM's (correct) counts per row of
            the current batch.
        prev_positions: int tensor ``[n]``, row of each current row in the previous
            step's batch (-1: not in it).
        valid_sampled_token_count: int tensor ``[>= n]``, valid tokens (1 + accepted
            drafts) per row of the previous step's batch.
        prev_num_draft_tokens: int tensor, drafts per previous row.

    Returns:
        ``(counts, reordered)``: for rows that verified drafts in the previous step
        (``prev_positions >= 0`` and drafts > 0) and moved (``prev_positions[i] !=
        i``), the count of previous row ``i`` (whatever request sat there; at least
        1; rows beyond the previous batch keep theirs), else the correct count;
        ``reordered`` the boolean mask of the rows given a stale count.
    """
    import torch

    n = int(prev_positions.shape[0])
    rows = torch.arange(n, device=prev_positions.device, dtype=prev_positions.dtype)
    gather = prev_positions.clamp(min=0).long()
    participating = (prev_positions >= 0) & (prev_num_draft_tokens[gather] > 0)
    # the previous step's buffer covers its own batch size; a row beyond it has no stale value
    m = min(n, int(valid_sampled_token_count.shape[0]))
    reordered = participating & (prev_positions != rows) & (rows < m)
    stale = num_accepted_tokens[:n].clone()
    stale[:m] = valid_sampled_token_count[:m].to(num_accepted_tokens.dtype).clamp(min=1)
    return torch.where(reordered, stale, num_accepted_tokens[:n]), reordered


def stale_accepted_wrapper(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``make(original) -> wrapper`` for ``update_num_computed_tokens_for_batch_change``
    as ``vllm.v1.worker.gpu_model_runner`` calls it.

    Runs the original (positions and ``num_computed_tokens`` stay right), then
    overwrites ``num_accepted_tokens`` with :func:`stale_accepted_counts`. Counters:
    ``<name>.executions``, ``<name>.reordered_rows`` (rows with drafts that moved),
    ``<name>.changed`` (rows whose count changed).
    """

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def update_num_computed_tokens_for_batch_change(
            num_computed_tokens: Any, num_accepted_tokens: Any, prev_positions: Any,
            valid_sampled_token_count: Any, prev_num_draft_tokens: Any, *a: Any, **kw: Any,
        ) -> Any:
            result = original(num_computed_tokens, num_accepted_tokens, prev_positions,
                              valid_sampled_token_count, prev_num_draft_tokens, *a, **kw)
            count(f"{name}.executions")
            n = int(prev_positions.shape[0])
            before = num_accepted_tokens[:n].clone()
            wrong, reordered = stale_accepted_counts(num_accepted_tokens, prev_positions,
                                                     valid_sampled_token_count, prev_num_draft_tokens)
            num_accepted_tokens[:n].copy_(wrong)
            changed = int((wrong != before).sum())
            count(f"{name}.reordered_rows", int(reordered.sum()))
            count(f"{name}.changed", changed)
            if changed and _should_report(name):
                _report(name, "accepted counts %s -> %s (previous rows %s)", before[:8].tolist(),
                        wrong[:8].tolist(), prev_positions[:8].tolist())
            return result

        return update_num_computed_tokens_for_batch_change

    return make


def _install_async_stale_accepted(fault: Fault) -> None:
    """Hand reordered rows the accepted counts of whatever request sat in their row
    before (docs/FAULTS.md bug 2, in vLLM's own async path).

    Patches ``vllm.v1.worker.gpu_model_runner.update_num_computed_tokens_for_batch_change``
    (defined in ``vllm/v1/spec_decode/utils.py``, looked up in the runner's module).
    Under async scheduling with speculative decoding and no Mamba "align" cache mode
    (the CPU case: prefix caching off), ``GPUModelRunner._prepare_inputs`` skips the
    host copy of the accepted counts ("the CPU copy races with the in-flight D2H
    copy and with input-batch row moves") and calls this function, which gathers
    the previous step's ``valid_sampled_token_count`` through ``prev_positions``
    (current row -> previous row, built by ``_compute_prev_positions`` from
    ``input_batch.prev_req_id_to_index``) into ``num_accepted_tokens``; the GDN /
    Mamba metadata builders then resume each request's recurrent state from slot
    ``num_accepted_tokens - 1``. That gather through ``prev_positions`` is the
    seed's fix 2; before it, counts were taken by row index while ``condense()`` /
    ``swap_states`` had moved requests, so reordered rows got another request's
    (stale) count. The wrapper (:func:`stale_accepted_wrapper`) re-injects that: for
    rows that verified drafts and moved, the count is read from the same row index
    of the previous step.

    On a CPU there is no device-to-host race to produce the stale value by timing;
    it is re-injected as the value the race produced. Under synchronous scheduling
    the runner never calls this function (the host counts are exact), so the fault
    does not execute: its counters stay 0.
    """
    _patch(fault, _BATCH_CHANGE, stale_accepted_wrapper(fault.name))


# ---------------------------------------------------------------------------
# registry and entry point
# ---------------------------------------------------------------------------

FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault(
            name="draft-input",
            summary="the MTP/EAGLE drafter is fed the committed token before the last one",
            mirrors="docs/FAULTS.md bug 1: drafter fed the wrong token (wrong index into the "
            "sequence when looking up the last committed token)",
            expected="greedy outputs identical to the unfaulted run; acceptance length down",
            targets=(_PROPOSE,),
            install=_install_draft_input,
        ),
        Fault(
            name="draft-input-placeholder",
            summary="the MTP/EAGLE drafter is fed token id 0 instead of the last committed token",
            mirrors="docs/FAULTS.md bug 1: drafter fed the -1 placeholder of an optimistic draft "
            "slot (as id 0, the clamped placeholder)",
            expected="greedy outputs identical to the unfaulted run; acceptance length down",
            targets=(_PROPOSE,),
            install=_install_draft_input,
        ),
        Fault(
            name="state-rollback",
            summary="after verification, accepted-token counts used for the Mamba/GDN "
            "state slot are off by one for every request that verified drafts",
            mirrors="docs/FAULTS.md bug 2: stale accepted-token counts roll recurrent state "
            "back by the wrong amount",
            expected="greedy outputs diverge from the reference; accuracy down",
            targets=(_UPDATE_AFTER_EXECUTE, _GDN_BUILD),
            install=_install_state_rollback,
        ),
        Fault(
            name="spec-prompt-edge",
            summary="the state-rollback off-by-one, only for requests whose prompt is exactly "
            "num_speculative_tokens + 1 tokens long",
            mirrors="public reports of MTP on hybrid models giving garbage for prompts of exactly "
            "num_speculative_tokens + 1 tokens (docs/FAULTS.md, prompt-length edge)",
            expected="every gate of a task without such prompts passes; greedy outputs of the "
            "edge-length prompts diverge from the reference (the prompt-edges shape catches it)",
            targets=(_UPDATE_AFTER_EXECUTE, _GDN_BUILD),
            install=_install_spec_prompt_edge,
        ),
        Fault(
            name="async-placeholder-token",
            summary="async scheduling: the drafter's backup token is looked up at the optimistic "
            "(placeholder-inflated) sequence length instead of the last committed token",
            mirrors="docs/FAULTS.md bug 1 in vLLM's async path "
            "(SpecDecodeBaseProposer.prepare_next_token_ids_padded before vLLM's backup-token index fix)",
            expected="acceptance length down; greedy outputs diverge and accuracy falls (in the async "
            "path the same next token is the target's next input: _copy_valid_sampled_token_count)",
            targets=(_PREPARE_PADDED, _OPTIMISTIC_SEQ_LENS),
            install=_install_async_placeholder_token,
            scheduling="async",
        ),
        Fault(
            name="async-stale-accepted",
            summary="async scheduling: accepted-token counts for the recurrent-state update are "
            "taken by row index, not following the batch reorder",
            mirrors="docs/FAULTS.md bug 2 in vLLM's async path "
            "(update_num_computed_tokens_for_batch_change without the prev_positions gather)",
            expected="greedy outputs diverge from the reference where reordered rows carried drafts",
            targets=(_BATCH_CHANGE, _GDN_BUILD),
            install=_install_async_stale_accepted,
            scheduling="async",
        ),
        Fault(
            name="noop",
            summary="patches nothing; logs that the plugin is active (plumbing test)",
            mirrors="none",
            expected="identical to the unfaulted run",
            targets=(),
            install=_install_noop,
            runner=None,
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
    """vLLM ``general_plugins`` entry point: apply the fault named by ``EVALRUN_FAULT``,
    keep async scheduling on the CPU (``EVALRUN_CPU_ASYNC_SCHEDULING=1``), and count
    and report (``EVALRUN_PLUGIN_REPORT_DIR``).

    Inert (patches and imports nothing) when none of the three variables is set.
    Idempotent within a process.

    Raises:
        FaultConfigError: unknown fault name, or a patch target is missing in the
            installed vLLM.
    """
    fault = requested_fault()
    cpu_async = os.environ.get(CPU_ASYNC_ENV, "").strip() not in ("", "0", "false", "no")
    reporting = bool(os.environ.get(REPORT_ENV, "").strip())
    if fault is None and not cpu_async and not reporting:
        return
    _STATE["fault"] = fault.name if fault else None
    _STATE["cpu_async"] = cpu_async
    if cpu_async:
        _install_cpu_async()
    _install_observers()
    if fault is not None:
        if fault.runner is not None and not _WORKER_INIT.resolve()[2].__dict__.get(_MARK):
            raise FaultConfigError(
                f"{FAULT_ENV}={fault.name}: cannot check which model runner runs "
                f"({_WORKER_INIT.module}.{_WORKER_INIT.qualname} could not be patched); refusing the fault")
        fault.install(fault)
        _info("evalrun fault %s active in process %d", fault.name, os.getpid())
    _start_flusher()
