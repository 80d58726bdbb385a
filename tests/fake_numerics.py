"""GPU-like numerics for the FAKE vLLM server (tests/fake_vllm.py): the fake model under
``EVALRUN_NUMERICS_NOISE`` (:mod:`harness.faults.noise`, the setting's one home).

A clean GPU build is noisy in a particular way (vLLM's batch-invariance page,
``VLLM_BATCH_INVARIANT``): a token's logits depend on the shape of the batch it was computed
in, so where the model's top two choices are nearly tied the choice flips, the completion
continues differently from there and sometimes reaches another answer, a rerun differs from
itself, and acceptance varies by request and by run. The real CPU engine gets this from
evalrun's vLLM plugin; the fake gets it from this module, a pure function of its inputs, so
fast tests can run many nights of it.

The fake model (everything a pure function of the prompt, the branch taken and the step):

* a completion is :data:`LENGTH` token ids. At each step the model has a top choice and a
  runner-up ``margin`` nats below it. On the first (clean) branch a share :data:`TIE_SHARE`
  of the questions has one near tie, at a step drawn per question, with a margin drawn
  uniformly in ``[0, TIE_MARGIN_MAX)``; every other margin is confident
  (``CONFIDENT_MARGIN`` + an exponential draw of mean 2 nats);
* each of the two logits gets a perturbation ~ N(0, level) (so their difference has
  standard deviation ``level * sqrt(2)``), drawn from the server start's seed, the step's
  batch shape (tokens in the step: requests in flight x (1 + speculative tokens) for a
  verifying variant, requests in flight for a decoding one), the row (the request's place
  among those in flight), the step and the row's content (the prompt: a reduction's rounding
  depends on the values reduced). The runner-up is taken where ``margin + perturbation < 0``:
  only where the margin is small;
* after a flip the completion is on another branch: its later tokens are another draw, and
  with probability :data:`ANSWER_CHANGE` its answer toggles between right and wrong (so
  accuracy flips in both directions). A branch has its own near tie with the same share;
* the right answer is the synthetic arithmetic task's (``What is 8 minus 6?`` and its
  story templates, the last one in the prompt) or 5 for any other prompt; the clean branch
  answers it right on a share :data:`RIGHT_SHARE` of the questions;
* acceptance of a speculative variant: per request a probability
  ``p = sigmoid(mu_q + run + eps)`` that each draft position is accepted given the ones
  before it, with ``mu_q ~ N(ACCEPT_MU, ACCEPT_QUESTION_SD)`` fixed per question (acceptance
  clusters by request), ``run ~ N(0, ACCEPT_RUN_SD)`` per server start and
  ``eps ~ N(0, ACCEPT_REQUEST_SD)`` per request; :data:`DRAFTS` drafts per request.

The figures (shares, margins, spreads) are the fake's, chosen so that at the ``gpu`` level
about a tenth of the questions diverge between two runs; the real engine's are measured
(docs/false-alarms.md).
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from dataclasses import dataclass

from harness.faults.noise import GPU_LEVEL_NATS

#: completion length in tokens under noise
LENGTH = 8
#: share of questions (per branch) with one near tie
TIE_SHARE = 0.4
#: a near tie's margin is drawn uniformly below this (nats)
TIE_MARGIN_MAX = 0.06
#: every other step's margin is at least this (nats)
CONFIDENT_MARGIN = 1.0
#: probability that a flip leads to the other answer (right <-> wrong)
ANSWER_CHANGE = 0.35
#: share of questions the clean branch answers right
RIGHT_SHARE = 0.85
#: drafts per request of a speculative variant
DRAFTS = 4
#: acceptance model (module docstring), on the logit scale
ACCEPT_MU, ACCEPT_QUESTION_SD, ACCEPT_RUN_SD, ACCEPT_REQUEST_SD = 1.0, 0.8, 0.15, 0.1

_ARITH = re.compile(r"What is (\d+) (plus|minus) (\d+)\?|has (\d+) \w+ and (gets|gives away) (\d+)")


@dataclass(frozen=True)
class Shape:
    """The batch a request's steps were computed in: ``tokens`` in the step, the request's
    ``row`` in it."""

    tokens: int
    row: int


@dataclass(frozen=True)
class Step:
    """One emitted step: the token taken, the other candidate, and the gap between them
    as the (perturbed) model saw it, in nats (>= 0)."""

    token: int
    other: int
    gap: float


@dataclass(frozen=True)
class NoisyCompletion:
    """A completion under noise: its steps, its answer and whether the answer is right."""

    steps: tuple[Step, ...]
    answer: int
    right: bool

    @property
    def ids(self) -> list[int]:
        """The completion's token ids."""
        return [s.token for s in self.steps]

    @property
    def text(self) -> str:
        """The completion's text (GSM8K's ``#### N`` format)."""
        return f" {self.answer} #### {self.answer}"


def _rng(*parts: object) -> random.Random:
    """A generator seeded by ``parts`` (stable across processes: SHA-256 of their text)."""
    return random.Random(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest())


def right_answer(prompt: str) -> int:
    """The right answer of ``prompt``: the last synthetic arithmetic question in it, else 5."""
    found = list(_ARITH.finditer(prompt))
    if not found:
        return 5
    g = found[-1].groups()
    a, op, b = (int(g[0]), g[1], int(g[2])) if g[0] is not None else (int(g[3]), g[4], int(g[5]))
    return a + b if op in ("plus", "gets") else a - b


