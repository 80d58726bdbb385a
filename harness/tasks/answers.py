"""The ``#### N`` answer format: answer text, LaTeX numbers, evalrun's two pipelines, the verdict.

Used by every task whose gold answers are GSM8K's (``gsm8k``, ``synthetic``, ``shape``):

* Reasoning blocks (``<think>...</think>``) are not answer text, and LaTeX number
  forms (``\\boxed{}``, ``\\text{}``, ``\\$``, ``{,}``, ``\\frac{a}{b}``) are read as
  numbers (:func:`answer_text`, :func:`normalize_latex`).
* Answer extraction, evalrun's own pipelines (registered with
  :func:`harness.tasks.pipelines.register_pipeline`): ``strict-numeric`` (the first
  ``#### N``) and ``flexible-numeric`` (the last number in the text), modelled on
  the two filters of lm-evaluation-harness ``lm_eval/tasks/gsm8k/gsm8k.yaml`` but
  number-aware: numbers are read with the single grammar of
  :mod:`harness.tasks.numbers` and compared as exact decimals, so ``$5,600.00``
  equals ``5600`` and ``#### 18.00`` equals gold 18 (lm-eval counts both wrong).
* lm-eval's exact filters, ``strict-match`` and ``flexible-extract``, computed by
  lm-eval's own code (:mod:`harness.tasks.lm_eval_gsm8k`), are added beside them
  when lm-eval is installed (:data:`GSM8K_PIPELINES` lists all four, in report order).
* vLLM's own rule, pipeline ``vllm`` (:mod:`harness.tasks.vllm_gsm8k`), read from the whole
  completion and compared with the gold read by the same rule, is put first for a task with
  ``vllm_rules`` (:data:`VLLM_RULES_PIPELINES`).
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction

from harness.tasks.lm_eval_gsm8k import LM_EVAL_PIPELINES, LmEvalUnavailableError, judge_lm_eval
from harness.tasks.numbers import NUMBER_RE, find_numbers, parse_number
from harness.tasks.pipelines import answer_pipeline, register_pipeline
from harness.tasks.vllm_gsm8k import VLLM_PIPELINE, judge_vllm

__all__ = [
    "GSM8K_PIPELINES",
    "NUMERIC_PIPELINES",
    "VLLM_RULES_PIPELINES",
    "answer_text",
    "extract_flexible",
    "extract_strict",
    "judge",
    "normalize_latex",
]

NUMERIC_PIPELINES: tuple[str, ...] = ("strict-numeric", "flexible-numeric")
"""evalrun's own number-aware answer pipelines (always computed)."""

GSM8K_PIPELINES: tuple[str, ...] = NUMERIC_PIPELINES + LM_EVAL_PIPELINES
"""Every answer pipeline a sample of the ``#### N`` format can carry, in report order:
evalrun's two, then lm-eval's ``strict-match`` and ``flexible-extract`` (present only when
lm-eval is installed; :data:`harness.tasks.lm_eval_gsm8k.LM_EVAL_PIPELINES`)."""

VLLM_RULES_PIPELINES: tuple[str, ...] = (VLLM_PIPELINE, *GSM8K_PIPELINES)
"""The pipelines of a task with ``vllm_rules``, in report order: vLLM's rule (``vllm``, what
its accuracy floor reads), then evalrun's additions (:data:`GSM8K_PIPELINES`)."""

# "#" starts a comment in VERBOSE mode, hence the escaped marker.
_STRICT_RE = re.compile(r"\#{4}[ \t]*(" + NUMBER_RE.pattern + ")", re.VERBOSE)

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
"""Reasoning-block markers of reasoning models (DeepSeek-R1, Qwen3, Nemotron)."""

_THINK_BLOCK_RE = re.compile(re.escape(THINK_OPEN) + r".*?" + re.escape(THINK_CLOSE), re.DOTALL)


