"""Tests for harness.engine.metrics on hand-written Prometheus text.

The texts follow the exposition that prometheus_client's ``generate_latest`` produces
for vLLM's counters (``# HELP``/``# TYPE`` lines, ``_total`` samples, a ``_created``
gauge family after each counter). Expected numbers are worked out by hand here. A run on
the FAKE server (tests/fake_vllm.py: the real one cannot be made to answer garbage on
/metrics) shows unparsable text is the task's metrics error.
"""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from harness.engine.metrics import (
    MetricsError,
    counter_violations,
    has_spec_decode_counters,
    parse_engine_counters,
    parse_spec_decode_counters,
)
from harness.records.measures import SpecDecodeCountersRecord, SpecDecodeRecord
from harness.records.run_record import load_run
from tests.fake_run import config, run_cli

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

# Two engines: engine 0 has drafts 10, draft tokens 20, accepted 12 (8 at pos 0,
# 4 at pos 1); engine 1 has drafts 20, draft tokens 40, accepted 28 (18 at pos 0,
# 10 at pos 1). num_speculative_tokens = 2.
TWO_ENGINES = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny-qwen3-next"} 0.0
vllm:num_requests_running{engine="1",model_name="tiny-qwen3-next"} 0.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny-qwen3-next"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="tiny-qwen3-next"} 20.0
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{engine="0",model_name="tiny-qwen3-next"} 1.7200000001e+09
vllm:spec_decode_num_drafts_created{engine="1",model_name="tiny-qwen3-next"} 1.7200000002e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny-qwen3-next"} 20.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="tiny-qwen3-next"} 40.0
# HELP vllm:spec_decode_num_draft_tokens_created Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_created gauge
vllm:spec_decode_num_draft_tokens_created{engine="0",model_name="tiny-qwen3-next"} 1.7200000001e+09
vllm:spec_decode_num_draft_tokens_created{engine="1",model_name="tiny-qwen3-next"} 1.7200000002e+09
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny-qwen3-next"} 12.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="tiny-qwen3-next"} 28.0
# HELP vllm:spec_decode_num_accepted_tokens_created Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_created gauge
vllm:spec_decode_num_accepted_tokens_created{engine="0",model_name="tiny-qwen3-next"} 1.7200000001e+09
vllm:spec_decode_num_accepted_tokens_created{engine="1",model_name="tiny-qwen3-next"} 1.7200000002e+09
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny-qwen3-next",position="0"} 8.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny-qwen3-next",position="1"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="tiny-qwen3-next",position="0"} 18.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="tiny-qwen3-next",position="1"} 10.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_created Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_created gauge
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="tiny-qwen3-next",position="0"} 1.7200000001e+09
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="tiny-qwen3-next",position="1"} 1.7200000001e+09
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="1",model_name="tiny-qwen3-next",position="0"} 1.7200000002e+09
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="1",model_name="tiny-qwen3-next",position="1"} 1.7200000002e+09
"""  # noqa: E501 - Prometheus exposition lines as vLLM writes them, one sample per line


def single_engine(drafts, draft_tokens, accepted, per_pos, suffix="_total", created=True):
    """Prometheus text for one engine (engine="0"), written line by line."""
    lines = []

    def counter(name, doc, rows):
        lines.append(f"# HELP {name}{suffix} {doc}")
        lines.append(f"# TYPE {name}{suffix} counter")
        for labels, value in rows:
            lines.append(f"{name}{suffix}{{{labels}}} {value}")
        if created:
            lines.append(f"# HELP {name}_created {doc}")
            lines.append(f"# TYPE {name}_created gauge")
            for labels, _ in rows:
                lines.append(f"{name}_created{{{labels}}} 1.7200000001e+09")

    base = 'engine="0",model_name="m"'
    counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", [(base, drafts)])
    counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", [(base, draft_tokens)])
    counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", [(base, accepted)])
    counter(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "Accepted tokens per draft position.",
        [(f'{base},position="{i}"', v) for i, v in enumerate(per_pos)],
    )
    return "\n".join(lines) + "\n"


def test_two_engines_are_summed():
    c = parse_spec_decode_counters(TWO_ENGINES)
    assert c.drafts == 30.0  # 10 + 20
    assert c.draft_tokens == 60.0  # 20 + 40
    assert c.accepted_tokens == 40.0  # 12 + 28
    assert c.accepted_per_pos == (26.0, 14.0)  # 8 + 18, 4 + 10

    m = SpecDecodeRecord.from_counters(c)
    assert m.per_position_acceptance[0] == pytest.approx(26 / 30)
    assert m.per_position_acceptance[1] == pytest.approx(14 / 30)
    assert m.acceptance_rate == pytest.approx(40 / 60)
    assert m.mean_acceptance_length == pytest.approx(1 + 40 / 30)


def test_created_sample_is_not_added():
    # The _created value (1.72e9) would dwarf the counts if it were added.
    c = parse_spec_decode_counters(single_engine(5, 10, 7, [4, 3]))
    assert (c.drafts, c.draft_tokens, c.accepted_tokens) == (5.0, 10.0, 7.0)
    assert c.accepted_per_pos == (4.0, 3.0)


def test_created_sample_inside_counter_block_is_not_added():
    # A _created line directly under the counter's samples, within its TYPE block.
    text = single_engine(5, 10, 7, [4, 3], created=False)
    text = text.replace(
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 5\n',
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 5\n'
        'vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.72e+09\n',
    )
    assert "drafts_created" in text
    assert parse_spec_decode_counters(text).drafts == 5.0


def test_bare_names_without_total():
    c = parse_spec_decode_counters(single_engine(5, 10, 7, [4, 3], suffix=""))
    assert (c.drafts, c.draft_tokens, c.accepted_tokens) == (5.0, 10.0, 7.0)
    assert c.accepted_per_pos == (4.0, 3.0)


def test_bare_names_without_type_lines():
    text = "\n".join(
        line
        for line in single_engine(5, 10, 7, [4, 3], suffix="").splitlines()
        if not line.startswith("#")
    )
    c = parse_spec_decode_counters(text + "\n")
    assert (c.drafts, c.draft_tokens, c.accepted_tokens) == (5.0, 10.0, 7.0)
    assert c.accepted_per_pos == (4.0, 3.0)


def test_accepted_tokens_not_confused_with_per_pos():
    # per_pos has the accepted-tokens name as a prefix; drop accepted_tokens itself.
    text = "\n".join(
        line
        for line in TWO_ENGINES.splitlines()
        if "vllm:spec_decode_num_accepted_tokens_total" not in line
    )
    with pytest.raises(MetricsError, match="vllm:spec_decode_num_accepted_tokens"):
        parse_spec_decode_counters(text + "\n")


def test_missing_counter_names_metric_and_source():
    text = "\n".join(
        line for line in TWO_ENGINES.splitlines() if "spec_decode_num_draft_tokens_total" not in line
    )
    with pytest.raises(MetricsError) as err:
        parse_spec_decode_counters(text + "\n", source="http://127.0.0.1:8000/metrics")
    assert "vllm:spec_decode_num_draft_tokens" in str(err.value)
    assert "http://127.0.0.1:8000/metrics" in str(err.value)


def test_only_created_sample_counts_as_missing():
    text = "\n".join(
        line for line in TWO_ENGINES.splitlines() if "spec_decode_num_drafts_total" not in line
    )
    assert "spec_decode_num_drafts_created" in text
    with pytest.raises(MetricsError, match="vllm:spec_decode_num_drafts"):
        parse_spec_decode_counters(text + "\n")


def test_no_spec_decode_server():
    text = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
"""
    assert has_spec_decode_counters(text) is False
    assert has_spec_decode_counters(TWO_ENGINES) is True
    with pytest.raises(MetricsError, match="vllm:spec_decode_num_drafts"):
        parse_spec_decode_counters(text)


