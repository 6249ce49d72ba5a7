"""Progress of long jobs (episodes done of N) on the console as well as in the job's log.

The lines go to logger PROGRESS_LOGGER; skillrepro.pipeline.setup_logging sends that logger to stderr, which
Snakemake shows, and every logger to the rule's log file. Nothing here imports the rest of skillrepro, so any
layer (the runner, a sleep phase) can report progress.
"""
from __future__ import annotations

import logging
import threading
import time

# Progress lines of long jobs (episodes done of N): they go to the job's log and to stderr, which Snakemake
# shows on its console; every other line of a job goes to its log only.
PROGRESS_LOGGER = "skillrepro.progress"
JOB: dict[str, str] = {"name": "", "log": ""}


class Progress:
    """A long job's progress: `total` units (episodes) done so far, one line per update on the console and in
    the job's log, and a line every `heartbeat_s` while none finishes, so a quiet console still moves.

        with Progress(len(tasks), "train episodes") as progress:
            ...; progress.update()
    """

    def __init__(self, total: int, what: str, label: str = "", heartbeat_s: float = 60):
        self.total, self.what, self.done = total, what, 0
        self.label = JOB["name"] or label or "job"
        self._log = logging.getLogger(PROGRESS_LOGGER)
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._stop = threading.Event()
        where = f" (log: {JOB['log']})" if JOB["log"] else ""
        self._log.info("%s: %d %s to do%s", self.label, total, what, where)
        self._beat = None
        if heartbeat_s and total:
            self._beat = threading.Thread(target=self._heartbeat, args=(heartbeat_s,), daemon=True)
            self._beat.start()

    def update(self, n: int = 1) -> None:
        with self._lock:
            self.done += n
            done = self.done
        self._log.info("%s: %d/%d %s done, %s elapsed", self.label, done, self.total, self.what, self._elapsed())

    def close(self, error: BaseException | None = None) -> None:
        """The last line: "finished", or "failed" with the error's type and message when the job stops on one."""
        if not self._stop.is_set():
            self._stop.set()
            why = f"{type(error).__name__}: {str(error).strip()[:600]}".rstrip(": ") if error is not None else ""
            ended = "finished" if error is None else f"failed ({why})"
            self._log.info("%s: %s, %d/%d %s in %s", self.label, ended, self.done, self.total, self.what,
                           self._elapsed())

    def _heartbeat(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            self._log.info("%s: %d/%d %s done, still running, %s elapsed", self.label, self.done, self.total,
                           self.what, self._elapsed())

    def _elapsed(self) -> str:
        s = int(time.monotonic() - self._start)
        return f"{s // 60}:{s % 60:02d}"

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, kind, error, traceback) -> None:
        self.close(error)
