"""Hostile YAML (:mod:`harness.config.yaml_load`): alias bombs, recursive aliases, deep nesting.

Expected node counts are computed from the literal YAML by the recurrence written in each
test, not taken from the loader; line numbers are counted by hand.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from harness.config.loader import load_config
from harness.config.yaml_load import MAX_ALIAS_NODES
from tests.config.texts import HEAD, err
from tests.config.texts import write_text as write

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)


def bomb(levels: int, fan: int) -> str:
    """``levels`` levels of ``fan`` aliases ("billion laughs"), under an unknown key of the vLLM form."""
    lines = [HEAD.rstrip("\n"), 'laughs:', '  a0: &a0 ["lol"]']
    for i in range(1, levels + 1):
        lines.append(f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * fan) + "]")
    return "\n".join(lines) + "\n"


def test_billion_laughs_is_refused_in_well_under_a_second_with_file_and_line(tmp_path):
    p = write(tmp_path, bomb(9, 9))
    t0 = time.perf_counter()
    msg = err(p)
    took = time.perf_counter() - t0
    assert took < 1.0, took
    # the level-i list holds fan copies of level i-1: size(i) = 1 + 9 * size(i-1), size(0) = 2
    size = [2]
    for _ in range(9):
        size.append(1 + 9 * size[-1])
    assert f"{p}:13:" in msg  # line 13 holds a9's nine aliases of a8, the largest expansion
    assert f"alias '*a8' (anchored at line 12) expands to {size[8]:,} nodes" in msg
    assert f"more than {MAX_ALIAS_NODES:,}" in msg


def test_the_cli_refuses_the_bomb_with_exit_2_in_under_a_second(tmp_path):
    p = write(tmp_path, bomb(9, 9))
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "harness.cli", "--config", str(p), "--dry-run"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert f"{p}:13:" in r.stderr and "expands to" in r.stderr
    assert time.perf_counter() - t0 < 30  # interpreter start-up included; the load itself is timed above


def added_by_aliases(levels: int, fan: int) -> int:
    """Nodes the aliases of :func:`bomb` add: expanded minus written, under ``laughs``.

    Level 0 is a list and its scalar (2 nodes); level i a list of ``fan`` copies of level
    i-1. Written: the laughs mapping, its keys, level 0's two nodes, one list per level.
    """
    size = [2]
    for _ in range(levels):
        size.append(1 + fan * size[-1])
    expanded = 1 + (levels + 1) + sum(size)
    written = 1 + (levels + 1) + 2 + levels
    return expanded - written


@pytest.mark.parametrize("levels, fan", [(4, 7), (4, 8), (3, 9), (5, 7)])
def test_aliases_are_refused_exactly_beyond_the_bound_and_the_worst_accepted_case_is_fast(tmp_path, levels, fan):
    added = added_by_aliases(levels, fan)
    p = write(tmp_path, bomb(levels, fan))
    if added > MAX_ALIAS_NODES:
        msg = err(p)
        assert f"{added:,} more than the" in msg
        return
    t0 = time.perf_counter()
    cfg = load_config(p)
    assert time.perf_counter() - t0 < 1.0
    assert cfg.warnings and cfg.warnings[0].key == "laughs"


def test_the_bound_sits_between_the_cases_tried():
    assert added_by_aliases(4, 7) == 6062 <= MAX_ALIAS_NODES < added_by_aliases(4, 8) == 10024


def test_an_alias_reused_as_a_variant_env_still_works(tmp_path):
    p = write(tmp_path, """\
        model: m/x
        env: &common {VLLM_CPU_KVCACHE_SPACE: 1, HF_HUB_OFFLINE: "1"}
        variants:
          reference: {env: *common}
          spec: {env: *common, speculative_config: {method: mtp, num_speculative_tokens: 1}}
        tasks:
          t: {kind: synthetic, num_questions: 3}
        """)
    cfg = load_config(p)
    assert cfg.variants["spec"].env == {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}


def test_a_recursive_alias_is_refused_with_its_line(tmp_path):
    p = write(tmp_path, HEAD + "x: &r\n  - 1\n  - *r\n")
    msg = err(p)
    assert f"{p}:3:" in msg and "recursive" in msg


def test_nesting_deeper_than_the_parser_is_a_config_error(tmp_path):
    p = write(tmp_path, HEAD + "x: " + "[" * 5000 + "]" * 5000 + "\n")
    assert "nested deeper" in err(p)

