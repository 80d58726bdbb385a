"""One request's speculative-decoding metrics as vLLM reports them in its response.

vLLM 0.32 started with ``--per-request-spec-decode-metrics summary|detailed``
(``vllm/config/observability.py``, ``ObservabilityConfig.per_request_spec_decode_metrics``)
puts ``metrics.speculative_decoding`` at the top of every single-sequence completion or
chat answer (``vllm/entrypoints/openai/completion/serving.py``,
``PerRequestMetrics.speculative_decoding``). Its shape is
``SpeculativeDecodingMetrics`` (``vllm/entrypoints/generate/base/protocol.py``), written by
``RequestSpecDecodeMetrics.to_dict`` (``vllm/v1/metrics/stats.py``): the histogram index
``j`` counts the verify steps that accepted exactly ``j`` drafts (bonus token excluded),
``num_spec_steps = sum(histogram)``, ``num_accepted_draft_tokens = sum(j * histogram[j])``;
``detailed`` adds the ordered ``per_step_accepted`` / ``per_step_drafted``.

The scheduler observes each verify step for the request
(``Scheduler.update_from_output``) right beside the step's contribution to the
``vllm:spec_decode_*`` counters, so over a task the requests' sums equal the counters'
difference (:func:`sums_mismatch` checks it).
"""

from __future__ import annotations

from typing import Mapping, Sequence, TypedDict

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError, model_validator

from harness.records.engine_measures import SpecDecodeCountersRecord


class SpecDecodingMetrics(BaseModel):
    """vLLM's ``SpeculativeDecodingMetrics`` (``vllm/entrypoints/generate/base/protocol.py``),
    strict; other keys kept (``extra="allow"``: the field is experimental upstream).

    Raises (on validation): ``pydantic.ValidationError`` for a missing or mistyped field,
    a histogram not of length ``num_spec_tokens + 1``, sums that disagree with the histogram,
    or per-step arrays that disagree with it.
    """

    model_config = ConfigDict(extra="allow", strict=True)

    mean_acceptance_length: StrictFloat | StrictInt
    draft_acceptance_rate: StrictFloat | StrictInt
    acceptance_histogram: list[StrictInt]
    num_spec_steps: StrictInt = Field(ge=0)
    num_accepted_draft_tokens: StrictInt = Field(ge=0)
    num_draft_tokens: StrictInt = Field(ge=0)
    num_spec_tokens: StrictInt = Field(ge=0)
    per_step_accepted: list[StrictInt] | None = None
    per_step_drafted: list[StrictInt] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "SpecDecodingMetrics":
        h = self.acceptance_histogram
        if len(h) != self.num_spec_tokens + 1 or any(c < 0 for c in h):
            raise ValueError(f"acceptance_histogram {h} is not num_spec_tokens + 1 = "
                             f"{self.num_spec_tokens + 1} non-negative counts")
        if sum(h) != self.num_spec_steps or sum(j * c for j, c in enumerate(h)) != self.num_accepted_draft_tokens:
            raise ValueError(f"acceptance_histogram {h} disagrees with num_spec_steps {self.num_spec_steps} / "
                             f"num_accepted_draft_tokens {self.num_accepted_draft_tokens}")
        acc, dr = self.per_step_accepted, self.per_step_drafted
        if acc is not None or dr is not None:
            if acc is None or dr is None or len(acc) != len(dr) or len(acc) != self.num_spec_steps:
                raise ValueError("per_step_accepted / per_step_drafted are not both num_spec_steps long")
            if any(not 0 <= a <= d for a, d in zip(acc, dr)) or sum(dr) != self.num_draft_tokens:
                raise ValueError("per_step_accepted exceeds per_step_drafted, or per_step_drafted does not "
                                 "sum to num_draft_tokens")
            if [acc.count(j) for j in range(len(h))] != h:
                raise ValueError("per_step_accepted disagrees with acceptance_histogram")
        return self


def parse_spec_decoding(doc: object) -> dict[str, object] | None:
    """The response's ``metrics.speculative_decoding`` as vLLM wrote it, validated.

    Args:
        doc: the decoded response body (a dict).

    Returns:
        The dict, unchanged (vLLM's field names), or None when the response has no
        ``metrics`` or no ``speculative_decoding`` (flag off, ``n > 1``, no speculation).

    Raises:
        ValueError: present but not :class:`SpecDecodingMetrics`; the message names the field.
    """
    metrics = doc.get("metrics") if isinstance(doc, dict) else None
    if metrics is None:
        return None
    if not isinstance(metrics, dict):
        raise ValueError(f"metrics: not an object (got {type(metrics).__name__})")
    sd = metrics.get("speculative_decoding")
    if sd is None:
        return None
    try:
        SpecDecodingMetrics.model_validate(sd)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise ValueError(f"metrics.speculative_decoding{'.' + loc if loc else ''}: {err['msg']}") from None
    return dict(sd)