def test_unparsable_text_is_metrics_error():
    with pytest.raises(MetricsError, match="/metrics"):
        parse_spec_decode_counters('vllm:spec_decode_num_drafts_total{engine="0" 3\n')


def test_zero_drafts_give_none_ratios():
    c = parse_spec_decode_counters(single_engine(0, 0, 0, [0, 0]))
    m = SpecDecodeRecord.from_counters(c)
    assert m.acceptance_rate is None
    assert m.mean_acceptance_length is None
    assert m.per_position_acceptance == (None, None)
    j = m.to_json()
    assert j == {
        "drafts": 0.0,
        "draft_tokens": 0.0,
        "accepted_tokens": 0.0,
        "acceptance_rate": None,
        "mean_acceptance_length": None,
        "per_position_acceptance": [None, None],
    }
    json.dumps(j)


def test_snapshot_difference():
    before = parse_spec_decode_counters(single_engine(100, 200, 150, [90, 60]))
    after = parse_spec_decode_counters(single_engine(130, 260, 190, [116, 74]))
    d = after.minus(before)
    assert d == SpecDecodeCountersRecord(30.0, 60.0, 40.0, (26.0, 14.0))
    m = SpecDecodeRecord.from_counters(d)
    assert m.acceptance_rate == pytest.approx(40 / 60)
    assert m.mean_acceptance_length == pytest.approx(1 + 40 / 30)
    assert m.per_position_acceptance == pytest.approx((26 / 30, 14 / 30))
    assert set(m.to_json()) == {
        "drafts",
        "draft_tokens",
        "accepted_tokens",
        "acceptance_rate",
        "mean_acceptance_length",
        "per_position_acceptance",
    }


