"""Divergences judged by the reference's distribution, on the REAL vLLM CPU engine.

The self-check's run (configs/selfcheck-cpu.yaml, shared with tests/orchestration/
test_selfcheck.py through the session fixture ``selfcheck_run``): its two state faults
(``state-rollback``; ``async-stale-accepted`` with 4 speculative tokens and async
scheduling) must fail output match on unexplained divergences, every gap recomputed here
from the reference's samples on disk. The clean variants' divergences (gsm8k/test/2 in
bf16) are judged the same way on the CPU list's run (tests/e2e/test_e2e_engine.py). A
second test checks that asking for log-probabilities changes no greedy token.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.engine.session import VariantSession
from harness.models.resolve import resolve_model
from harness.report.progress import Progress
from harness.tasks import prepare_task

from ..conftest import vllm_available

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def div_run(selfcheck_run):
    """The self-check's run (tests/conftest.py ``selfcheck_run``) as ``(proc, record, run folder)``."""
    proc, run_dir = selfcheck_run
    assert (run_dir / "run.json").is_file(), proc.stderr[-4000:]
    return proc, json.loads((run_dir / "run.json").read_text()), run_dir


def samples(run_dir: Path, rec: dict, variant: str, task: str) -> dict[str, dict]:
    rel = rec["configs"][0]["variants"][variant]["tasks"][task]["samples"]
    return {s["question_id"]: s for s in map(json.loads, (run_dir / rel).read_text().splitlines())}


def own_verdicts(ref: dict, cand: dict, near_tie: float) -> dict[str, tuple[int, float, bool]]:
    """Per diverging question: (position, gap, explained), from the samples alone."""
    out = {}
    for q, r in ref.items():
        a, b = r["token_ids"], cand[q]["token_ids"]
        if a == b:
            continue
        d = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        if d >= len(b) or d >= len(a):
            out[q] = (d, float("inf"), False)
            continue
        top = {t: lp for t, lp in r["top_logprobs"][d]}
        gap = top[a[d]] - top[b[d]] if b[d] in top else top[a[d]] - min(top.values())
        out[q] = (d, gap, b[d] in top and gap <= near_tie)
    return out


def test_runs_and_records_v1_runner_for_every_variant(div_run):
    proc, rec, _ = div_run
    for name, v in rec["configs"][0]["variants"].items():
        assert v["model_runner"]["runner"] == "v1", (name, v["model_runner"])
        assert v["model_runner"]["source"] == "evalrun plugin"
    ve = [g for g in rec["configs"][0]["gates"] if g["kind"] == "variant_effective"]
    assert ve and all(g["passed"] is True for g in ve), [g["detail"] for g in ve]


@pytest.mark.parametrize("fault_variant", ["spec_state_rollback", "spec_async_stale_accepted"])
def test_state_faults_fail_on_unexplained_divergences(div_run, fault_variant):
    proc, rec, run_dir = div_run
    c = rec["configs"][0]
    assert c["variants"][fault_variant]["plugin"]["exercised"] is True
    ref, cand = samples(run_dir, rec, "reference", "arith"), samples(run_dir, rec, fault_variant, "arith")
    mine = own_verdicts(ref, cand, 0.5)
    comp = next(x for x in c["comparisons"] if x["candidate"] == fault_variant and x["task"] == "arith")
    dv = comp["divergence"]
    got = {d["question_id"]: d for d in dv["divergences"]}
    assert set(got) == set(mine)
    for q, (pos, gap, explained) in mine.items():
        assert got[q]["position"] == pos and (got[q]["verdict"] == "explained") == explained
        if gap != float("inf"):
            assert got[q]["gap_nats"] == pytest.approx(gap, abs=1e-5)
    unexplained = sum(not e for _, _, e in mine.values())
    gate = next(g for g in c["gates"] if g["id"].endswith(f"reference->{fault_variant}/arith/min_output_match"))
    print(f"\n{fault_variant}: {len(mine)} divergent of {len(ref)}, {unexplained} unexplained; "
          f"gaps {sorted(round(g, 2) for _, g, _ in mine.values())}; gate: {gate['detail'][:300]}")
    assert unexplained == dv["unexplained"] and gate["passed"] is False, gate["detail"]
    assert gate["observed"] == pytest.approx((len(ref) - unexplained) / len(ref))


def test_logprobs_do_not_change_greedy_token_ids(tmp_path, gsm8k_dir):
    if not vllm_available():
        pytest.skip("vLLM is not installed in this interpreter")

    cfg = load_config(REPO / "configs" / "tiny-qwen3next-mtp-cpu.yaml")
    vp = next(v for v in build_plan([cfg]).configs[0].variants if v.name == "reference")
    model = resolve_model(cfg.model, Progress(quiet=True))
    argv = [model if x == cfg.model else x for x in vp.argv]
    with VariantSession(vp.id, argv, dict(vp.env), tmp_path / "server.log", 600, 600, 8, speculative=False) as s:
        for name, spec in cfg.tasks.items():
            pt = prepare_task(name, spec, gsm8k_dir, False, base_dir=REPO / "configs")
            plain = s.run_task(pt.requests, spec.max_tokens, spec.temperature, spec.seed, pt.stop)
            asked = s.run_task(pt.requests, spec.max_tokens, spec.temperature, spec.seed, pt.stop, logprobs=5)
            assert all(c.ok for c in plain.completions + asked.completions)
            assert [c.token_ids for c in plain.completions] == [c.token_ids for c in asked.completions]
            assert all(c.top_logprobs is None for c in plain.completions)
            for c in asked.completions:
                assert len(c.top_logprobs) == len(c.token_ids)
                # greedy: the sampled token is the reference's most likely one (ties aside)
                assert all(pos[0][1] - dict(pos)[t] <= 1e-6 for pos, t in zip(c.top_logprobs, c.token_ids))
