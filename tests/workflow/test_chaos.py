"""Kill -9 at chosen moments loses no finished episode, and the plain rerun command works after it.

The whole snakemake process group (scheduler, LLM server, jobs) is killed with SIGKILL: between a batch's
merge and Snakemake's record of it, after the first finished episode of a later batch, and while the server
starts. After each kill the same command is run again, with no --unlock; at the end the tables hold every
episode finished before a kill, unchanged (same ids, same records), plus the new ones."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from repo import ROOT

CONFIG = ROOT / "tests" / "data" / "chaos.yaml"
COMMAND = [sys.executable, "-m", "snakemake", "results/tables/main.csv", "--cores", "2", "--configfile", str(CONFIG)]

# Appended to the copied rollout script: once, after batch 0 has merged its tables, kill the whole run.
KILL_AFTER_MERGE = """
import os as _os, signal as _signal
_flag = _os.environ.get("CHAOS_KILL_AFTER_MERGE", "")
if w.k == "0" and _flag and _os.path.exists(_flag):
    _os.unlink(_flag)
    _os.killpg(_os.getpgid(0), _signal.SIGKILL)
"""


def start(workdir: Path, env: dict) -> subprocess.Popen:
    log = open(workdir / "snakemake.out", "ab")
    return subprocess.Popen(COMMAND, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def finished_episodes(workdir: Path) -> dict[str, dict]:
    """Every finished episode on disk: declared outputs, merged tables and per-episode files of resume folders.
    A live run removes a resume folder once its batch is merged: a scan that meets one vanishing starts again."""
    while True:
        try:
            return {r["episode_id"]: r for f in (workdir / "results" / "runs").rglob("*episodes.parquet")
                    for r in pq.read_table(f).to_pylist()}
        except FileNotFoundError:
            continue


def wait_for(predicate, proc: subprocess.Popen, timeout_s: float = 1800) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert proc.poll() is None, "the run ended before the moment of the kill"
        assert time.monotonic() < deadline, "the moment of the kill never came"
        time.sleep(0.05)


def kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


@pytest.mark.workflow
def test_kill_minus_nine_at_any_moment_loses_no_finished_episode(tmp_path):
    for part in ("Snakefile", "config.yaml", "rules", "workflow", "envs", "profiles"):
        src = ROOT / part
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / part)
    rollout = tmp_path / "workflow" / "scripts" / "speedrunner" / "rollout.py"
    rollout.write_text(rollout.read_text() + KILL_AFTER_MERGE)
    flag = tmp_path / "kill-after-merge"
    flag.touch()
    # The run starts its own LLM server (step 3 kills it as it comes up), not the suite's shared one, which an
    # earlier test's fixture may have exported.
    unserved = {k: v for k, v in os.environ.items() if k != "SKILLREPRO_LLM_URL"}
    env = {**unserved, "CHAOS_KILL_AFTER_MERGE": str(flag), "PYTHONPATH": str(ROOT / "src")}
    before: dict[str, dict] = {}
    procs: list[subprocess.Popen] = []
    try:
        _kill_and_rerun(tmp_path, env, flag, before, procs)
    finally:  # a failed or timed-out test leaves no snakemake behind (it runs in its own session)
        for p in procs:
            kill(p)


def _kill_and_rerun(tmp_path: Path, env: dict, flag: Path, before: dict, procs: list) -> None:
    # 1. Batch 0 merged its tables; snakemake has not recorded the job yet.
    proc = start(tmp_path, env)
    procs.append(proc)
    assert proc.wait(timeout=1800) == -signal.SIGKILL and not flag.exists()
    batch0 = tmp_path / "results/runs/babyai/react/seed0/train/batch0/episodes.parquet"
    assert batch0.exists()
    before |= finished_episodes(tmp_path)
    assert sum(r["split"] == "train" for r in before.values()) == 2  # the test at v0 may have run beside it

    # 2. The same command again (no --unlock): batch 0 is restored, not replayed; kill as soon as a later
    #    batch or evaluation has finished an episode (the unfinished v0 evaluation may come first: wait for
    #    batch 0's rerun to say what it did, too).
    log_file = tmp_path / "logs/runs/babyai/react/seed0/rollout_batch0.log"
    first_log = log_file.stat().st_mtime_ns

    def batch0_rerun_spoke() -> bool:
        if not log_file.exists() or log_file.stat().st_mtime_ns == first_log:
            return False
        text = log_file.read_text()
        return "already merged before an interruption" in text or "train task=" in text

    proc = start(tmp_path, env)
    procs.append(proc)
    wait_for(lambda: batch0_rerun_spoke() and len(finished_episodes(tmp_path)) > len(before), proc)
    kill(proc)
    assert "already merged before an interruption" in log_file.read_text()
    before |= finished_episodes(tmp_path)

    # 3. Killed as soon as the LLM server is up, before or while the first jobs start.
    proc = start(tmp_path, env)
    procs.append(proc)
    wait_for(lambda: (tmp_path / ".snakemake" / f"llm_server_{proc.pid}.url").exists(), proc)
    kill(proc)

    # 4. Run to the end.
    proc = start(tmp_path, env)
    procs.append(proc)
    assert proc.wait(timeout=1800) == 0, (tmp_path / "snakemake.out").read_text()[-3000:]
    final = {}
    for f in (tmp_path / "results/runs").glob("babyai/react/seed0/*/*/episodes.parquet"):  # declared outputs only
        for r in pq.read_table(f).to_pylist():
            assert r["episode_id"] not in final
            final[r["episode_id"]] = r
    assert len(final) == 4 + 2  # 4 training rollouts, 1 test task at v0 and v2
    for episode_id, row in before.items():
        assert final.get(episode_id) == row, f"finished episode {episode_id} was lost or changed"
    # The run succeeded: every job is recorded, so the resume folders are gone.
    assert not list((tmp_path / "results/runs").rglob(".*.partial"))


def test_only_the_locks_of_a_snakemake_that_is_gone_are_released(tmp_path, monkeypatch):
    from skillrepro import pipeline

    monkeypatch.chdir(tmp_path)
    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale, mine = locks / "0.input.lock", locks / "1.input.lock"
    for f in (stale, mine):
        f.write_text("results/x\n")
    pipeline.OWNERS.mkdir(parents=True)
    note = {"pid": gone.pid, "started": "1", "host": socket.gethostname(), "locks": [str(stale.resolve())]}
    (pipeline.OWNERS / f"{gone.pid}.json").write_text(json.dumps(note))
    pipeline.record_lock_owner([mine])  # this process: alive
    assert pipeline.release_stale_locks() == [str(stale.resolve())]
    assert not stale.exists() and mine.exists()
    # A lock written after the dead owner's note belongs to a later run and stays.
    note["locks"] = [str(mine.resolve())]
    (pipeline.OWNERS / f"{gone.pid}.json").write_text(json.dumps(note))
    os.utime(mine, (time.time() + 60, time.time() + 60))
    assert pipeline.release_stale_locks() == [] and mine.exists()
