"""Every fault's machine-checked expectation: gate kinds the config stage knows, the
self-check reading them as declared gate kinds (a misspelt kind fails), docs/FAULTS.md carrying the same table, and each
fault module with its own test file and docs row (adding a fault: one module, its test,
its docs row; docs/maintainers/adding-a-fault.md)."""

from __future__ import annotations

import pkgutil
import re
from pathlib import Path

import pytest

from harness.analysis.gatekinds.min_acceptance_length import MinAcceptanceLength
from harness.cli.selfcheck import EXPECTATIONS, _selector
from harness.config.gates import GateBase, declarations
from harness.faults import catalog
from harness.faults.fault import EVERY_KIND, GateRef
from harness.faults.plugin import FAULTS
from harness.faults.registry import expectations_table

ROOT = Path(__file__).resolve().parents[2]
FAULTS_MD = ROOT / "docs" / "FAULTS.md"
BEGIN = "<!-- faults:expectations begin"
END = "<!-- faults:expectations end -->"


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_expectations_name_gate_kinds(name):
    e = FAULTS[name].expectation
    for ref in e.must_fail + e.must_pass:
        assert ref.kind == EVERY_KIND or ref.kind in declarations(), (name, ref)
        assert ref.tasks in ("plain", "shape"), (name, ref)
    assert not {r.label() for r in e.must_fail} & {r.label() for r in e.must_pass}, name
    if name != "noop":
        assert e.must_fail, f"{name}: a fault the gates must catch names the gates that fail"
    # an async-path fault says what its patch does under synchronous scheduling; no other does
    assert (e.sync_executes is not None) == (FAULTS[name].scheduling == "async"), name


def test_the_selfcheck_reads_every_fault_as_gate_kinds():
    assert set(EXPECTATIONS) == set(FAULTS)
    for name, exp in EXPECTATIONS.items():
        kinds = [s.kind for s in exp.must_fail + exp.must_pass]
        assert all(k is None or (isinstance(k, type) and issubclass(k, GateBase)) for k in kinds), name
        declared = FAULTS[name].expectation
        assert [s.label() for s in exp.must_fail] == [r.label() for r in declared.must_fail]
        assert [s.label() for s in exp.must_pass] == [r.label() for r in declared.must_pass]
    assert EXPECTATIONS["async-stale-accepted"].sync_executes is False
    assert EXPECTATIONS["async-placeholder-token"].sync_executes is True
    assert EXPECTATIONS["draft-input"].must_fail[0].kind is MinAcceptanceLength


def test_a_misspelt_gate_kind_fails_closed():
    with pytest.raises(ValueError, match=r"'min_acceptance_lenght' is not a declared gate kind \(nearest: "
                                         r"min_acceptance_length"):
        _selector(GateRef("min_acceptance_lenght"))
    assert _selector(GateRef("min_acceptance_length", "shape")).label() == "shape:min_acceptance_length"


def test_docs_carry_the_machine_checked_table():
    text = FAULTS_MD.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, f"{FAULTS_MD}: the expectations block is missing"
    block = text.split(BEGIN, 1)[1].split("\n", 1)[1].split(END, 1)[0]
    assert block == expectations_table(), (
        "docs/FAULTS.md's expectations table differs from the fault modules; replace the block with:\n"
        + expectations_table())


def test_every_fault_module_has_its_test_and_its_docs_row():
    modules = [m.name for m in pkgutil.iter_modules(catalog.__path__)]
    assert len(modules) == len(FAULTS)
    tests = Path(__file__).resolve().parent
    missing = [m for m in modules if not (tests / f"test_{m}.py").is_file()]
    assert not missing, f"fault modules without tests/faults/test_<module>.py: {missing}"
    text = FAULTS_MD.read_text(encoding="utf-8")
    effects = text.split("| fault | mirrors", 1)[1].split("\n\n", 1)[0]
    rows = set(re.findall(r"^\| `([a-z0-9-]+)` \|", effects, flags=re.M))
    assert rows == set(FAULTS), f"docs/FAULTS.md's table of faults: {sorted(rows ^ set(FAULTS))}"
