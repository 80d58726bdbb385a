"""The sampled verdict's scoring on the REAL vLLM CPU engine: one non-speculative server of
configs/tiny-qwen3next-mtp-cpu-sampled.yaml (about 60 s).

The verdict reads the target's log-likelihood of each sampled completion through prompt
log-probabilities (harness/engine/client.py ``target_logprobs``). Checked here against a
value the engine computes another way: the log-probabilities it returns WHILE sampling the
same completion (``logprobs: 1``, temperature 1.0, so raw and processed log-probabilities
agree) on the same non-speculative server; prefill and decode run different kernels in
bf16, so they agree to a tolerance, not exactly. And the requests of the config's task send
each question its own seed (``seed_mode: per_run``), kept on every completion.

The config's two verdicts (the null comparison passes, spec_sync fails with its statistic)
need three server starts (minutes): they are measured by bench/sampled_verdict.py and
the CPU list's run (docs/benchmarks.md, "Sampled verdict"), not here.
"""

from __future__ import annotations

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


def test_prompt_logprob_scoring_matches_the_engines_own_sampling_logprobs(tmp_path):
    if not vllm_available():
        pytest.skip("vLLM is not installed in this interpreter")
    cfg = load_config(REPO / "configs" / "tiny-qwen3next-mtp-cpu-sampled.yaml")
    vp = next(v for v in build_plan([cfg]).configs[0].variants if v.name == "reference")
    spec = cfg.tasks["arith"].for_run("e2e")  # per_run seeds need a run id
    model = resolve_model(cfg.model, Progress(quiet=True))
    argv = [model if x == cfg.model else x for x in vp.argv]
    pt = prepare_task("arith", spec.model_copy(update={"num_questions": 24}), None, False, base_dir=REPO / "configs")
    with VariantSession(vp.id, argv, dict(vp.env), tmp_path / "server.log", 600, 600, 8, speculative=False) as s:
        out = s.run_task(pt.requests, spec.max_tokens, spec.temperature,
                         lambda q: spec.request_seed(q, 0), pt.stop, logprobs=1)
        assert all(c.ok for c in out.completions), [c.error for c in out.completions if not c.ok]
        prompts = {r.question_id: r.prompt for r in pt.requests}
        scored = s.score_completions([(c.request_id, prompts[c.request_id], c.token_ids or ())
                                      for c in out.completions])
    seeds = [c.seed for c in out.completions]
    assert seeds == [spec.request_seed(r.question_id) for r in pt.requests] and len(set(seeds)) == len(seeds)
    for c, got in zip(out.completions, scored):
        assert not isinstance(got, str), got
        total, n = sum(got.logprobs), len(got.logprobs)
        assert all(isinstance(r, int) and r >= 1 for r in got.ranks) and all(isinstance(x, str) for x in got.pieces)
        sampled = [dict(pos)[t] for pos, t in zip(c.top_logprobs or (), c.token_ids or ())]
        assert n == len(sampled) == len(c.token_ids or ())
        # same model, same tokens: the per-token means agree to bf16 kernel differences
        assert abs(total / max(n, 1) - sum(sampled) / max(n, 1)) < 0.05, (c.request_id, total, sum(sampled))
