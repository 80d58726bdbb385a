"""evalrun's vLLM plugin: faults injected into vLLM's own speculative-decoding path.

evalrun exists to catch two classes of bugs that only show up end to end
(docs/FAULTS.md, "The two bugs"): the drafter fed the wrong token, and recurrent (Mamba /
Gated DeltaNet) state rolled back by the wrong number of tokens. To prove that the gates
catch them, a variant can ask for one of them with ``fault: <name>`` in its config; the
runner then sets ``EVALRUN_FAULT=<name>`` on that variant's server, and this plugin breaks
the engine the same way the real bug did, at run time, without touching vLLM's files.

The package imports nothing else of evalrun (vLLM loads it in every process; without any
of its variables :func:`harness.faults.plugin.register` patches and imports nothing beyond
the standard library). Its modules, one noun each:

* :mod:`~harness.faults.plugin`: the entry point ``register()`` and the public API.
* :mod:`~harness.faults.catalog`: one module per fault (patch target, wrapper, installer,
  the self-check's expectation); :mod:`~harness.faults.registry` finds them.
* :mod:`~harness.faults.fault`: the ``Fault`` and ``Expectation`` types.
* :mod:`~harness.faults.patching`: patch targets, applying a wrapper once per process.
* :mod:`~harness.faults.state`: the plugin's state in one object (``STATE``).
* :mod:`~harness.faults.env`: the environment switches; :mod:`~harness.faults.log`: log lines.
* :mod:`~harness.faults.reports`: counters and the per-process report files.
* :mod:`~harness.faults.observers`: which model runner runs, batch condense / reorder events.
* :mod:`~harness.faults.spec_metrics`: evalrun's workaround of a vLLM 0.32 limit, per-request
  speculative metrics for requests a stop string ends.
* :mod:`~harness.faults.cpu_async`: async scheduling kept on the CPU platform.
* :mod:`~harness.faults.noise`: the ``EVALRUN_NUMERICS_NOISE`` setting; :mod:`~harness.faults.numerics`:
  GPU-like logit noise on the CPU engine (docs/numerics.md).

When a fault is active, every process logs ``evalrun fault <name> active in process
<pid>`` (logger ``vllm.evalrun.faults``), and the first time the fault actually changes
something in a process it logs ``evalrun fault <name> fired in process <pid>: ...``
(every time with ``EVALRUN_FAULT_DEBUG=1``).
"""
