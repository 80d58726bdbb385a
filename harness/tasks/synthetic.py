"""A seeded, GSM8K-format arithmetic task that a tiny model can learn in minutes.

Questions are single-digit addition and subtraction in plain words, in four
templates (:data:`TEMPLATES`)::

    What is 8 minus 6?                                   ->  8 - 6 = 2 #### 2
    What is 3 plus 9?                                    ->  3 + 9 = 12 #### 12
    Tom has 3 apples and gets 5 more. How many apples does Tom have?
                                                         ->  3 + 5 = 8 #### 8
    Mia has 7 pens and gives away 4. How many pens does Mia have left?
                                                         ->  7 - 4 = 3 #### 3

Answers carry the working and end with ``#### N``, so GSM8K's prompts
(:func:`harness.tasks.gsm8k.build_requests`), stop sequences and scorer
(:func:`harness.tasks.answers.judge`, strict-numeric and flexible-numeric) apply
unchanged. Operands are single digits because that is what a 0.8 M-parameter hybrid
learns on two CPU cores in a few minutes (measured while designing it: 0.85 greedy accuracy
after 200 s; multi-digit carries did not converge). Results are never negative.

The universe of distinct question texts (:func:`all_items`, 5 723 of them) is split
into three parts that are disjoint by question text (:func:`generate_splits`):

* ``fewshot``: the solved examples put in front of every prompt, cycling through the
  templates so that the first four cover all four;
* ``test``: the questions asked, interleaving the templates; each template gives at
  most :data:`MAX_TEST_FRACTION` of its questions, so every template keeps most of
  its questions for training;
* ``train``: everything else (the training text of :mod:`harness.models.training`).

Everything is a pure function of ``seed`` (Python's ``random.Random``, whose
``shuffle`` is stable across Python versions for a given seed) and of
:data:`GENERATOR_VERSION`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.config.schema import TaskSpec
from harness.tasks.base import PreparedTask, RequestTask, check_enough
from harness.tasks.contamination import ContaminationError, find_overlaps
from harness.tasks.gsm8k import GsmItem, build_requests, dataset_hash
from harness.tasks.kinds import task_kind
from harness.tasks.stops import STOP_SEQUENCES

__all__ = [
    "DEFAULT_NUM_FEWSHOT_ITEMS",
    "DEFAULT_NUM_TEST",
    "DEFAULT_SEED",
    "GENERATOR_VERSION",
    "MAX_TEST_FRACTION",
    "NAMES",
    "OBJECTS",
    "Problem",
    "SyntheticSplits",
    "TEMPLATES",
    "all_items",
    "format_block",
    "generate_splits",
    "prepare_synthetic",
]

GENERATOR_VERSION = 1
"""Bump when the generated text changes for the same seed; part of the source string."""

DEFAULT_SEED = 20250611
"""Seed of the split shuffle used by :func:`prepare_synthetic` (and by training)."""

DEFAULT_NUM_TEST = 200
"""Size of the test split."""

DEFAULT_NUM_FEWSHOT_ITEMS = 5
"""Size of the few-shot split, hence the largest usable ``num_fewshot``.

Five is GSM8K's default few-shot count (``TaskSpec.num_fewshot``). It also bounds the
prompt length (about 560 characters for five examples): the trained tiny model
(:mod:`harness.models.training`, 384-character training windows) answers 0.98 of the test
questions with 0 to 5 examples but about a third with 8 (1.9 times its window)."""

MAX_TEST_FRACTION = 0.25
"""Largest share of one template's questions that may go to the test split."""

NAMES: tuple[str, ...] = ("Tom", "Ann", "Sam", "Mia", "Ben", "Liz", "Max", "Eva")
"""Names of the word-problem templates."""

OBJECTS: tuple[str, ...] = ("apples", "pens", "books", "coins", "cards", "shells")
"""Objects (plural) of the word-problem templates."""


@dataclass(frozen=True)
class Problem:
    """One generated problem.

    Attributes:
        template: index into :data:`TEMPLATES`.
        question: the question text.
        a, b: the operands (0..9).
        op: ``"+"`` or ``"-"``.
        result: ``a + b`` or ``a - b`` (never negative).
    """

    template: int
    question: str
    a: int
    b: int
    op: str
    result: int

    @property
    def answer(self) -> str:
        """The solution text, ``"{a} {op} {b} = {result} #### {result}"``."""
        return f"{self.a} {self.op} {self.b} = {self.result} #### {self.result}"