def answer_text(completion: str) -> str:
    """The part of a completion that may hold the answer: reasoning removed.

    * every ``<think>...</think>`` block is removed;
    * an unterminated ``<think>`` (the budget ran out while reasoning) removes
      everything from it to the end;
    * a ``</think>`` without its ``<think>`` (the chat template put the opening tag
      in the prompt) removes everything up to and including it.

    A completion that is only reasoning gives ``""``: no answer, counted in the
    invalid rate by :func:`judge`.

    Args:
        completion: the completion text.

    Returns:
        The answer text (may be empty).
    """
    text = _THINK_BLOCK_RE.sub(" ", completion)
    if THINK_CLOSE in text:
        text = text.rsplit(THINK_CLOSE, 1)[1]
    if THINK_OPEN in text:
        text = text.split(THINK_OPEN, 1)[0]
    return text


_FRAC_RE = re.compile(r"\\[dt]?frac\s*\{\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)\s*\}"
                      r"\s*\{\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)\s*\}")
_WRAP_RE = re.compile(r"\\(?:boxed|fbox|text|textbf|mathrm|mathbf|displaystyle)\s*\{([^{}]*)\}")


def _frac_value(m: re.Match[str]) -> str:
    num, den = Decimal(m.group(1).replace(",", "")), Decimal(m.group(2).replace(",", ""))
    if den == 0:
        return m.group(0).replace("\\", " ")
    q = num / den
    if q == q.to_integral_value():
        return str(q.to_integral_value())
    # a non-integer fraction: written as a decimal when it terminates (3/4 -> 0.75)

    f = Fraction(num) / Fraction(den)
    d = f.denominator
    while d % 2 == 0:
        d //= 2
    while d % 5 == 0:
        d //= 5
    return format(q.normalize(), "f") if d == 1 else f"{m.group(1)}/{m.group(2)}"


def normalize_latex(text: str) -> str:
    """Rewrite LaTeX number forms as plain numbers, so extraction reads them.

    ``{,}`` -> ``,`` (thousands separator), ``\\,`` between digits -> ``,``;
    ``\\$`` -> ``$``, ``\\%`` -> ``%``; ``\\frac{a}{b}`` / ``\\dfrac`` / ``\\tfrac`` with
    numeric a, b -> the exact value when it is an integer or a terminating decimal
    (``\\frac{24}{2}`` -> ``12``, ``\\frac{3}{4}`` -> ``0.75``), else ``a/b``;
    ``\\boxed{x}``, ``\\text{x}``, ``\\textbf{x}``, ``\\mathrm{x}``, ... -> ``x``
    (innermost first, so ``\\boxed{\\text{\\$}12{,}400}`` -> ``$12,400``).

    Args:
        text: answer text.

    Returns:
        The text with those forms rewritten; text without LaTeX is returned unchanged.
    """
    if "\\" not in text and "{" not in text:
        return text
    out = text.replace("{,}", ",")
    out = re.sub(r"(?<=[0-9])\\,(?=[0-9]{3})", ",", out)
    out = out.replace("\\$", "$").replace("\\%", "%")
    for _ in range(10):  # nesting depth; each pass removes the innermost layer
        new = _FRAC_RE.sub(_frac_value, out)
        new = _WRAP_RE.sub(lambda m: m.group(1), new)
        if new == out:
            break
        out = new
    return out


@register_pipeline("strict-numeric", "the number right after the first #### (evalrun, number-aware)")
def extract_strict(text: str) -> str | None:
    """``strict-numeric``: the number right after the FIRST ``####`` marker.

    Modelled on the ``strict-match`` filter of lm-evaluation-harness gsm8k.yaml
    (regex ``#### (number)``, take first), with the number grammar of
    :mod:`harness.tasks.numbers` (currency, thousands separators, signs, decimals).
    Spaces or tabs may separate ``####`` and the number; a ``####`` not followed by
    a number does not count.

    Args:
        text: a completion.

    Returns:
        The number token as written (e.g. ``"5,600"``, ``"$29.00"``, ``"-3"``), or
        ``None`` when the text has no ``#### N``.
    """
    m = _STRICT_RE.search(text)
    return m.group(1) if m else None


