"""The cluster profile run for real: a one-node Slurm on this machine (tests/slurm/up.sh: munged, slurmctld,
slurmd, no accounting database) runs the tiny workflow through snakemake-executor-plugin-slurm with
`--profile profiles/slurm`, against a real llama.cpp server (SmolLM2) reached by its URL, as jobs on other nodes
reach a served model. One evaluation is cancelled with scancel while it plays; the rerun redoes it and nothing
that had finished, and main.csv equals the same workflow's local result. Cost: 10.6 and 12.1 min in two runs on
a loaded 2-core machine (docs/cluster.md).

Needs root and Debian's slurm-wlm and munge (.ci/run installs them); without them it fails, naming what is missing.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from repo import ROOT, copy_workflow, snakemake

pytestmark = pytest.mark.slurm

SLURM = ROOT / "tests" / "slurm"
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "srun")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The environment in which Slurm's commands reach the one-node cluster; torn down afterwards."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.fail(f"a one-node Slurm needs {', '.join(missing)}: apt-get install -y slurm-wlm munge (.ci/run does)",
                    pytrace=False)
    if os.geteuid() != 0:
        pytest.fail("a one-node Slurm needs root (munged and slurmd run as root in tests/slurm/up.sh)", pytrace=False)
    where = tmp_path_factory.mktemp("slurm")
    up = subprocess.run([str(SLURM / "up.sh"), str(where)], capture_output=True, text=True, timeout=120)
    if up.returncode != 0:
        subprocess.run([str(SLURM / "down.sh"), str(where)], capture_output=True)
        pytest.fail(f"tests/slurm/up.sh could not bring up Slurm: {(up.stderr or up.stdout).strip().splitlines()[-1:]}",
                    pytrace=False)
    try:
        yield dict(os.environ, SLURM_CONF=str(where / "slurm.conf"))
    finally:
        subprocess.run([str(SLURM / "down.sh"), str(where)], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def same_replies_server():
    """A real llama.cpp server (SmolLM2) whose replies depend on the request alone: one slot and no prompt
    cache, so the local run and the cluster run get the same replies although their jobs reach it in another
    order (with a shared prompt cache a reused prefix changes the logits in the last bits, and a sampled token
    then differs: measured, the two runs' main.csv differed in output tokens). Exported as SKILLREPRO_LLM_URL,
    as a served model is to cluster jobs (sbatch --export=ALL)."""
    from skillrepro.llm import servers

    server = servers.serve_embedded("smollm2-135m", slots=1, ctx_per_slot=4096, threads=2, cache_prompt=False)
    url = server.listening_address + "/v1"
    servers.wait_healthy(url, None, 120)
    yield url
    del server


def tiny_config(path: Path) -> str:
    """The tiny workflow (tests/data/tiny.yaml: SmolLM2 on BabyAI) cut to SpeedRunner, one training rollout,
    one sleep phase and one test task at v0 and v1, two actor calls an episode: 9 jobs, all on the cluster
    (rollout, induce and evaluate are LLM jobs)."""
    cfg = yaml.safe_load((ROOT / "tests" / "data" / "tiny.yaml").read_text())
    del cfg["methods"]["react"]
    cfg["benchmarks"]["babyai"]["llm_call_budget"] = 2
    cfg["protocol"].update(train_rollouts=1, sleep_every=1, eval_every=1, n_test=1)
    cfg["budgets"]["inducer_requests"] = 1
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def outputs(wd: Path) -> dict[str, float]:
    """Every file under results/ and its modification time, but for the resume folders of batches (hidden
    .partial folders: episodes a killed job had finished; the run removes them once it is complete)."""
    return {str(p.relative_to(wd)): p.stat().st_mtime for p in (wd / "results").rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(wd).parts)}


def started(console: str) -> list[tuple[str, str]]:
    """(rule, wildcards) of every job an invocation started, from its console ('' where a job has none)."""
    found = []
    for block in re.split(r"\n(?=\[\w{3} \w{3} )", console):
        rule = re.search(r"^(?:local)?rule (\w+):$", block, re.M)
        if rule:
            wildcards = re.search(r"^    wildcards: (.*)$", block, re.M)
            found.append((rule[1], wildcards[1] if wildcards else ""))
    return found


def test_tiny_workflow_on_slurm_survives_scancel_and_equals_the_local_run(cluster, same_replies_server, tmp_path):
    t0 = time.monotonic()
    cluster = dict(cluster, SKILLREPRO_LLM_URL=same_replies_server)
    cfg = tiny_config(tmp_path / "tiny_slurm.yaml")
    local, remote = tmp_path / "local", tmp_path / "slurm"
    for wd in (local, remote):
        wd.mkdir()
        copy_workflow(wd)

    # The reference: the same workflow run locally against the same server.
    snakemake("results/tables/main.csv", "--cores", "2", "--configfile", cfg, cwd=local, env=cluster)
    t_local = time.monotonic() - t0

    # On the cluster, through the profile as a user runs it; the plugin's first status check after 2 s, not
    # its default 40 s, keeps the test short.
    cmd = [sys.executable, "-m", "snakemake", "results/tables/main.csv", "--profile", str(ROOT / "profiles/slurm"),
           "--configfile", cfg, "--slurm-init-seconds-before-status-checks", "2"]
    console_file = tmp_path / "first.console"
    with open(console_file, "w") as out:  # a file, not a pipe nobody reads until the end
        first = subprocess.Popen(cmd, cwd=remote, env=cluster, stdout=out, stderr=subprocess.STDOUT)
    victim = None
    deadline = time.monotonic() + 900
    while victim is None and first.poll() is None and time.monotonic() < deadline:
        queue = subprocess.run(["squeue", "--noheader", "--states=RUNNING", "--format=%i|%k|%M"], env=cluster,
                               capture_output=True, text=True).stdout
        for line in queue.splitlines():
            jobid, comment, _ = line.split("|")
            if comment.startswith("rule_evaluate_wildcards_"):  # an LLM job, once it plays its episode
                # the plugin's comment: rule_evaluate_wildcards_<bench>_<variant>_<seed>_<k>, the values in order
                bench, variant, seed, k = comment.split("_wildcards_")[1].split("_")
                log = remote / f"logs/runs/{bench}/{variant}/seed{seed}/evaluate_v{k}.log"
                if log.exists() and "test episodes to do" in log.read_text():
                    victim = (jobid, comment)
                    break
        else:
            time.sleep(0.5)
    assert victim is not None, "no evaluate job was seen playing its episode on the cluster"
    subprocess.run(["scancel", victim[0]], env=cluster, check=True)
    first.wait(timeout=900)
    console = console_file.read_text()
    t_first = time.monotonic() - t0
    assert first.returncode != 0, console[-3000:]
    assert f"SLURM-job '{victim[0]}' failed, SLURM status is: 'CANCELLED'" in console, console[-3000:]
    before = outputs(remote)
    # The cancelled evaluation left no output behind (Snakemake removes an unfinished job's files).
    victim_dir = f"results/runs/{bench}/{variant}/seed{seed}/eval/v{k}/"
    assert not [p for p in before if p.startswith(victim_dir)], sorted(before)
    assert "results/tasks/babyai/seed0/test.json" in before, sorted(before)  # what the evaluation read
    assert "results/runs/babyai/speedrunner/seed0/train/batch0/episodes.parquet" in before, sorted(before)

    rerun = snakemake(*cmd[3:], cwd=remote, env=cluster)
    t_rerun = time.monotonic() - t0
    after = outputs(remote)
    # Nothing lost: every file the first invocation finished is the same file after the rerun (not remade);
    # the rerun started the cancelled evaluation again and no other job the first one had started (Snakemake
    # let those finish before it stopped).
    assert {p: after.get(p) for p in before} == before
    victim_job = ("evaluate", f"bench={bench}, variant={variant}, seed={seed}, k={k}")
    redone, first_jobs = started(rerun.stdout + rerun.stderr), started(console)
    assert victim_job in redone and victim_job in first_jobs, (redone, first_jobs)
    assert set(redone) & set(first_jobs) == {victim_job}, (redone, first_jobs)
    assert len(first_jobs) + len(redone) == 9 + 1, (redone, first_jobs)  # every job once, the victim twice
    assert any(p.startswith(victim_dir) for p in after)

    ran_here = pd.read_csv(local / "results/tables/main.csv")
    ran_there = pd.read_csv(remote / "results/tables/main.csv")
    pd.testing.assert_frame_equal(ran_there, ran_here)
    print(f"\nslurm test: local run {t_local:.0f} s, cluster run until scancel and exit {t_first - t_local:.0f} s, "
          f"rerun {t_rerun - t_first:.0f} s")


def test_shared_embedded_server_listens_where_other_nodes_reach_it():
    """`skillrepro serve --host 0.0.0.0` (docs/cluster.md: the shared server for jobs on other nodes) answers on
    this machine's network address, not only on 127.0.0.1, and prints a URL that names this node."""
    import urllib.request

    addresses = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    routable = next((a for a in addresses if "." in a and not a.startswith("127.")), None)
    assert routable, f"this machine has no non-loopback IPv4 address to check against: {addresses}"
    proc = subprocess.Popen([sys.executable, "-m", "skillrepro.cli", "serve", "--model", "smollm2-135m", "--slots", "1",
                             "--ctx-per-slot", "512", "--threads", "1", "--host", "0.0.0.0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline().strip()  # export SKILLREPRO_LLM_URL=http://<this node>:<port>/v1
        url = line.removeprefix("export SKILLREPRO_LLM_URL=")
        host, port = re.fullmatch(r"http://([^:/]+):(\d+)/v1", url).groups()
        assert host == os.uname().nodename and host not in ("127.0.0.1", "localhost", "0.0.0.0"), line
        with urllib.request.urlopen(f"http://{routable}:{port}/health", timeout=10) as r:
            assert r.status == 200
    finally:
        proc.terminate()
        proc.wait(30)