def typed(sd: Mapping[str, object]) -> SpecDecodingMetrics:
    """``sd`` (a sample's ``spec_decoding``) as :class:`SpecDecodingMetrics`.

    Raises:
        pydantic.ValidationError: it is not one.
    """
    return SpecDecodingMetrics.model_validate(dict(sd))


def accepted_per_position(sd: SpecDecodingMetrics) -> tuple[float, ...]:
    """Accepted drafts per draft position ``k`` (``num_spec_tokens`` entries): the verify
    steps that accepted more than ``k`` drafts, i.e. ``sum(histogram[j] for j > k)``; the
    same count as vLLM's ``vllm:spec_decode_num_accepted_tokens_per_pos{position=k}``
    (a step accepting ``j`` drafts accepts positions ``0..j-1``)."""
    h = sd.acceptance_histogram
    return tuple(float(sum(h[k + 1:])) for k in range(sd.num_spec_tokens))


class ReplyFields(TypedDict, total=False):
    """:func:`reply_fields`: keyword fields of :class:`~harness.records.completions.EngineReply`."""

    spec_drafts: float
    spec_draft_tokens: float
    spec_accepted_tokens: float
    spec_accepted_per_pos: tuple[float, ...]
    spec_decoding: dict[str, object]
    prompt_tokens: int


def reply_fields(sd: dict[str, object] | None, doc: object = None) -> ReplyFields:
    """The :class:`~harness.records.completions.EngineReply` keyword fields from one
    response's validated dict (None: no fields): ``spec_drafts = num_spec_steps``,
    ``spec_draft_tokens = num_draft_tokens``, ``spec_accepted_tokens =
    num_accepted_draft_tokens``, ``spec_accepted_per_pos`` (:func:`accepted_per_position`),
    and ``spec_decoding``, the dict itself; ``prompt_tokens`` from the response ``doc``'s
    ``usage.prompt_tokens`` when it is an integer.

    Raises:
        pydantic.ValidationError: ``sd`` is not :class:`SpecDecodingMetrics`.
    """
    if sd is None:
        return {}
    m = typed(sd)
    out: ReplyFields = {"spec_drafts": float(m.num_spec_steps), "spec_draft_tokens": float(m.num_draft_tokens),
                        "spec_accepted_tokens": float(m.num_accepted_draft_tokens),
                        "spec_accepted_per_pos": accepted_per_position(m), "spec_decoding": sd}
    usage = doc.get("usage") if isinstance(doc, dict) else None
    if isinstance(usage, dict) and type(usage.get("prompt_tokens")) is int:
        out["prompt_tokens"] = usage["prompt_tokens"]
    return out


def sums_mismatch(reported: Sequence[Mapping[str, object] | None], counters: SpecDecodeCountersRecord | None,
                  where: str) -> str | None:
    """Whether a task's per-request sums equal its ``/metrics`` difference exactly.

    Args:
        reported: each request's ``spec_decoding`` dict (None: the response had none).
        counters: the task's counter difference (None: not read; nothing to compare).
        where: ``<variant id> <task>`` for the message.

    Returns:
        None when no request reported, when the counters were not read, or when drafts,
        draft tokens, accepted tokens and every per-position count agree (exactly when every
        request reported; when some did not, a failed request's share is unknown, so the sums
        must only not exceed the counters); else a message naming every differing figure, both
        values, and how many requests reported none.
    """
    got = [typed(d) for d in reported if d is not None]
    if not got or counters is None:
        return None
    width = max(len(counters.accepted_per_pos), *(d.num_spec_tokens for d in got))
    pos = [0.0] * width
    for d in got:
        for k, v in enumerate(accepted_per_position(d)):
            pos[k] += v
    cpos = list(counters.accepted_per_pos) + [0.0] * (width - len(counters.accepted_per_pos))
    pairs: list[tuple[str, float, float]] = [
        ("drafts (num_spec_steps)", sum(d.num_spec_steps for d in got), counters.drafts),
        ("draft tokens (num_draft_tokens)", sum(d.num_draft_tokens for d in got), counters.draft_tokens),
        ("accepted tokens (num_accepted_draft_tokens)", sum(d.num_accepted_draft_tokens for d in got),
         counters.accepted_tokens)]
    pairs += [(f"accepted at position {k}", pos[k], cpos[k]) for k in range(width)]
    missing = len(reported) - len(got)
    bad = [f"{name}: requests sum to {a:g}, /metrics difference {b:g}" for name, a, b in pairs
           if (a > b if missing else a != b)]
    if not bad:
        return None
    return (f"{where}: per-request speculative metrics disagree with the task's /metrics difference ("
            + "; ".join(bad) + f"; {len(got)} of {len(reported)} requests reported"
            + (f", {missing} reported none" if missing else "") + "): a counter problem")