def test_difference_pads_positions():
    before = SpecDecodeCountersRecord(10, 20, 5, (5,))
    after = SpecDecodeCountersRecord(20, 40, 12, (9, 3))
    assert after.minus(before).accepted_per_pos == (4.0, 3.0)


def test_counter_reset_is_an_error():
    before = parse_spec_decode_counters(single_engine(100, 200, 150, [90, 60]))
    after = parse_spec_decode_counters(single_engine(5, 10, 7, [4, 3]))
    with pytest.raises(MetricsError, match="vllm:spec_decode_num_drafts"):
        after.minus(before)


def test_per_position_reset_is_an_error():
    before = SpecDecodeCountersRecord(10, 20, 5, (5, 2))
    after = SpecDecodeCountersRecord(20, 40, 12, (9,))
    with pytest.raises(MetricsError, match="per_pos"):
        after.minus(before)


def test_counters_json_round_trip():
    c = parse_spec_decode_counters(TWO_ENGINES)
    assert SpecDecodeCountersRecord.from_json(json.loads(json.dumps(c.to_json()))) == c


# ------------------------------------------------------------ per-engine differences


def engines_text(values: dict[str, tuple[int, int, int, list[int]]]) -> str:
    """Prometheus text with one row per engine: ``{engine: (drafts, draft tokens,
    accepted, per-position)}``, written line by line (no harness code)."""
    names = ("drafts", "draft_tokens", "accepted_tokens")
    lines = []
    for j, n in enumerate(names):
        lines.append(f"# TYPE vllm:spec_decode_num_{n} counter")
        for e, v in values.items():
            lines.append(f'vllm:spec_decode_num_{n}_total{{engine="{e}",model_name="m"}} {v[j]}')
    lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter")
    for e, v in values.items():
        for i, x in enumerate(v[3]):
            lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total'
                         f'{{engine="{e}",model_name="m",position="{i}"}} {x}')
    return "\n".join(lines) + "\n"


def test_reset_on_one_engine_is_named_even_when_the_sum_grows():
    # example: before e0=100, e1=100; after e0=10, e1=250. The sums grow
    # (200 -> 260) but engine 0 went down: an error naming engine 0, never 60.
    before = parse_spec_decode_counters(engines_text({"0": (100, 200, 100, [60, 40]), "1": (100, 200, 100, [60, 40])}))
    after = parse_spec_decode_counters(engines_text({"0": (10, 20, 10, [6, 4]), "1": (250, 500, 250, [150, 100])}))
    with pytest.raises(MetricsError, match=r"vllm:spec_decode_num_drafts went backwards on engine '0' \(100 -> 10\)"):
        after.minus(before)


def test_difference_is_taken_per_engine_then_summed():
    before = parse_spec_decode_counters(engines_text({"0": (10, 20, 12, [8, 4]), "1": (20, 40, 28, [18, 10])}))
    after = parse_spec_decode_counters(engines_text({"0": (15, 30, 16, [11, 5]), "1": (27, 54, 36, [23, 13])}))
    d = after.minus(before)
    # by hand: drafts 5 + 7, draft tokens 10 + 14, accepted 4 + 8, per position (3+5, 1+3)
    assert (d.drafts, d.draft_tokens, d.accepted_tokens, d.accepted_per_pos) == (12, 24, 12, (8, 4))
    assert d.per_engine["1"].drafts == 7


