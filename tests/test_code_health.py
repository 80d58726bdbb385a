"""Code health of ``harness/``: no function longer than ``MAX_CODE_LINES`` lines of code
without a reason written at its top; outside ``faults/`` and ``models/``, no module over
``MAX_MODULE_LINES`` lines, the runner within ``MAX_RUNNER_LINES``, and ``Any`` (bare or
through a module-level alias of it) in at most ``MAX_ANY_SIGNATURES`` signatures.

Counted lines: the lines of the function's own body that hold code -- not the docstring,
not blank lines, not comment-only lines, and not the lines of a function or class defined
inside it (each nested function is measured on its own). The signature's lines count.

A longer function is accepted when the first line of its body after the docstring is a
comment starting ``# long:`` followed by the reason, for example a renderer that is a
linear list of sections::

    def render(...):
        \"\"\"...\"\"\"
        # long: one section after the other, in the order of the report
        ...
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "harness"

#: the limit of code lines per function
MAX_CODE_LINES = 60
#: the comment that states why a function is longer
REASON_PREFIX = "# long:"

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _comment_and_blank_lines(source: str) -> tuple[set[int], dict[int, str]]:
    """Line numbers (1-based) that hold no code token, and the comment text per line."""
    code: set[int] = set()
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                              tokenize.ENDMARKER):
            code.update(range(tok.start[0], tok.end[0] + 1))
    n = len(source.splitlines())
    return set(range(1, n + 1)) - code, comments


def _docstring_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[int]:
    first = fn.body[0]
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        return set(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return set()


def _has_reason(fn: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> bool:
    """Whether the first line of the body after the docstring is ``# long: <reason>``."""
    doc = _docstring_lines(fn)
    if doc:  # the first non-blank line after the docstring
        stop = fn.body[1].lineno if len(fn.body) > 1 else (fn.end_lineno or fn.lineno)
        candidates = range(max(doc) + 1, stop + 1)
    else:  # a comment above the first statement
        candidates = range(fn.lineno + 1, fn.body[0].lineno + 1)
    for i in candidates:
        text = lines[i - 1].strip()
        if not doc and not text.startswith("#"):
            continue  # the rest of a signature over several lines
        if not text:
            continue
        return text.startswith(REASON_PREFIX) and bool(text[len(REASON_PREFIX):].strip())
    return False


