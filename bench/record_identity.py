"""Is the run record the same byte for byte from two source trees? Runs a few scenarios on
the FAKE server (tests/fake_vllm.py) once with each tree's ``harness`` and compares every
``run.json``, samples file and report (``summary.md``, ``junit.xml``, ``summary.html``) of
the two run folders.

The CLI has no option to fix the clock, so what a clock or the operating system chooses
is replaced before the second comparison: timestamps (``*_at``), durations (``seconds``,
``*_seconds``) and request latencies (``latency_s``), process ids, ports, the source
revision (``git_revision``), the samples files' hashes (``samples_sha256``: the files
hold the latencies) and the run's temporary paths. Everything else
must match byte for byte. The config files, run id and results folder are the same for
both trees (the config and results paths are identical; each tree's run folder is moved
aside before the other runs); each tree runs its own fake server (the probes it answers
are that tree's), copied to one path beside the config.

Usage (from a worktree root; REF is a checkout of the tree to compare against, e.g.
``git worktree add --detach /tmp/ref <commit>``)::

    .venv/bin/python bench/record_identity.py --ref /tmp/ref [--new .]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
FAKE = HERE / "tests" / "fake_vllm.py"

#: scenario -> (reference env, spec env, extra config text)
SCENARIOS = {
    "passing": ({"FAKE_MODE": "ok"}, {"FAKE_MODE": "ok"}, ""),
    "failing_gate": ({"FAKE_MODE": "ok"}, {"FAKE_MODE": "corrupt"}, ""),
    "inline_noise_rerun": ({"FAKE_MODE": "ok"}, {"FAKE_MODE": "ok"}, "noise_runs: 2, noise_runs_when: always"),
    "noise_rerun_on_demand": ({"FAKE_MODE": "ok"}, {"FAKE_MODE": "corrupt"},
                              "noise_runs: 2, noise_runs_when: unexplained, near_tie_nats: null"),
    "errored_variant": ({"FAKE_MODE": "ok"}, {"FAKE_MODE": "exit_on_start"}, ""),
    "crash_mid_task": ({"FAKE_MODE": "ok"}, {"FAKE_MODE": "crash_after:3"}, ""),
}

#: keys whose values a clock, the OS or the commit chooses: timestamps, durations, latencies (``*_s``),
#: pids, ports, the source revision, and the hash of a samples file (its latencies differ)
_VOLATILE_KEY = re.compile(r"(^|_)(at|seconds|s|pid|port)$|^(git_revision|samples_sha256)$")
_PORT = re.compile(r"(--port[ =]|127\.0\.0\.1:|localhost:|'127\.0\.0\.1', )\d+")
_PID = re.compile(r"\bpid \d+\b")
#: a duration inside a message, e.g. "exited with code 3 during start-up after 0.5s"
_AFTER = re.compile(r"\bafter \d+(\.\d+)?s\b")


def config_text(ref_env: dict[str, str], spec_env: dict[str, str], comparison_extra: str) -> str:
    """A two-variant config on the fake server (the shape of tests/orchestration/test_runner_fake_server.py)."""
    extra = f", {comparison_extra}" if comparison_extra else ""
    return textwrap.dedent(f"""\
        model: fake-model
        startup_max_wait_seconds: 30
        request_timeout_seconds: 30
        max_concurrency: 1
        variants:
          reference:
            env: {json.dumps(ref_env)}
          spec:
            speculative_config: {{method: mtp, num_speculative_tokens: 2}}
            env: {json.dumps(spec_env)}
        tasks:
          gsm8k: {{kind: synthetic, num_questions: 6, num_fewshot: 1, max_tokens: 8}}
        comparisons:
          - {{baseline: reference, candidate: spec{extra}}}
        """)


def run_tree(tree: Path, cfg: Path, results: Path) -> int:
    """One evalrun run of ``cfg`` with ``tree``'s harness; its exit code."""
    env = {**os.environ, "PYTHONPATH": str(tree), "CUDA_VISIBLE_DEVICES": ""}
    fake = shutil.copy2(tree / FAKE.relative_to(HERE), cfg.parent / FAKE.name)
    numerics = tree / "tests" / "fake_numerics.py"  # the fake imports it from its own folder (since d6dff4c)
    if numerics.exists():
        shutil.copy2(numerics, cfg.parent / numerics.name)
    cmd = [sys.executable, "-m", "harness.cli", "--config", str(cfg), "--python", str(fake),
           "--results-dir", str(results), "--run-id", "r", "--quiet"]
    return subprocess.run(cmd, env=env, cwd=cfg.parent, capture_output=True, check=False).returncode


def normalise(text: str, root: Path) -> str:
    """``text`` (a JSON document or JSON lines) with clock, process, port and
    temporary-path values replaced."""
    text = text.replace(str(root), "<root>")
    try:
        return _normalise_doc(json.loads(text))
    except json.JSONDecodeError:  # JSON lines: each line alone
        return "\n".join(_normalise_doc(json.loads(line)) if line.strip() else line for line in text.split("\n"))


