"""The one writer of a run's ``run.json`` while the run goes on (:class:`RunRecorder`)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from harness.records.provenance import utc_now
from harness.records.run_record import RunRecord, write_run

#: Exit codes of a run: every gate passed, a gate failed, something could not run.
EXIT_PASSED, EXIT_GATE_FAILED, EXIT_COULD_NOT_RUN = 0, 1, 2


class RunRecorder:
    """Keeps the run record on disk while the run goes on: written at the start (status
    ``running``), after every task, variant and config, and by the first stopping signal
    (status ``interrupted``) before any server is stopped, so a SIGKILL at any moment
    leaves the last state in ``run.json``.

    Attributes:
        record: the record being filled in place.
        run_dir: its run folder.
        done: set when the final word (verdict, error or interrupt) starts being
            written: from then on a signal's handler writes nothing (the runner decides).
        final_written: set once that final word is on disk: a later signal keeps it
            (the run's outcome and exit code stay what the record says).
    """

    def __init__(self, record: RunRecord, run_dir: Path) -> None:
        self.record = record
        self.run_dir = Path(run_dir)
        self.done = False
        self.final_written = False
        self._writing = False
        self._lock = threading.Lock()  # variants side by side checkpoint from their own threads
        self._writer: int | None = None

    def save(self) -> bool:
        """Write ``run.json`` now (:func:`write_run`); False when a write is already in
        progress (a signal handler interrupting a checkpoint) or the run is done.

        Raises:
            OSError: the record cannot be written (the caller decides).
        """
        if self.done or self._writer == threading.get_ident():
            return False
        with self._lock:  # another thread's write finishes first (never interleaved)
            if self.done:
                return False
            self._writer = threading.get_ident()
            self._writing = True
            try:
                write_run(self.run_dir, self.record)
            finally:
                self._writing = False
                self._writer = None
        return True

    def final(self) -> None:
        """Write the final record (verdict, error or interrupt) and mark the run done,
        so a later signal leaves it alone.

        Raises:
            OSError: the record cannot be written (the previous ``run.json`` stays).
        """
        self.done = True
        write_run(self.run_dir, self.record)
        self.final_written = True

    def mark_interrupted(self, signal_name: str) -> None:
        """Set status ``interrupted`` (exit code 2, ``interrupted_by``, end time) in the record."""
        r = self.record
        r.status, r.passed, r.exit_code = "interrupted", None, EXIT_COULD_NOT_RUN
        r.interrupted_by = signal_name
        r.provenance.ended_at = utc_now()

    def interrupt(self, signal_name: str) -> None:
        """The first stopping signal: mark the record interrupted and write it (never
        raises: a failed write is said on stderr, the teardown must go on)."""
        if self.done:
            return
        self.mark_interrupted(signal_name)
        try:
            self.save()
        except Exception as e:  # noqa: BLE001 - inside a signal handler: say it, stop the servers anyway
            try:
                print(f"evalrun: warning: {self.run_dir / 'run.json'} not written on {signal_name}: {e}",
                      file=sys.stderr, flush=True)
            except (OSError, ValueError):
                pass
