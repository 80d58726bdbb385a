"""Which sides ``evalrun diff`` refuses: a run that did not finish (:func:`unfinished_sides`).
The command's front end is :mod:`harness.cli.diff`."""

from __future__ import annotations

from harness.report.diff_sides import SidePeek

#: Run statuses a diff refuses: the run did not finish measuring what it planned.
UNFINISHED_STATUSES = ("interrupted", "incomplete", "running", "error")


def unfinished_sides(a: SidePeek, b: SidePeek) -> list[str]:
    """One message per side of a diff whose run did not finish (status in
    :data:`UNFINISHED_STATUSES`); empty when both finished (``completed``) or are
    baselines. A side with status ``error`` names the exception, stage, config,
    variant and task."""
    out = []
    for info, label in ((a, "A"), (b, "B")):
        if info.status == "error":
            err = info.error
            where = ", ".join(f"{k} {getattr(err, k)}" for k in ("stage", "config", "variant", "task")
                              if err is not None and getattr(err, k))
            out.append(f"run {label} ({info.path}) has status error: an unexpected "
                       f"{err.type if err is not None else None} ended it "
                       f"({where or 'outside any stage'}): "
                       f"{(str((err.message if err is not None else None) or '').splitlines() or [''])[0][:300]}; "
                       "the traceback is in its run.json")
        elif info.status in UNFINISHED_STATUSES:
            out.append(f"run {label} ({info.path}) is {info.status}: "
                       "it did not run everything it planned")
    return out