def long_functions(source: str, filename: str = "<string>",
                   limit: int = MAX_CODE_LINES) -> list[tuple[str, int, int]]:
    """Functions of ``source`` over ``limit`` code lines without a ``# long:`` reason.

    Returns ``(qualified name, first line, code lines)`` per function, in source order.
    Raises SyntaxError when ``source`` does not parse (naming ``filename``).
    """
    tree = ast.parse(source, filename=filename)
    not_code, _ = _comment_and_blank_lines(source)
    lines = source.splitlines()
    out: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (*_DEFS, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if isinstance(child, _DEFS):
                    own = set(range(child.lineno, (child.end_lineno or child.lineno) + 1))
                    for inner in ast.walk(child):
                        if inner is not child and isinstance(inner, (*_DEFS, ast.ClassDef)):
                            own -= set(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
                    # decorators are above child.lineno; the signature and body count
                    n = len(own - not_code - _docstring_lines(child))
                    if n > limit and not _has_reason(child, lines):
                        out.append((name, child.lineno, n))
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return sorted(out, key=lambda t: t[1])


def test_checker_counts_code_lines_only():
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    src = f'def f():\n    """Doc.\n\n    more doc\n    """\n    # a comment\n\n{body}\n'
    # 61 statements + the signature = 62 code lines; the docstring, comment, blank do not count
    assert long_functions(src) == [("f", 1, 62)]
    assert long_functions(src, limit=62) == []
    short = "\n".join(f"    x{i} = {i}" for i in range(59))
    assert long_functions(f"def g():\n    # c\n\n{short}\n") == []  # 59 + 1 = 60


def test_checker_accepts_a_reason_and_measures_nested_functions_apart():
    body = "\n".join(f"    x{i} = {i}" for i in range(70))
    with_reason = f'def f():\n    """Doc."""\n    # long: one section after the other\n{body}\n'
    assert long_functions(with_reason) == []
    no_doc = f"def f():\n    # long: a table of cases\n{body}\n"
    assert long_functions(no_doc) == []
    empty_reason = f'def f():\n    """Doc."""\n    # long:\n{body}\n'
    assert long_functions(empty_reason) == [("f", 1, 71)]
    late_reason = f'def f():\n    """Doc."""\n    y = 1\n    # long: too late\n{body}\n'
    assert long_functions(late_reason) == [("f", 1, 72)]
    inner = "\n".join(f"            x{i} = {i}" for i in range(70))
    nested = f"class C:\n    def outer(self):\n        def inner():\n{inner}\n        return inner\n"
    # inner: 70 + signature; outer: its signature and the return only
    assert long_functions(nested) == [("C.outer.inner", 3, 71)]


def test_no_function_in_harness_is_long_without_a_reason():
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent)
        for name, line, n in long_functions(path.read_text(encoding="utf-8"), str(rel)):
            found.append(f"{rel}:{line} {name}: {n} code lines")
    assert not found, (
        f"functions over {MAX_CODE_LINES} code lines without a '{REASON_PREFIX} <reason>' comment "
        "as the first line after the docstring (split them, or say why):\n  " + "\n  ".join(found))


#: stages whose modules may be longer and carry ``Any`` (none: vLLM's plugin and the model
#: code keep the limits too)
EXEMPT_STAGES: tuple[str, ...] = ()
#: the limits of the code-health step: module length, the runner's length, ``Any`` signatures
MAX_MODULE_LINES = 700
MAX_RUNNER_LINES = 500
MAX_ANY_SIGNATURES = 60


def any_aliases(trees: list[ast.Module]) -> set[str]:
    """Names bound at module level to an expression that mentions ``Any`` (``JsonValue =
    Any``, ``X: TypeAlias = dict[str, Any]``), plus ``Any`` itself."""
    names = {"Any"}
    for tree in trees:
        for node in tree.body:
            target, value = None, None
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                target, value = node.targets[0].id, node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                target, value = node.target.id, node.value
            if target and value is not None and target[:1].isupper() and "Any" in _names(value):
                names.add(target)
    return names


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def any_signatures(tree: ast.Module, aliases: set[str]) -> list[str]:
    """Functions whose parameter or return annotations name ``Any`` or one of ``aliases``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, _DEFS):
            a = node.args
            params = (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
            anns = [x.annotation for x in params if x] + [node.returns]
            if any(ann is not None and _names(ann) & aliases for ann in anns):
                out.append(node.name)
    return out


def _checked_modules() -> list[Path]:
    return [p for p in sorted(PKG.rglob("*.py")) if p.relative_to(PKG).parts[0] not in EXEMPT_STAGES]


def test_any_counter_sees_bare_any_and_its_aliases():
    src = ("from typing import Any\nJson = Any\nRows = dict[str, Any]\nN = 3\n"
           "def a(x: Any) -> int: ...\ndef b(x: Json): ...\ndef c() -> 'Rows': ...\n"
           "def d(x: int) -> list[int]: ...\ndef e(*args: Any): ...\n")
    tree = ast.parse(src)
    aliases = any_aliases([tree])
    assert aliases == {"Any", "Json", "Rows"}
    assert any_signatures(tree, aliases) == ["a", "b", "e"]  # a string annotation is not parsed


def test_modules_and_the_runner_stay_within_their_length():
    long = [f"{p.relative_to(PKG.parent)}: {n} lines" for p in _checked_modules()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES]
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split by noun):\n  " + "\n  ".join(long)
    runner = len((PKG / "run" / "runner.py").read_text(encoding="utf-8").splitlines())
    assert runner <= MAX_RUNNER_LINES, (
        f"harness/run/runner.py: {runner} lines; it only sequences (<= {MAX_RUNNER_LINES})")


def test_any_in_at_most_sixty_signatures_aliases_included():
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in _checked_modules()}
    aliases = any_aliases(list(trees.values()))
    found = [f"{p.relative_to(PKG.parent)}: {name}" for p, t in trees.items() for name in any_signatures(t, aliases)]
    assert len(found) <= MAX_ANY_SIGNATURES, (
        f"{len(found)} signatures carry Any or an alias of it ({sorted(aliases - {'Any'})}); "
        f"at most {MAX_ANY_SIGNATURES}, each for JSON from outside or a library's object:\n  " + "\n  ".join(found))


#: options that make an interpreter or a shell run the text that follows as a program
_PROGRAM_OPTIONS = ("-c",)
#: a command line in a string that runs program text (``python -c "..."``, ``sh -c '...'``)
_INLINE_PROGRAM = ("python -c", "python3 -c", "sys.executable -c", "sh -c", "bash -c")


def _is_docstring(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    expr = parents.get(node)
    owner = parents.get(expr) if isinstance(expr, ast.Expr) else None
    return isinstance(owner, (ast.Module, ast.ClassDef, *_DEFS)) and owner.body[0] is expr


def _imports_something(text: str) -> bool:
    """Whether ``text`` parses as Python that imports (what a program handed to ``-c`` does)."""
    if "import" not in text:
        return False
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(tree))


def program_texts(source: str) -> list[tuple[int, str]]:
    """Program text held in ``source``'s strings: ``(line, why)`` for each command list or
    tuple that passes ``-c`` and the item after it, each string naming ``python -c`` (or a
    shell's ``-c``), each ``exec`` / ``eval`` / ``compile`` of a string literal, and each
    string literal (docstrings aside) that parses as Python importing a module."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)):
            for item in node.elts[:-1]:
                if isinstance(item, ast.Constant) and item.value in _PROGRAM_OPTIONS:
                    found.append((node.lineno, f"{item.value} followed by program text"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("exec", "eval", "compile") and node.args and \
                isinstance(node.args[0], (ast.Constant, ast.JoinedStr)):
            found.append((node.lineno, f"{node.func.id} of a string literal"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and not _is_docstring(node, parents):
            if any(cmd in node.value for cmd in _INLINE_PROGRAM):
                found.append((node.lineno, "a command line running inline program text"))
            elif _imports_something(node.value):
                found.append((node.lineno, "a string literal of Python source"))
    return sorted(found)


def test_checker_finds_program_text_in_strings():
    made_up = (
        '"""A module; its docstring may say: import os."""\n'
        'import subprocess, sys\n'
        'PROBE = "import json, sys\\nprint(json.dumps(sys.path))"\n'
        'def f(python: str) -> None:\n'
        '    """Run ``import vllm`` in ``python``."""\n'
        '    subprocess.run([python, "-c", PROBE])\n'
        '    subprocess.run((python, "-c", f"print({python!r})"))\n'
        '    subprocess.run("python -c pass", shell=True)\n'
        '    exec("x = 1")\n'
        '    subprocess.run([python, "-m", "vllm.entrypoints.openai.api_server"])\n'
        '    subprocess.run([python, "probes/build_identity.py", "-c"])\n'
        '    print("engine import: import vllm failed")\n'
    )
    assert program_texts(made_up) == [
        (3, "a string literal of Python source"),
        (6, "-c followed by program text"),
        (7, "-c followed by program text"),
        (8, "a command line running inline program text"),
        (9, "exec of a string literal"),
    ]


def test_no_program_text_hidden_in_strings():
    """What harness/ runs in another interpreter is a module run by path
    (harness/engine/probes/), linted and typed, never Python source in a string."""
    found = [f"{p.relative_to(PKG.parent)}:{line} {why}" for p in sorted(PKG.rglob("*.py"))
             for line, why in program_texts(p.read_text(encoding="utf-8"))]
    assert not found, ("program text in strings (make it a module of harness/engine/probes/ and run it "
                       "by path):\n  " + "\n  ".join(found))