@register_pipeline("flexible-numeric", "the last number of the answer text (evalrun, number-aware)")
def extract_flexible(text: str) -> str | None:
    """``flexible-numeric``: the LAST number anywhere in the text.

    Modelled on the ``flexible-extract`` filter of lm-evaluation-harness gsm8k.yaml
    (take the last numeric match), with the number grammar of :mod:`harness.tasks.numbers`, so
    ``"costs $29.00."`` gives ``"$29.00"`` and ``"3-4"`` gives ``"4"``.

    Args:
        text: a completion.

    Returns:
        The last number token as written, or ``None`` when there is no number.
    """
    found = find_numbers(text)
    return found[-1][0] if found else None


def _equal(answer: str | None, gold_value: Decimal) -> bool:
    """True when ``answer`` parses to exactly ``gold_value``; a missing answer is wrong."""
    value = parse_number(answer)
    return value is not None and value == gold_value


def _extract(name: str, text: str) -> str | None:
    """The answer evalrun's registered pipeline ``name`` extracts from ``text``."""
    extract = answer_pipeline(name).extract
    assert extract is not None, f"{name} is evalrun's, with an extraction function"
    return extract(text)


def judge(completion: str, gold: str, vllm_rules: bool = False) -> tuple[dict[str, str | None], dict[str, bool]]:
    """Extract answers with each pipeline and compare them with the gold answer.

    The pipelines read :func:`answer_text` (reasoning blocks removed) after
    :func:`normalize_latex`; a completion with only reasoning has no answer.

    Both sides are read by :func:`harness.tasks.numbers.parse_number` and compared as exact
    decimals (``"18.00"`` == ``"18"``, ``"5600"`` == ``"5,600"``, ``"3.5"`` != ``"3"``).
    A pipeline that finds nothing gives answer ``None`` and verdict ``False`` (it
    counts toward the invalid rate, as vLLM's gsm8k_eval.py ``INVALID`` does).

    Args:
        completion: the completion text.
        gold: gold answer text, e.g. :attr:`GsmItem.gold`; surrounding whitespace
            and thousands separators are allowed.
        vllm_rules: also judge by vLLM's rule, pipeline ``vllm``, put first
            (:func:`harness.tasks.vllm_gsm8k.judge_vllm`: the whole completion, reasoning
            and LaTeX as written, against the gold read by the same rule).

    Returns:
        ``(answers, correct)``, both keyed by pipeline name: ``"strict-numeric"`` and
        ``"flexible-numeric"`` always, plus lm-eval's ``"strict-match"`` and
        ``"flexible-extract"`` (lm-eval's own filters and ``exact_match``, see
        :func:`harness.tasks.lm_eval_gsm8k.judge_lm_eval`) when lm-eval is installed.
        Values: the extracted token or ``None``, and the verdict.

    Raises:
        ValueError: ``gold`` does not start with a number (bad data, not a wrong
            answer), or with ``vllm_rules`` vLLM's rule reads no integer in it.
    """
    gold_value = parse_number(gold)
    if gold_value is None:
        raise ValueError(f"gold answer {gold!r} is not a number")
    answers: dict[str, str | None] = {}
    correct: dict[str, bool] = {}
    if vllm_rules:
        answers[VLLM_PIPELINE], correct[VLLM_PIPELINE] = judge_vllm(completion, gold)
    text = normalize_latex(answer_text(completion))
    answers.update({name: _extract(name, text) for name in NUMERIC_PIPELINES})
    correct.update({name: _equal(answers[name], gold_value) for name in NUMERIC_PIPELINES})

    try:
        la, lc = judge_lm_eval(completion, gold)
    except LmEvalUnavailableError:
        return answers, correct  # lm-eval's pipelines absent; gates reading them do not run
    return {**answers, **la}, {**correct, **lc}
