"""``--resume`` on the real engine: run a config, SIGKILL evalrun once its first variant's
samples are all on disk and the next variant's server is starting, then repeat the
command with ``--resume`` and report what was reused.

Evidence that the first variant's server was not started again: its server log and
PID file are the killed attempt's (same bytes), its recorded ``server.pid`` is the
killed attempt's, and the resumed record lists it in ``resumed.variants_reused``.

Usage (from a worktree root; it starts real vLLM servers, so under the shared lock)::

    flock /tmp/evalrun-engine.lock .venv/bin/python bench/resume_engine.py \\
        --config models-cpu.txt --variant reference --variant spec_sync --data-dir DIR
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--variant", action="append", required=True, help="at least two, the first is the one killed after")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--results-dir", type=Path, default=None)
    args = ap.parse_args()
    results = args.results_dir or Path(tempfile.mkdtemp(prefix="resume-engine-"))
    cmd = [sys.executable, "-m", "harness.cli", "--config", args.config, "--results-dir", str(results),
           "--run-id", "r", "--no-baseline", "--no-preflight-cache"]
    for v in args.variant:
        cmd += ["--variant", v]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    run_dir = results / "r"
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first, second = args.variant[0], args.variant[1]
    while proc.poll() is None:  # the second variant's server log appears once the first is judged
        if list(run_dir.glob(f"logs/*/{second}.log")):
            break
        time.sleep(0.5)
    if proc.poll() is not None:
        print(f"evalrun ended (exit {proc.returncode}) before the second variant started: nothing to kill")
        return 1
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_s = time.monotonic() - t0
    time.sleep(5)  # the servers follow evalrun (parent-death signal, group watchdog)
    earlier = json.loads((run_dir / "run.json").read_text())
    logs = {p: _sha(p) for p in run_dir.glob(f"logs/*/{first}.*")}
    pids = {c["name"]: c["variants"][first]["server"]["pid"] for c in earlier["configs"] if first in c["variants"]}
    t1 = time.monotonic()
    code = subprocess.run([*cmd, "--resume", str(run_dir)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True).returncode
    resumed_s = time.monotonic() - t1
    rec = json.loads((run_dir / "run.json").read_text())
    same_logs = all(p.exists() and _sha(p) == h for p, h in logs.items())
    same_pids = all(c["variants"][first]["server"]["pid"] == pids[c["name"]] for c in rec["configs"] if c["name"] in pids)
    print(f"killed attempt: status {earlier['status']} after {killed_s:.0f} s (SIGKILL while {second} started)")
    print(f"resumed run: exit {code}, outcome {rec['status']}/{rec['passed']}, {resumed_s:.0f} s")
    print(f"resumed: reused {rec['resumed']['variants_reused']}, rerun {rec['resumed']['variants_rerun']}")
    print(f"{first}: server log and pid file unchanged: {same_logs}; recorded server pid unchanged: {same_pids}")
    print(f"gates: {sum(g['passed'] is True for g in rec['configs'][0]['gates'])} passed, "
          f"{sum(g['passed'] is False for g in rec['configs'][0]['gates'])} failed, "
          f"{len(rec['configs'][0]['gates'])} in all; folder {run_dir}")
    return 0 if code == 0 and same_logs and same_pids and rec["resumed"]["variants_reused"] else 1


if __name__ == "__main__":
    sys.exit(main())