def _what_is(word: str, op: str) -> Callable[[int], list[Problem]]:
    def gen(template: int) -> list[Problem]:
        out = []
        for a in range(10):
            for b in range(10):
                if op == "-" and b > a:
                    continue
                r = a + b if op == "+" else a - b
                out.append(Problem(template, f"What is {a} {word} {b}?", a, b, op, r))
        return out

    return gen


def _word(op: str) -> Callable[[int], list[Problem]]:
    def gen(template: int) -> list[Problem]:
        out = []
        for name in NAMES:
            for obj in OBJECTS:
                for a in range(2, 10):
                    for b in range(1, 10):
                        if op == "+":
                            q = f"{name} has {a} {obj} and gets {b} more. How many {obj} does {name} have?"
                            out.append(Problem(template, q, a, b, op, a + b))
                        elif b <= a:
                            q = f"{name} has {a} {obj} and gives away {b}. How many {obj} does {name} have left?"
                            out.append(Problem(template, q, a, b, op, a - b))
        return out

    return gen


#: The templates, in index order: (description, generator of all its problems).
#: Sizes: 100, 55, 8 names x 6 objects x 72 = 3 456, 8 x 6 x 44 = 2 112.
TEMPLATES: tuple[tuple[str, Callable[[int], list[Problem]]], ...] = (
    ("What is a plus b? (a, b in 0..9)", _what_is("plus", "+")),
    ("What is a minus b? (0 <= b <= a <= 9)", _what_is("minus", "-")),
    ("<name> has a <objects> and gets b more (a in 2..9, b in 1..9)", _word("+")),
    ("<name> has a <objects> and gives away b (a in 2..9, 1 <= b <= a)", _word("-")),
)


def all_items() -> list[Problem]:
    """Every distinct problem of every template, in a fixed canonical order.

    Returns:
        5 723 problems (see :data:`TEMPLATES`), question texts pairwise distinct.
    """
    out: list[Problem] = []
    for t, (_, gen) in enumerate(TEMPLATES):
        out.extend(gen(t))
    return out


@dataclass(frozen=True)
class SyntheticSplits:
    """The three disjoint splits, as :class:`~harness.tasks.gsm8k.GsmItem` tuples.

    ``index`` of each item is its position in its own split; ``gold`` is the result
    as a decimal integer string. :attr:`problems` keeps the structured problems of
    every split (same order) for training and tests.
    """

    train: tuple[GsmItem, ...]
    fewshot: tuple[GsmItem, ...]
    test: tuple[GsmItem, ...]
    problems: dict[str, tuple[Problem, ...]]
    seed: int


def _to_items(problems: list[Problem]) -> tuple[GsmItem, ...]:
    return tuple(
        GsmItem(index=i, question=p.question, answer=p.answer, gold=str(p.result))
        for i, p in enumerate(problems)
    )


def generate_splits(
    seed: int = DEFAULT_SEED,
    num_test: int = DEFAULT_NUM_TEST,
    num_fewshot: int = DEFAULT_NUM_FEWSHOT_ITEMS,
) -> SyntheticSplits:
    """Split :func:`all_items` into disjoint train / few-shot / test parts.

    Each template's problems are shuffled with ``random.Random(seed)`` (one stream,
    templates in index order). Few-shot takes problems template by template in turn
    (0, 1, 2, 3, 0, ...). Test then takes problems in the same round robin, skipping a
    template once it has given ``floor(MAX_TEST_FRACTION * its size)``. Train is the
    rest, in shuffled order (the remaining problems of all templates, shuffled
    again with the same stream).

    Args:
        seed: shuffle seed.
        num_test: test split size, ``0 <= num_test <= 1 429`` (the sum of the caps).
        num_fewshot: few-shot split size, ``0 <= num_fewshot <= 40``.

    Returns:
        The splits; deterministic in ``(seed, num_test, num_fewshot)``.

    Raises:
        ValueError: a size outside its range.
    """
    rng = random.Random(seed)
    pools: list[list[Problem]] = []
    for t, (_, gen) in enumerate(TEMPLATES):
        pool = gen(t)
        rng.shuffle(pool)
        pools.append(pool)
    caps = [int(MAX_TEST_FRACTION * len(p)) for p in pools]
    if not 0 <= num_fewshot <= 10 * len(pools):
        raise ValueError(f"num_fewshot={num_fewshot} outside 0..{10 * len(pools)}")
    if not 0 <= num_test <= sum(caps):
        raise ValueError(f"num_test={num_test} outside 0..{sum(caps)}")

    fewshot: list[Problem] = [pools[i % len(pools)].pop() for i in range(num_fewshot)]
    test: list[Problem] = []
    taken = [0] * len(pools)
    t = 0
    while len(test) < num_test:
        if taken[t] < caps[t]:
            test.append(pools[t].pop())
            taken[t] += 1
        t = (t + 1) % len(pools)
    train = [p for pool in pools for p in pool]
    rng.shuffle(train)
    return SyntheticSplits(
        train=_to_items(train),
        fewshot=_to_items(fewshot),
        test=_to_items(test),
        problems={"train": tuple(train), "fewshot": tuple(fewshot), "test": tuple(test)},
        seed=seed,
    )


