"""Glue shared by the workflow: a job's start-up (its log, its settings checked against its rule's
fingerprint, typed), locks of killed runs."""
from __future__ import annotations

import json
import logging
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from skillrepro import check
from skillrepro.llm.client import use_ledger
from skillrepro.llm.ledger import Ledger
from skillrepro.progress import JOB, PROGRESS_LOGGER
from skillrepro.studies.contract import SettingsError


@dataclass(frozen=True)
class Job:
    """A started job: its logger, and the typed settings its rule's `settings` fingerprint was made from."""

    log: logging.Logger
    study: str | None  # None for a job whose rule reads no settings (a figure of finished tables, say)
    kind: str | None
    settings: Any  # the study's (its Study.job): SpeedRunner's LoopJob, scaffold's ScaffoldJob, kvcache's KVJob


def start_job(snakemake: Any) -> Job:
    """The one start of a workflow script: logging to the rule's log file; then, where the rule carries a
    `settings` param ("<study>/<kind>:<digest>", skillrepro.check.job_fingerprint), the study's settings rebuilt
    from the config, their fingerprint recomputed for this job's wildcards and compared (a SettingsError names
    both), and the job's typed settings."""
    log = setup_logging(snakemake)
    use_ledger(Ledger.for_run(getattr(snakemake, "config", None) or {}))  # the run's response cache and dollar cap
    recorded = getattr(snakemake.params, "settings", None)
    if recorded is None:
        return Job(log, None, None, None)
    head, _, _ = str(recorded).partition(":")
    name, _, kind = head.partition("/")
    study, w, c = check.study(name), snakemake.wildcards, snakemake.config
    built = study.settings(c)
    values = study.keyed(w)
    made = check.job_fingerprint(c, name, kind, built=built, **values)
    if made != recorded:
        raise SettingsError(f"job {snakemake.rule} ({dict(w.items())}): its rule's settings fingerprint {recorded} "
                            f"is not the config's ({made}); rerun it through snakemake")
    typed = study.job(c, built, kind, values, snakemake.params) if study.job else built
    return Job(log, name, kind, typed)


def setup_logging(snakemake: Any) -> logging.Logger:
    """Log to the rule's log file, progress lines (`Progress`) also to stderr (everything to stderr when run
    by hand); returns the script's logger."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if snakemake.log:
        console = logging.StreamHandler(sys.stderr)
        console.addFilter(lambda record: record.name == PROGRESS_LOGGER)
        console.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        handlers = [logging.FileHandler(snakemake.log[0], mode="w"), console]
    logging.basicConfig(level=logging.INFO, handlers=handlers, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "httpx2", "openai", "httpcore", "httpcore2"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    wildcards = getattr(snakemake, "wildcards", None)
    named = ", ".join(f"{k}={v}" for k, v in wildcards.items()) if hasattr(wildcards, "items") else ""
    JOB.update(name=f"{snakemake.rule} {named}".strip(), log=snakemake.log[0] if snakemake.log else "")
    log = logging.getLogger(f"skillrepro.{snakemake.rule}")
    if snakemake.log:  # a job that dies says why in its own log too, not only on Snakemake's console
        console_hook = sys.excepthook

        def log_failure(kind: type, error: BaseException, trace: Any) -> None:
            log.error("the job failed", exc_info=(kind, error, trace))
            console_hook(kind, error, trace)

        sys.excepthook = log_failure
    return log


def announce_logs(log: Any, backend: str) -> None:
    """The first lines of a run: where its logs are."""
    log.info("Logs: each job writes logs/... (its `log:` file, named in the job's listing); long jobs also print "
             f"their progress here. The LLM server's log: logs/llm_server_{backend}.log; Snakemake's own: "
             ".snakemake/log/.")


# ----------------------------------------------------------------------------------------------------------
# Locks left by a killed snakemake. Snakemake locks its outputs for the length of a run and refuses every
# later run until `--unlock` if it was killed. We note which lock files each run holds and who holds them;
# a later run on the same machine removes the locks of a holder that is gone, so the plain rerun command
# works after kill -9. A holder that is alive, or on another host, is never touched.
OWNERS = Path(".snakemake") / "skillrepro_lock_owners"


def record_lock_owner(lock_files: Iterable[str]) -> None:
    """Note that this process holds `lock_files` (called from `onstart`, once snakemake has locked)."""
    me = {"pid": os.getpid(), "started": _process_start(os.getpid()), "host": socket.gethostname(),
          "locks": sorted(str(Path(f).resolve()) for f in lock_files)}
    OWNERS.mkdir(parents=True, exist_ok=True)
    (OWNERS / f"{os.getpid()}.json").write_text(json.dumps(me))


def release_stale_locks() -> list[str]:
    """Remove the lock files of snakemake runs on this host that no longer exist; return what was removed.
    A lock file newer than its owner's note belongs to a later run and stays."""
    removed = []
    for note in sorted(OWNERS.glob("*.json")) if OWNERS.is_dir() else []:
        try:
            owner = json.loads(note.read_text())
            noted = note.stat().st_mtime
        except (OSError, ValueError):
            continue
        if owner.get("host") != socket.gethostname() or _process_start(owner["pid"]) == owner["started"]:
            continue  # another machine's run, or still running
        for lock in map(Path, owner["locks"]):
            if lock.exists() and lock.stat().st_mtime <= noted:
                lock.unlink()
                removed.append(str(lock))
        note.unlink(missing_ok=True)
    return removed


def _process_start(pid: int) -> str | None:
    """The start time of process `pid` in clock ticks since boot (tells a reused pid apart), None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None
