"""What a resumed run took from the earlier attempt in its folder (part of the run record,
:class:`~harness.records.run_record.RunRecord`'s ``resumed``)."""

from __future__ import annotations

from pydantic import BaseModel

from harness.records.bounds import Bounded

__all__ = ["ResumedRecord"]


class ResumedRecord(Bounded, BaseModel):
    """What a run resumed with ``--resume RUN_DIR`` took from the earlier attempt in the
    same folder (:mod:`harness.run.resume`).

    Attributes:
        from_run_id: the earlier attempt's run id (the folder's name, as this run's).
        from_status: the earlier attempt's status (``running`` when it was killed).
        from_started_at: when the earlier attempt started.
        at: when this attempt started.
        earlier_record: the earlier attempt's ``run.json``, kept (relative to the run folder).
        variants_reused: ``<config>/<variant>`` whose results were complete and matched:
            their samples and measurements were loaded, their servers not started.
        variants_rerun: ``<config>/<variant>`` run again, each with why (``rerun_reasons``).
        rerun_reasons: ``<config>/<variant>`` -> why it was not reused.
    """

    from_run_id: str
    from_status: str
    from_started_at: str
    at: str
    earlier_record: str
    variants_reused: list[str] = []
    variants_rerun: list[str] = []
    rerun_reasons: dict[str, str] = {}

    def describe(self) -> str:
        """One line for people: the attempt resumed, what was reused and what ran again."""
        reused = ", ".join(self.variants_reused) or "none"
        rerun = "; ".join(f"{v} ({self.rerun_reasons.get(v, 'no reason recorded')})" for v in self.variants_rerun)
        return (f"resumed from the attempt started {self.from_started_at} ({self.from_status}; its record is kept "
                f"in {self.earlier_record}): reused {reused}; ran again: {rerun or 'none'}")