def test_an_engine_that_vanishes_is_an_error_and_a_new_one_counts_from_zero():
    before = parse_spec_decode_counters(engines_text({"0": (10, 20, 12, [8, 4]), "1": (20, 40, 28, [18, 10])}))
    after = parse_spec_decode_counters(engines_text({"0": (15, 30, 16, [11, 5])}))
    with pytest.raises(MetricsError, match="engine '1'"):
        after.minus(before)
    grown = parse_spec_decode_counters(
        engines_text({"0": (15, 30, 16, [11, 5]), "1": (20, 40, 28, [18, 10]), "2": (3, 6, 2, [2, 0])})
    )
    d = grown.minus(before)
    assert (d.drafts, d.accepted_tokens) == (5 + 0 + 3, 4 + 0 + 2)


# ------------------------------------------------------------ impossible counters


def test_issue_example_is_impossible_on_every_count():
    # 10 drafts, 20 draft tokens, 25 accepted, per position 10 and 15, k = 2
    v = counter_violations(SpecDecodeCountersRecord(10, 20, 25, (10, 15)), num_speculative_tokens=2)
    text = " | ".join(v)
    assert "accepted tokens 25 > draft tokens 20" in text
    assert "accepted at position 1 (15) > accepted at position 0 (10)" in text
    assert "mean acceptance length 1 + 25/10 = 3.500 > 1 + num_speculative_tokens = 3" in text
    assert len(v) == 3  # sum of positions (25) = accepted (25), draft tokens 20 <= 2 x 10


@pytest.mark.parametrize(
    "counters, k, needle",
    [
        (
            SpecDecodeCountersRecord(10, 20, 12, (8, 5)),
            2,
            "sum of per-position accepted tokens 13 != accepted tokens 12",
        ),
        (SpecDecodeCountersRecord(10, 30, 12, (8, 4)), 2, "draft tokens 30 > num_speculative_tokens 2 x drafts 10"),
        (SpecDecodeCountersRecord(10, 30, 12, (8, 4, 0)), 3, None),
        (SpecDecodeCountersRecord(4, 8, 5, (5, 0)), 2, "accepted at position 0 (5) > drafts 4"),
        (SpecDecodeCountersRecord(10, 20, 20, (10, 10)), 2, None),  # every draft fully accepted: allowed
        (SpecDecodeCountersRecord(10, 20, 12, ()), 2, None),  # engine without per-position counters
    ],
)
def test_each_consistency_rule(counters, k, needle):
    v = counter_violations(counters, k)
    if needle is None:
        assert v == ()
    else:
        assert any(needle in x for x in v), v


def test_garbage_metrics_is_the_tasks_metrics_error(tmp_path):
    code = run_cli(tmp_path, config(tmp_path, spec_env={"FAKE_MODE": "ok", "FAKE_METRICS": "garbage"}))
    rec = load_run(tmp_path / "results" / "r")
    t = rec.configs[0].variants["spec"].tasks["gsm8k"]
    assert rec.status == "completed" and code == 1
    assert t.spec_decode is None and "cannot parse Prometheus text" in (t.spec_decode_error or "")


def _vllm_like_exposition(values: dict[str, dict[str, float]]) -> str:
    """Prometheus text as vLLM's logger writes it: prometheus_client counters named as in
    vllm/v1/metrics/loggers.py, labelled ``model_name`` and ``engine``, rendered by
    ``generate_latest`` (``_total`` and ``_created`` samples)."""
    reg = CollectorRegistry()
    for name, per_engine in values.items():
        c = Counter(name, "doc", labelnames=["model_name", "engine"], registry=reg)
        for engine, v in per_engine.items():
            c.labels(model_name="tiny", engine=engine).inc(v)
    return generate_latest(reg).decode()


def test_engine_counters_summed_over_engines_and_missing_ones_none():
    text = _vllm_like_exposition({
        "vllm:prompt_tokens": {"0": 120, "1": 7},
        "vllm:generation_tokens": {"0": 30},
        "vllm:num_preemptions": {"0": 0, "1": 2},
        "vllm:prefix_cache_queries": {"0": 64},
    })
    c = parse_engine_counters(text, "test")
    assert (c.prompt_tokens, c.generation_tokens, c.preemptions) == (127, 30, 2)
    assert c.prefix_cache_queries == 64 and c.prefix_cache_hits is None  # not exposed: None, never 0


def test_engine_counters_refuse_a_negative_value():
    with pytest.raises(MetricsError, match="invalid value"):
        parse_engine_counters('vllm:prompt_tokens_total{engine="0"} -3.0\n', "test")
