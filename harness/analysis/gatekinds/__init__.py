"""Every gate kind, one module per kind named after it (``max_accuracy_drop.py`` declares
``max_accuracy_drop``): its spec class with :func:`~harness.config.gates.registry.gate`,
which carries its scope and id rule, plan order, planning rule (``plan``), judge
(``judge``), documentation row and settings (docs/maintainers/adding-a-gate.md). Modules
whose name starts with ``_`` hold what several kinds share.

The registry (:func:`harness.config.gates.registry.declarations`) imports this package by
name on first use; importing it imports every kind module, found by :mod:`pkgutil` (adding
a kind is adding its module), and names them in :data:`KIND_MODULES` for the registry's
check that each declares its kind.
"""

from __future__ import annotations

import importlib
import pkgutil

#: the kind modules of this package (names without the package), in name order
KIND_MODULES: tuple[str, ...] = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__)
                                             if not m.name.startswith("_")))

for _name in KIND_MODULES:
    importlib.import_module(f"{__name__}.{_name}")