def _normalise_doc(doc: object) -> str:
    def walk(x: object, key: str = "") -> object:
        if isinstance(x, dict):
            return {k: walk(v, k) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v, key) for v in x]
        if _VOLATILE_KEY.search(key) and x is not None:
            return "<volatile>"
        if isinstance(x, str):
            return _AFTER.sub("after <n>s", _PID.sub("pid <n>", _PORT.sub(r"\1<port>", x)))
        return x

    return json.dumps(walk(doc), indent=1)


#: the reports written beside ``run.json``, compared as text (:func:`normalise_report`)
REPORTS = ("summary.md", "junit.xml", "summary.html")
#: what a clock or the commit chooses inside a report: ISO timestamps, the 40-hex git revision,
#: JUnit's ``time="..."`` and durations written as a number of seconds (``0.4s``, ``12 s``)
_ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?")
_GIT = re.compile(r"\b[0-9a-f]{40}\b")
_JUNIT_TIME = re.compile(r'\btime="[0-9.]+"')
_SECONDS = re.compile(r"\b\d+(\.\d+)? ?s\b")


def compared_files(run_dir: Path) -> list[Path]:
    """``run.json``, every samples file and each report of :data:`REPORTS` present in a run
    folder, relative to it."""
    reports = [Path(r) for r in REPORTS if (run_dir / r).is_file()]
    samples = [p.relative_to(run_dir) for p in (run_dir / "samples").rglob("*.jsonl")]
    return sorted([Path("run.json"), *reports, *samples])


def normalise_report(text: str, root: Path) -> str:
    """A report's text (Markdown, JUnit XML, HTML) with clock, commit, process, port and
    temporary-path values replaced. Crude by design: any number of seconds is replaced, so a
    report difference only in a duration is not seen."""
    text = text.replace(str(root), "<root>")
    for pattern, by in ((_ISO, "<time>"), (_GIT, "<git>"), (_JUNIT_TIME, 'time="<n>"'), (_SECONDS, "<n>s"),
                        (_PID, "pid <n>")):
        text = pattern.sub(by, text)
    return _PORT.sub(r"\1<port>", text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", type=Path, default=None, help="the tree to compare against (a git worktree)")
    ap.add_argument("--new", type=Path, default=HERE, help="the tree under test (default: this one)")
    ap.add_argument("--compare-only", type=Path, default=None,
                    help="compare the run folders a previous invocation kept in this folder, running nothing")
    args = ap.parse_args()
    if args.ref is None and args.compare_only is None:
        ap.error("--ref is required unless --compare-only is given")
    root = args.compare_only or Path(tempfile.mkdtemp(prefix="record-identity-"))
    total = raw_same = norm_same = mismatched_codes = 0
    for name, (ref_env, spec_env, extra) in SCENARIOS.items():
        work = root / name
        dirs = [work / "results-ref", work / "results-new"]
        if args.compare_only and not all((d / "r" / "run.json").is_file() for d in dirs):
            print(f"{name}: not in {root}, skipped")
            continue
        if args.compare_only:
            codes = [json.loads((d / "r" / "run.json").read_text())["exit_code"] for d in dirs]
        else:
            work.mkdir()
            cfg = work / "fake.yaml"
            cfg.write_text(config_text(ref_env, spec_env, extra))
            codes = []
            for tree, folder in zip((args.ref, args.new), dirs):
                codes.append(run_tree(tree.resolve(), cfg, work / "results"))
                shutil.move(work / "results", folder)
        a, b = (d / "r" for d in dirs)
        names = sorted(set(compared_files(a)) | set(compared_files(b)))
        diffs = []
        for rel in names:
            total += 1
            ta = (a / rel).read_bytes() if (a / rel).exists() else None
            tb = (b / rel).read_bytes() if (b / rel).exists() else None
            if ta == tb:
                raw_same += 1
                norm_same += 1
                continue
            if ta is not None and tb is not None:
                norm = normalise_report if rel.name in REPORTS else normalise
                na = norm(ta.decode(), root)
                nb = norm(tb.decode(), root)
                if na == nb:
                    norm_same += 1
                    continue
            diffs.append(str(rel))
        print(f"{name}: exit {codes[0]} (ref) / {codes[1]} (new); {len(names)} file(s); differing after "
              f"normalising: {', '.join(diffs) or 'none'}")
        mismatched_codes += codes[0] != codes[1]
    print(f"files compared: {total}; byte-identical: {raw_same}; identical after normalising clock, pids, "
          f"ports and paths: {norm_same}; folder kept: {root}")
    return 0 if norm_same == total and not mismatched_codes else 1


if __name__ == "__main__":
    sys.exit(main())
