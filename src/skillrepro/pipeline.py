"""Glue shared by the workflow: a job's start-up (its log, its settings checked against its rule's
fingerprint, typed), a run's identity and settings, locks of killed runs."""
from __future__ import annotations

import json
import logging
import os
import socket
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable

from skillrepro import check
from skillrepro.agent import Prompts
from skillrepro.config import BenchmarkConfig, LLMConfig
from skillrepro.llm.client import use_ledger
from skillrepro.llm.ledger import Ledger
from skillrepro.methods import Variant
from skillrepro.progress import JOB, PROGRESS_LOGGER
from skillrepro.skills.isolation import SandboxPolicy
from skillrepro.skills.sandbox import probe
from skillrepro.studies.speedrunner import paths


class SettingsError(RuntimeError):
    """A job's settings are not those its outputs are recorded under: its rule's fingerprint is not the config's
    (Snakemake's records lost or stale), or its run's folder was started under others. It stops before any work."""


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
    return logging.getLogger(f"skillrepro.{snakemake.rule}")


def announce_logs(log: Any, backend: str) -> None:
    """The first lines of a run: where its logs are."""
    log.info("Logs: each job writes logs/... (its `log:` file, named in the job's listing); long jobs also print "
             f"their progress here. The LLM server's log: logs/llm_server_{backend}.log; Snakemake's own: "
             ".snakemake/log/.")


def run_id(wildcards: Any) -> str:
    return paths.run_id(wildcards.bench, wildcards.variant, wildcards.seed)


def training_history(library_dir: Path, k: int) -> tuple[Path, ...]:
    """The folders of a run's training batches 0..k-1, which rollout k and sleep phase k read. Their rules
    list only batch k-1 as input: every earlier batch is its ancestor through the library chain, and listing
    them all made the DAG quadratic in the cycles. So check here that each one is complete."""
    train = Path(library_dir).parent.parent / "train"
    dirs = tuple(train / f"batch{i}" for i in range(k))
    missing = [str(d) for d in dirs if not (d / "episodes.parquet").exists()]
    if missing:
        raise FileNotFoundError(f"training batches this job reads are missing: {', '.join(missing)}")
    return dirs


def seeded(llm: LLMConfig, seed: int) -> LLMConfig:
    """The run's sampling seed: each training seed samples differently, reproducibly."""
    return replace(llm, seed=llm.seed + 1000 * int(seed))


@dataclass(frozen=True)
class RunSettings:
    bench: BenchmarkConfig
    method: Variant  # the run's variant bound to its method
    llm: LLMConfig  # with the run's sampling seed
    sandbox: SandboxPolicy  # config key sandbox.require: every sandbox the job starts must have these layers
    prompts: Prompts  # the actor's (config section actor)


def run_settings(job: Job, snakemake: Any, library_dir: Path) -> RunSettings:
    """The typed settings of this job's run (`job`, started by start_job, whose settings are a LoopJob), once
    the run's folder is known to have been made under the same settings: library v0 records them, and a job
    never extends a run made under others (say, when Snakemake's records were lost and could not rerun it)."""
    manifest = Path(library_dir).parent / "v0" / "manifest.json"
    made = json.loads(manifest.read_text()).get("meta", {}).get("settings")
    if made != snakemake.params.settings:
        raise SettingsError(
            f"run {run_id(snakemake.wildcards)} was started under other settings (fingerprint {made}, this config "
            f"gives {snakemake.params.settings}); rerun it from the start with `--forcerun init_library` (or delete "
            f"{manifest.parent.parent.parent}) so that no run mixes two settings"
        )
    loop = job.settings.loop
    policy = SandboxPolicy(loop.sandbox_require)
    probe(policy)  # logs this machine's layers; a required one that is missing fails the job before any work
    return RunSettings(job.settings.bench, job.settings.method, seeded(loop.llm, snakemake.wildcards.seed), policy,
                       Prompts.configured(loop.actor))


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