def margins(key: str, branch: tuple[int, ...]) -> list[float]:
    """The margins (nats) of the :data:`LENGTH` steps of question ``key`` on ``branch`` (the
    steps where it flipped so far); a near tie only after the branch's last flip."""
    r = _rng("margins", key, branch)
    out = [CONFIDENT_MARGIN + r.expovariate(0.5) for _ in range(LENGTH)]
    start = branch[-1] + 1 if branch else 0
    if r.random() < TIE_SHARE and start < LENGTH:
        out[r.randrange(start, LENGTH)] = r.uniform(0.0, TIE_MARGIN_MAX)
    return out


def _tokens(key: str, branch: tuple[int, ...], i: int) -> tuple[int, int]:
    """The top choice and the runner-up at step ``i`` of ``branch`` (ids 20..999, distinct)."""
    r = _rng("tokens", key, branch, i)
    top = r.randrange(20, 1000)
    other = r.randrange(20, 999)
    return top, other + (other >= top)


#: the fake's own ``gpu`` level (nats on the fake's margin scale, MARGIN_* above): the real
#: engine's GPU_LEVEL_NATS is calibrated to the tiny model's wide margins (docs/numerics.md),
#: the fake's margins are narrow, so a level is mapped onto the fake's scale by :func:`fake_level`
FAKE_GPU_LEVEL = 0.02


def fake_level(level_nats: float) -> float:
    """``level_nats`` (the setting's level, :func:`harness.faults.noise.level_from_env`) on the
    fake's margin scale: ``gpu`` (:data:`harness.faults.noise.GPU_LEVEL_NATS`) is
    :data:`FAKE_GPU_LEVEL`, any other level in proportion."""
    return level_nats * FAKE_GPU_LEVEL / GPU_LEVEL_NATS


def perturbation(level: float, seed: int, shape: Shape, step: int, key: str) -> float:
    """The perturbation of the margin at ``step``: the runner-up's N(0, level) minus the top
    choice's, drawn from the seed, the batch shape, the row, the step and the row's content."""
    r = _rng("noise", seed, shape.tokens, shape.row, step, key)
    return r.gauss(0.0, level) - r.gauss(0.0, level)


def complete(prompt: str, level: float, seed: int, shape: Shape) -> NoisyCompletion:
    """The fake model's greedy completion of ``prompt`` under noise ``level`` (nats, > 0)."""
    key = hashlib.sha256(prompt.encode()).hexdigest()[:16]
    branch: tuple[int, ...] = ()
    ms = margins(key, branch)
    steps = []
    for i in range(LENGTH):
        top, other = _tokens(key, branch, i)
        seen = ms[i] + perturbation(level, seed, shape, i, key)
        if seen < 0:  # the runner-up wins: another branch from here
            branch += (i,)
            ms = margins(key, branch)
            top, other = other, top
        steps.append(Step(top, other, abs(seen)))
    gold = right_answer(prompt)
    right = _rng("right", key).random() < RIGHT_SHARE
    for flip in branch:
        if _rng("answer", key, branch[:branch.index(flip) + 1]).random() < ANSWER_CHANGE:
            right = not right
    return NoisyCompletion(tuple(steps), gold if right else gold + 1, right)


def top_logprobs(c: NoisyCompletion) -> dict[int, dict[int, float]]:
    """Per step, the two candidates' log-probabilities as the model saw them (for the
    fake's OpenAI ``logprobs``): the token taken at ``-log(1 + exp(-gap))``, the other
    ``gap`` nats below it."""
    out = {}
    for i, s in enumerate(c.steps):
        top = -math.log1p(math.exp(-s.gap))
        out[i] = {s.token: top, s.other: top - s.gap}
    return out


def accepted_per_position(prompt: str, seed: int, npass: int, k: int) -> list[int]:
    """Accepted draft tokens per position (``k`` positions, non-increasing) of one request's
    :data:`DRAFTS` drafts (the module docstring's acceptance model)."""
    key = hashlib.sha256(prompt.encode()).hexdigest()[:16]
    mu = _rng("accept", key).gauss(ACCEPT_MU, ACCEPT_QUESTION_SD)
    run = _rng("accept-run", seed).gauss(0.0, ACCEPT_RUN_SD)
    r = _rng("accept-request", seed, key, npass)
    p = 1.0 / (1.0 + math.exp(-(mu + run + r.gauss(0.0, ACCEPT_REQUEST_SD))))
    out = [0] * k
    for _ in range(DRAFTS):
        for i in range(k):
            if r.random() >= p:
                break
            out[i] += 1
    return out


def prompt_logprobs(prompt: str, ids: list[int]) -> list[dict[str, dict[str, object]] | None] | None:
    """vLLM's ``prompt_logprobs`` of the fake model's greedy completion ids ``ids`` after
    ``prompt``, without noise (the reference's server scoring a prefix): at each step the
    branch is followed as the ids take it; the top choice has ``-log(1 + exp(-margin))``
    (rank 1), the runner-up ``margin`` nats below (rank 2), any other id -30 (rank 3, and the
    later steps are off the model: -30 too). None when no id is one of the model's (20..999):
    not a greedy completion of this model."""
    if not any(20 <= t < 1000 for t in ids):
        return None
    key = hashlib.sha256(prompt.encode()).hexdigest()[:16]
    branch: tuple[int, ...] = ()
    out: list[dict[str, dict[str, object]] | None] = [None]
    off = False
    for i, t in enumerate(ids):
        lp, rank = -30.0, 3
        if not off and i < LENGTH:
            top, other = _tokens(key, branch, i)
            m = margins(key, branch)[i]
            if t in (top, other):
                lp, rank = -math.log1p(math.exp(-m)) - (m if t == other else 0.0), 1 if t == top else 2
                branch += (i,) if t == other else ()
            else:
                off = True
        out.append({str(t): {"logprob": lp, "rank": rank, "decoded_token": "x"}})
    return out
