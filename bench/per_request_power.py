"""False-alarm rate and power of the per-request acceptance gates (``late_acceptance_drop``,
``zero_acceptance_share``, ``paired_acceptance_drop``) on simulated passes, using the gates' own
tests (their p-value functions and limits as the docs state them).

The acceptance model is the fake server's under ``EVALRUN_NUMERICS_NOISE``
(tests/fake_numerics.py): each question's first-draft acceptance is
``logistic(N(1.0, 0.8) + run N(0, 0.15) + request N(0, 0.1))``, and each verify step accepts
drafts in order, each with that probability, up to ``k``. A GSM8K pass is 1319 questions; the
CPU list's arith task 100. Run: ``python bench/per_request_power.py`` (about a minute).
"""

from __future__ import annotations

import math
import random

from harness.analysis.gatekinds.late_acceptance_drop import ALPHA as LATE_ALPHA
from harness.analysis.gatekinds.late_acceptance_drop import MIN_STEPS, halves, late_drop_p
from harness.analysis.gatekinds.paired_acceptance_drop import ALPHA as PAIRED_ALPHA
from harness.analysis.gatekinds.paired_acceptance_drop import paired_drop_p
from harness.analysis.gatekinds.zero_acceptance_share import ALPHA as ZERO_ALPHA
from harness.analysis.gatekinds.zero_acceptance_share import zero_share_p

K, STEPS, REPS = 2, 40, 200
LATE_LIMIT, ZERO_LIMIT, PAIRED_LIMIT = 0.2, 0.05, 0.1


def request(rng: random.Random, mu: float, run: float, steps: int, shift: float = 0.0) -> list[int]:
    p = 1 / (1 + math.exp(-(mu + run + rng.gauss(0, 0.1) + shift)))
    out = []
    for _ in range(steps):
        j = 0
        while j < K and rng.random() < p:
            j += 1
        out.append(j)
    return out


def one_pass(rng: random.Random, mus: list[float], collapse: float = 0.0, zero: float = 0.0,
             shift: float = 0.0) -> list[list[int]]:
    run = rng.gauss(0, 0.15)
    reqs = []
    for mu in mus:
        s = request(rng, mu, run, rng.randint(STEPS // 2, 2 * STEPS), shift)
        if rng.random() < collapse:  # acceptance dies from the middle of the request on
            s = s[: len(s) // 2] + [0] * (len(s) - len(s) // 2)
        if rng.random() < zero:
            s = [0] * len(s)
        reqs.append(s)
    return reqs


def late_fails(reqs: list[list[int]]) -> bool:
    parts = [halves(tuple(s), (K,) * len(s)) for s in reqs if len(s) >= MIN_STEPS]
    ed, ld = sum(h[3] for h in parts), sum(h[5] for h in parts)
    drop = sum(h[2] for h in parts) / ed - sum(h[4] for h in parts) / ld
    return late_drop_p([h[1] - h[0] for h in parts], LATE_LIMIT) < LATE_ALPHA and drop > LATE_LIMIT


def zero_fails(reqs: list[list[int]]) -> bool:
    big = [s for s in reqs if len(s) >= MIN_STEPS]
    z = sum(1 for s in big if not any(s))
    return zero_share_p(z, len(big), ZERO_LIMIT) < ZERO_ALPHA and z / len(big) > ZERO_LIMIT and z < len(big)


def paired_fails(a: list[list[int]], b: list[list[int]]) -> bool:
    diffs = [sum(y) / (K * len(y)) - sum(x) / (K * len(x)) for x, y in zip(a, b)]
    return paired_drop_p(diffs, PAIRED_LIMIT) < PAIRED_ALPHA and -sum(diffs) / len(diffs) > PAIRED_LIMIT


def rate(n: int, fails, make) -> float:
    rng = random.Random(0)
    hits = 0
    for _ in range(REPS):
        mus = [rng.gauss(1.0, 0.8) for _ in range(n)]
        hits += fails(*make(rng, mus))
    return hits / REPS


def main() -> None:
    for n in (100, 1319):
        print(f"n = {n} requests, {REPS} simulated passes each")
        print(f"  late_acceptance_drop false alarms (clean): {rate(n, late_fails, lambda r, m: (one_pass(r, m),)):.3f}")
        for f in (0.1, 0.2, 0.3, 0.5):
            print(f"  late_acceptance_drop power, {f:.0%} of requests collapse mid-output: "
                  f"{rate(n, late_fails, lambda r, m, f=f: (one_pass(r, m, collapse=f),)):.3f}")
        clean = rate(n, zero_fails, lambda r, m: (one_pass(r, m),))
        print(f"  zero_acceptance_share false alarms (clean): {clean:.3f}")
        for z in (0.08, 0.1, 0.15):
            print(f"  zero_acceptance_share power, {z:.0%} of requests never accept: "
                  f"{rate(n, zero_fails, lambda r, m, z=z: (one_pass(r, m, zero=z),)):.3f}")
        print("  paired_acceptance_drop false alarms (clean, two passes): "
              f"{rate(n, paired_fails, lambda r, m: (one_pass(r, m), one_pass(r, m))):.3f}")
        for sh in (-0.6, -0.8, -1.0):
            print(f"  paired_acceptance_drop power, candidate logit shift {sh}: "
                  f"{rate(n, paired_fails, lambda r, m, sh=sh: (one_pass(r, m), one_pass(r, m, shift=sh))):.3f}")


if __name__ == "__main__":
    main()
