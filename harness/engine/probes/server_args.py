"""Probe: each server command parsed and validated by the installed vLLM's own parser.

Run by path in the variant's interpreter (:mod:`harness.engine.probes`) by
:mod:`harness.engine.preflight`; standard library only at module level (vLLM is imported
inside :func:`main`). Reads ``[{"id", "module", "args", "env"}]`` (JSON) from stdin; for
each item it runs the server module exactly as ``python -m MODULE ARGS`` would
(``runpy.run_module(..., run_name="__main__")`` with ``sys.argv`` and the item's
environment set) up to the point where vLLM has parsed and validated its arguments: the
server coroutine handed to ``uvloop.run`` (or ``asyncio.run``) is stopped there, and its
``args`` are read from its frame. Prints one line, :data:`MARKER` and JSON::

    {"python": sys.executable, "version": str | None, "import_error": str | None,
     "results": [{"id", "ok", "error", "async_refused", "rule_error"?, "speculative"?}]}

``async_refused``: vLLM's own rule for explicit async scheduling with the drafter
(:func:`async_rule`); ``speculative``: the speculative settings the parser stored
(:func:`speculative_settings`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import json
import os
import re
import runpy
import sys
from collections.abc import Mapping
from typing import Any, NoReturn, get_args

#: marks the one result line on stdout (vLLM may print other lines).
MARKER = "EVALRUN_PREFLIGHT "


class _Parsed(BaseException):
    """Raised in place of starting the server: the arguments were parsed and validated."""


#: the namespace of the last server coroutine stopped (``{"args": argparse.Namespace}``)
_parsed: dict[str, Any] = {}


def _stop(coro: Any, *a: object, **k: object) -> NoReturn:  # noqa: ARG001 - uvloop.run's signature
    """Stand-in for ``uvloop.run`` / ``asyncio.run``: keep the coroutine's ``args``, close it
    (it never runs) and stop the server module."""
    frame = getattr(coro, "cr_frame", None)
    _parsed["args"] = frame.f_locals.get("args") if frame is not None else None
    if hasattr(coro, "close"):
        coro.close()
    raise _Parsed()


def async_rule(namespace: Any) -> str | None:
    """vLLM's own rule for explicit async scheduling with a drafter
    (``VllmConfig.__post_init__``), from the installed release's types and source: the
    reason vLLM refuses the pair ``namespace`` asks for, or None."""
    sc = getattr(namespace, "speculative_config", None)
    if not getattr(namespace, "async_scheduling", None) or not sc:
        return None
    if not isinstance(sc, dict):
        sc = {k: getattr(sc, k) for k in ("method", "model", "disable_padded_drafter_batch") if hasattr(sc, k)}
    from vllm.config import speculative as S
    from vllm.config.vllm import VllmConfig

    ok = set(get_args(S.EagleModelTypes)) | set(get_args(getattr(S, "NgramGPUTypes", ())))
    src = inspect.getsource(VllmConfig.__post_init__)
    start = src.find("if self.scheduler_config.async_scheduling:")
    end = src.find("elif self.scheduler_config.async_scheduling is None", start)
    block = src[start:end] if start >= 0 else ""
    ok |= set(re.findall(r'speculative_config\.method != "(\w+)"', block))
    raises = re.findall(r'raise ValueError\(((?:\s*f?"[^"]*")+)\s*\)', block)
    msgs = ["".join(re.findall(r'"([^"]*)"', m)) for m in raises]
    method = sc.get("method")
    if method is None:
        if sc.get("model") not in ("ngram", "[ngram]"):
            return None  # vLLM chooses from the draft model's config: cannot be known here
        method = "ngram"
    if method in get_args(getattr(S, "MTPModelTypes", ())):
        method = "mtp"
    if start >= 0 and method not in ok:
        why = next((m for m in msgs if "only supported" in m), "async scheduling is not supported with this drafter")
        return f"{why} (method '{sc.get('method') or method}')"
    if sc.get("disable_padded_drafter_batch") is True:
        return next((m for m in msgs if "padded" in m), "async scheduling with disable_padded_drafter_batch=True")
    return None


def speculative_settings(namespace: Any) -> dict[str, Any]:
    """The speculative settings vLLM's parser stored in ``namespace``: its speculative_config and
    every destination ``EngineArgs.create_speculative_config`` merges into it (read from
    its source)."""
    from vllm.engine.arg_utils import EngineArgs

    src = inspect.getsource(EngineArgs.create_speculative_config)
    dests = ["speculative_config"] + [d for _, d in re.findall(r'\(\s*"--[\w-]+"\s*,\s*"(\w+)"\s*,\s*self\.(\w+)', src)]
    return {d: getattr(namespace, d) for d in dests if getattr(namespace, d, None) is not None}


def check(item: Mapping[str, Any]) -> dict[str, Any]:
    """Run one item's server module up to its parsed arguments (the ``results`` entry)."""
    saved_env, saved_argv = dict(os.environ), list(sys.argv)
    os.environ.update(item["env"])
    sys.argv = [item["module"], *item["args"]]
    err = io.StringIO()
    res: dict[str, Any] = {"id": item["id"], "ok": False, "error": None, "async_refused": None}
    try:
        with contextlib.redirect_stderr(err):
            runpy.run_module(item["module"], run_name="__main__", alter_sys=False)
        res["error"] = "the server module returned without starting a server"
    except _Parsed:
        res["ok"] = True
        try:
            res["async_refused"] = async_rule(_parsed.get("args"))
        except Exception as e:  # noqa: BLE001 - the rule could not be read: recorded, the launch decides
            res["rule_error"] = f"{type(e).__name__}: {e}"
        try:
            res["speculative"] = json.loads(json.dumps(speculative_settings(_parsed.get("args")), default=str))
        except Exception as e:  # noqa: BLE001 - cannot be read: a variant planned without speculation is refused
            res["speculative"] = {"(unreadable)": f"{type(e).__name__}: {e}"}
    except SystemExit as e:
        lines = [x for x in err.getvalue().strip().splitlines() if x.strip()]
        msg = "; ".join(x for x in lines if "error:" in x) or (lines[-1] if lines else "")
        res["error"] = (msg or f"exited with code {e.code}").strip()
    except BaseException as e:  # noqa: BLE001 - whatever the server module raised is its answer
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv
    return res


def path_as_dash_c() -> None:
    """``sys.path`` as ``python -c`` has it: the current folder first (``""``), not this
    file's folder (no probe's name can shadow a module the interpreter asked imports)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        sys.path[0] = ""


def main() -> None:
    """Read the items from stdin, check each, print :data:`MARKER` and the JSON."""
    path_as_dash_c()
    items = json.load(sys.stdin)
    out: dict[str, Any] = {"python": sys.executable, "version": None, "import_error": None, "results": []}
    try:
        import uvloop
        import vllm

        out["version"] = getattr(vllm, "__version__", None)
    except BaseException as e:  # noqa: BLE001 - any failure to import is the answer
        out["import_error"] = f"{type(e).__name__}: {e}"
        print(MARKER + json.dumps(out), flush=True)
        sys.exit(0)
    # the server is never started: its coroutine stops at the loop (a stand-in of another type)
    uvloop.run = _stop  # type: ignore[assignment]
    asyncio.run = _stop  # type: ignore[assignment]  # a release that starts with asyncio.run stops too
    out["results"] = [check(it) for it in items]
    print(MARKER + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
