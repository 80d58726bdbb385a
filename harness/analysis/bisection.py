"""The search of a bisection over engine builds, and each step's verdict, as pure functions.

Builds are ordered oldest first, indices ``0 .. n-1``. The ends are judged first: build
0 must be ``good`` and build ``n-1`` ``bad``. A build is ``bad`` when at least one of
the gates that failed at the bad end fails there too (the same gate ids), ``good`` when
every one of them passes (gates that did not fail at the bad end do not count, so an
unrelated flaky gate does not steer the search), and ``skip`` when one of them could not
be judged and none failed (as ``git bisect skip``: the search goes around it).

:func:`next_probe` says which build to evaluate next from the verdicts so far (the
middle of the range still in doubt, skipped builds avoided), :func:`first_bad` what the
verdicts so far prove. Worst case after the two ends: ``ceil(log2(n - 1))`` probes, as
many as ``n - 1`` possible answers (the first bad is one of builds ``1 .. n-1``) need
for yes/no questions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["Verdict", "StepJudgement", "Outcome", "step_verdict", "next_probe", "first_bad"]

#: One build's verdict in the search.
Verdict = Literal["good", "bad", "skip"]


@dataclass(frozen=True)
class StepJudgement:
    """One build's verdict and why.

    Attributes:
        verdict: ``good``, ``bad`` or ``skip``.
        failed: gate ids of the bad end's failures that failed here (sorted).
        passed: gate ids of the bad end's failures that passed here.
        not_judged: gate ids of the bad end's failures not judged here (absent or NOT RUN).
        other_failures: gate ids that failed here but not at the bad end (ignored).
    """

    verdict: Verdict
    failed: tuple[str, ...]
    passed: tuple[str, ...]
    not_judged: tuple[str, ...]
    other_failures: tuple[str, ...]


def step_verdict(bad_end_failures: Iterable[str], gates: Mapping[str, bool | None]) -> StepJudgement:
    """Judge one build by the gates that failed at the bad end.

    Args:
        bad_end_failures: gate ids that failed at the bad end (non-empty).
        gates: this build's gate id -> passed (True / False, None = not judged).

    Returns:
        ``bad`` when one of ``bad_end_failures`` failed here, else ``skip`` when one of
        them was not judged (or is missing), else ``good``.

    Raises:
        ValueError: ``bad_end_failures`` is empty (nothing to bisect by).
    """
    wanted = sorted(set(bad_end_failures))
    if not wanted:
        raise ValueError("no gate failed at the bad end: nothing to bisect by")
    failed = tuple(g for g in wanted if gates.get(g) is False)
    passed = tuple(g for g in wanted if gates.get(g) is True)
    not_judged = tuple(g for g in wanted if gates.get(g) is None)
    others = tuple(sorted(g for g, ok in gates.items() if ok is False and g not in wanted))
    verdict: Verdict = "bad" if failed else ("skip" if not_judged else "good")
    return StepJudgement(verdict, failed, passed, not_judged, others)


@dataclass(frozen=True)
class Outcome:
    """What the verdicts so far prove.

    Attributes:
        first_bad: index of the first bad build, or None while undecided or when skipped
            builds leave it open.
        last_good: the newest good build before the first bad candidate.
        candidates: indices that may still be the first bad (``last_good+1 .. first bad
            candidate``); one item once found.
        done: no build left to evaluate.
    """

    first_bad: int | None
    last_good: int
    candidates: tuple[int, ...]
    done: bool


def _bounds(n: int, verdicts: Mapping[int, Verdict]) -> tuple[int, int]:
    if n < 2:
        raise ValueError(f"a bisection needs at least two builds, got {n}")
    if verdicts.get(0) != "good" or verdicts.get(n - 1) != "bad":
        raise ValueError("the ends are not judged good (oldest) and bad (newest)")
    bad = min(i for i, v in verdicts.items() if v == "bad")
    good = max(i for i, v in verdicts.items() if v == "good" and i < bad)
    return good, bad


def next_probe(n: int, verdicts: Mapping[int, Verdict]) -> int | None:
    """The build to evaluate next, or None when nothing is left to evaluate.

    Args:
        n: number of builds (oldest first).
        verdicts: index -> verdict of every build evaluated so far; the ends must be
            judged (0 good, n-1 bad).

    Returns:
        The unevaluated index between the newest good and the oldest bad build that is
        nearest their middle (the lower one on a tie), or None.

    Raises:
        ValueError: fewer than two builds, or the ends not judged good / bad.
    """
    good, bad = _bounds(n, verdicts)
    left = [i for i in range(good + 1, bad) if i not in verdicts]
    if not left:
        return None
    mid = (good + bad) / 2
    return min(left, key=lambda i: (abs(i - mid), i))


def first_bad(n: int, verdicts: Mapping[int, Verdict]) -> Outcome:
    """What ``verdicts`` prove about the first bad build (see :class:`Outcome`).

    Raises:
        ValueError: fewer than two builds, or the ends not judged good / bad.
    """
    good, bad = _bounds(n, verdicts)
    candidates = tuple(i for i in range(good + 1, bad + 1) if verdicts.get(i) != "good")
    done = next_probe(n, verdicts) is None
    found = bad if done and candidates == (bad,) else None
    return Outcome(first_bad=found, last_good=good, candidates=candidates, done=done)
