"""tests/fake_numerics.py, the fake server's GPU-like numerics (``EVALRUN_NUMERICS_NOISE``):
the same seed and batch shape reproduce, another seed or shape differs on some questions,
a flip happens only where the clean model's margin is small, answers flip both ways, and
acceptance varies by request and by run. Pure functions: unit tier."""

from __future__ import annotations

from .. import fake_numerics as fn

PROMPTS = [f"Question: What is {i % 10} plus {(3 * i) % 10}? ({i})\nAnswer:" for i in range(400)]
LEVEL = 0.02  # tests/fake_numerics.py FAKE_GPU_LEVEL: the fake's gpu level


def _run(seed: int, tokens: int = 1, level: float = LEVEL) -> list[fn.NoisyCompletion]:
    return [fn.complete(p, level, seed, fn.Shape(tokens, 0)) for p in PROMPTS]


def _clean(p: str) -> list[int]:
    """The completion with a perturbation far below every margin (1e-12 nats)."""
    return fn.complete(p, 1e-12, 0, fn.Shape(1, 0)).ids


def test_the_same_seed_and_shape_reproduce_and_another_seed_or_shape_differs():
    a = _run(1)
    assert [x.ids for x in _run(1)] == [x.ids for x in a]
    differ_seed = sum(x.ids != y.ids for x, y in zip(a, _run(2)))
    differ_shape = sum(x.ids != y.ids for x, y in zip(a, _run(1, tokens=3)))
    # a small share: about a tenth of the questions (the module's TIE_SHARE and margins)
    assert 0 < differ_seed < len(PROMPTS) // 4 and 0 < differ_shape < len(PROMPTS) // 4


def test_flips_happen_only_where_the_clean_margin_is_small():
    for seed in (1, 2, 3):
        for p, c in zip(PROMPTS, _run(seed)):
            clean = _clean(p)
            if c.ids == clean:
                continue
            at = next(i for i, (x, y) in enumerate(zip(c.ids, clean)) if x != y)
            key = fn.hashlib.sha256(p.encode()).hexdigest()[:16]
            margin = fn.margins(key, ())[at]
            # the first flip is on the clean branch, at a near tie (margin < TIE_MARGIN_MAX),
            # and the gap the model reports there is small too
            assert margin < fn.TIE_MARGIN_MAX, (p, at, margin)
            assert c.steps[at].gap < fn.TIE_MARGIN_MAX + 8 * LEVEL


def test_accuracy_flips_in_both_directions_across_seeds():
    base = _run(0)
    lost = gained = 0
    for seed in range(1, 8):
        for x, y in zip(base, _run(seed)):
            lost += x.right and not y.right
            gained += y.right and not x.right
    assert lost > 0 and gained > 0


def test_the_right_answer_of_the_synthetic_templates():
    assert fn.right_answer("Q: What is 8 minus 6?\nA: 2\nQ: What is 3 plus 9?") == 12
    assert fn.right_answer("Tom has 3 apples and gets 5 more. How many apples does Tom have?") == 8
    assert fn.right_answer("Mia has 7 pens and gives away 4. How many pens does Mia have left?") == 3
    assert fn.right_answer("Janet's ducks lay 16 eggs per day.") == 5


def test_acceptance_varies_by_request_and_by_run_and_respects_positions():
    def length(seed: int) -> float:
        per = [fn.accepted_per_position(p, seed, 1, 2) for p in PROMPTS]
        for a in per:
            assert a[0] >= a[1] and a[0] <= fn.DRAFTS  # a position only after every earlier one
        return 1 + sum(sum(a) for a in per) / (fn.DRAFTS * len(PROMPTS))

    per_request = {sum(fn.accepted_per_position(p, 1, 1, 2)) for p in PROMPTS}
    assert len(per_request) > 3  # requests differ
    assert fn.accepted_per_position(PROMPTS[0], 1, 1, 2) == fn.accepted_per_position(PROMPTS[0], 1, 1, 2)
    assert len({round(length(s), 6) for s in range(4)}) == 4  # runs differ
