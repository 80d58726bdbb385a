"""One module per fault. Each module declares ``FAULT`` (a
:class:`harness.faults.fault.Fault`): its patch targets, its wrapper, its installer and
the self-check's expectation of it, together. :mod:`harness.faults.registry` finds every
module here; adding a fault is adding a module (docs/maintainers/adding-a-fault.md).

A module here imports only the standard library and :mod:`harness.faults` at module
level (vLLM loads the plugin in every process); torch and vLLM are imported inside the
functions that run once a fault is active.
"""
