"""The documentation's own rules: a README that is a landing page, one home per gate's
meaning (docs/gates.md), links that resolve, and nothing pointing outside the repository
or to an issue number."""

from __future__ import annotations

import re
from pathlib import Path

from harness.config.gates import declarations

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").glob("*.md"))
README = REPO / "README.md"

#: Where prose and comments live (tests/data holds vLLM's files, copied unchanged).
SCANNED = ["harness", "tests", "docs", "bench", "configs", "model_lists", ".ci"]
SCANNED_FILES = ["README.md", "Makefile", "pyproject.toml"]
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".txt", ".toml", ""}

#: Pointers the repository must not hold (spelled in pieces so this file does not match).
FORBIDDEN = [
    re.compile(r"\.\./shared/" + "docs"),
    re.compile("DESIGN" + r"\.md"),
    re.compile("VLLM-CPU-" + "FACTS"),
    re.compile(r"\b[Ii]ssues? #?\d+"),
    re.compile(r"\b(?:[Pp]ull request|PR) #?\d+"),
    re.compile(r"\b[\w.-]+/[\w.-]+#\d+"),
]


def _scanned_files() -> list[Path]:
    out = [REPO / f for f in SCANNED_FILES]
    for d in SCANNED:
        for p in sorted((REPO / d).rglob("*")):
            if p.is_file() and p.suffix in SUFFIXES and "data" not in p.relative_to(REPO).parts[:2]:
                out.append(p)
    return out


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces -> '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_readme_is_a_landing_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 250, len(lines)
    text = "\n".join(lines)
    for must in ("make cpu", "make test", "pip install -e '.[gpu]'", "evalrun --config models-h200.txt",
                 "pytest --pyargs harness.test_gsm8k_correctness", "| outcome | when | exit code |",
                 "## Dependencies and what each is for", "<!-- figures:cpu-list begin"):
        assert must in text, must
    for doc in DOCS:
        assert f"(docs/{doc.name})" in text, f"README does not link docs/{doc.name}"


def test_every_gate_kind_has_one_home():
    """Each gate kind is a row of exactly one gate table (a table whose first column is
    ``gate``), in docs/gates.md; config tables may name a setting of the same name."""
    rows: dict[str, list[str]] = {}
    for doc in [README, *DOCS]:
        header = ""
        for line in doc.read_text(encoding="utf-8").splitlines():
            if not line.startswith("|"):
                header = ""
                continue
            if not header:
                header = line.strip("| ").split("|")[0].strip()
                continue
            m = re.match(r"\| `([a-z_]+)` \|", line)
            if header == "gate" and m:
                rows.setdefault(m.group(1), []).append(doc.name)
    assert {k: ["gates.md"] for k in declarations()} == rows


def test_relative_links_resolve():
    bad = []
    for doc in [README, *DOCS]:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+://", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                bad.append(f"{doc.name}: {target}")
            elif anchor and dest.suffix == ".md":
                heads = [_slug(h) for h in re.findall(r"^#+ (.+)$", dest.read_text(encoding="utf-8"), re.MULTILINE)]
                if anchor not in heads:
                    bad.append(f"{doc.name}: {target} (no such heading)")
    assert bad == []


def test_nothing_points_outside_the_repository_or_to_an_issue():
    hits = []
    for p in _scanned_files():
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for pat in FORBIDDEN:
                if pat.search(line):
                    hits.append(f"{p.relative_to(REPO)}:{n}: {line.strip()[:120]}")
    assert hits == []


def test_the_checks_above_can_fail():
    assert any(p.search("see ../shared/" + "docs/x") for p in FORBIDDEN)
    assert any(p.search("(vLLM issue #" + "34497)") for p in FORBIDDEN)
    assert any(p.search("encode/httpcore#" + "1110") for p in FORBIDDEN)
    assert not any(p.search("color:#222; --data-dir DIR") for p in FORBIDDEN)
    assert _slug("Async scheduling on the CPU") == "async-scheduling-on-the-cpu"
    assert _slug("`kind: lm_eval`") == "kind-lm_eval"