def format_block(question: str, answer: str) -> str:
    """One solved example exactly as a few-shot prompt holds it.

    ``"Question: {question}\\nAnswer: {answer}\\n\\n"``, the block format of
    :func:`harness.tasks.gsm8k.build_prompt` (vLLM's gsm8k_eval.py).
    """
    return f"Question: {question}\nAnswer: {answer}\n\n"


def prepare_synthetic(name: str, spec: TaskSpec) -> PreparedTask[None]:
    """Build the requests of a ``kind: synthetic`` task (the runner's entry point).

    Prompts are GSM8K's (:func:`~harness.tasks.gsm8k.build_requests` with the first
    ``spec.num_fewshot`` few-shot items), asked for the first ``spec.num_questions``
    test items (all :data:`DEFAULT_NUM_TEST` when None); stop sequences are
    :data:`~harness.tasks.stops.STOP_SEQUENCES`; the dataset hash is
    :func:`~harness.tasks.gsm8k.dataset_hash` of the test items asked followed by the
    few-shot items used. The split seed is :data:`DEFAULT_SEED` (``spec.seed`` is the
    sampling seed and does not change the data).

    Args:
        name: the task's name in the config (prefix of question ids).
        spec: the task spec.

    Returns:
        A :class:`harness.tasks.PreparedTask`.

    Raises:
        ValueError: ``spec.num_fewshot`` larger than :data:`DEFAULT_NUM_FEWSHOT_ITEMS`.
        ContaminationError: a test question asked is among the few-shot examples or
            the train split (the splits are disjoint by construction; this guards it).
    """
    splits = generate_splits()
    if spec.num_fewshot > len(splits.fewshot):
        raise ValueError(
            f"task {name!r}: num_fewshot={spec.num_fewshot} but the synthetic task has "
            f"{len(splits.fewshot)} few-shot examples"
        )
    reqs = build_requests(splits.test, splits.fewshot, spec.num_questions, spec.num_fewshot, task_name=name)
    used = list(splits.test[: len(reqs)]) + list(splits.fewshot[: spec.num_fewshot])
    source = f"synthetic:arith-v{GENERATOR_VERSION} (seed {splits.seed}, {len(splits.test)} test items)"
    # disjoint by construction; checked anyway, so a generator change cannot leak answers

    ov = find_overlaps(name, splits.test[: len(reqs)], splits.fewshot[: spec.num_fewshot], splits.train)
    if ov.any:
        raise ContaminationError(f"task {name}: data {source}: {ov.describe()} (a generator bug: report it)")
    return PreparedTask(tuple(reqs), tuple(STOP_SEQUENCES), dataset_hash(used), source)


@task_kind("synthetic")
class SyntheticTask(RequestTask[None]):
    """Task kind ``synthetic``: the generated arithmetic set (no download)."""

    def prepare(self, name: str, spec: TaskSpec, data_dir: Path | None = None, allow_contamination: bool = False,
                base_dir: Path | None = None) -> PreparedTask[None]:
        """:func:`prepare_synthetic`, refused when it holds fewer questions than asked
        (:func:`harness.tasks.base.check_enough`)."""
        pt = prepare_synthetic(name, spec)
        check_enough(name, spec, len(pt.requests), pt.source)
        return pt

    def available(self, name: str, spec: TaskSpec, data_dir: Path | None = None) -> tuple[int, str] | None:
        """The generated test split's size and the generator's name."""
        return len(generate_splits().test), f"synthetic:arith-v{GENERATOR_VERSION}"

    def default_size(self) -> int | None:
        """:data:`DEFAULT_NUM_TEST`."""
        return DEFAULT_NUM_TEST
