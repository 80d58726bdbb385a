"""harness.report.gates_doc: docs/gates.md's table "Gates" is written from the declared gate
kinds (harness.config.gates), and a test keeps it current."""

from __future__ import annotations

import pytest

from harness.config import gates as G
from harness.report.gates_doc import BEGIN, END, main, with_table


def test_docs_table_is_generated_from_the_declarations():
    assert main(["--check"]) == 0, "docs/gates.md's gate table is stale: run python -m harness.report.gates_doc"
    rows = G.docs_table().splitlines()
    assert rows[:2] == ["| gate | passes when |", "| --- | --- |"] and len(rows) == 2 + len(G.DECLARATIONS)
    # in plan order: by scope (the in-run scopes, then the baseline's), then by each kind's order
    ordered = sorted(G.DECLARATIONS.values(), key=lambda d: (G.SCOPES.index(d.scope), d.order))
    for d, row in zip(ordered, rows[2:]):
        assert row == f"| `{d.kind}` | {d.doc} |"


def test_the_docs_writer_replaces_only_between_its_markers(tmp_path):
    doc = tmp_path / "gates.md"
    doc.write_text(f"# Gates\n\n{BEGIN}\n| old |\n{END}\n\ntail\n", encoding="utf-8")
    assert main([str(doc), "--check"]) == 1
    assert main([str(doc)]) == 0 and main([str(doc), "--check"]) == 0
    text = doc.read_text(encoding="utf-8")
    assert text.startswith(f"# Gates\n\n{BEGIN}\n| gate |") and text.endswith(f"{END}\n\ntail\n")
    assert "| old |" not in text
    with pytest.raises(ValueError, match="markers"):
        with_table("no markers")
