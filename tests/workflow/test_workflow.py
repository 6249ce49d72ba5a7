"""The Snakemake workflow: lint, dry runs (local, paper scale, slurm), and the whole DAG on a tiny config."""
import json
import os
import re
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from skillrepro.skills import Library
from repo import DATA, ROOT, copy_workflow, scheduled, snakemake, study_workflow


def test_lint_is_clean():
    out = snakemake("--lint")
    assert "Congratulations" in out.stdout + out.stderr


def test_paper_scale_dry_run_builds_every_job(tmp_path):
    # The paper's model is billed and its preset ships no prices: a user plans before paying, so the dry run
    # plans without the key and the prices and says what a real run needs ...
    no_key = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    out = snakemake("results/tables/main.csv", "-n", "--cores", "8", "--configfile", "configs/paper.yaml", env=no_key)
    text = out.stdout
    assert "Shell command" not in text + out.stderr  # every rule is a script: no "Shell command: None" per job
    for need in ("llm.api_key_env: environment variable OPENAI_API_KEY is not set",
                 "pricing.gpt-5.4-mini: every rate is 0"):
        assert f"a real run will refuse to start until this is fixed: config key {need}" in text + out.stderr
    # ... and a real run refuses before its first job, naming the variable (here with one cheap target).
    refused = snakemake("--cores", "1", "--configfile", str(ROOT / "configs/paper.yaml"), "--directory", str(tmp_path),
                        "results/tasks/babyai/seed0/test.json", env=no_key, check=False)
    assert refused.returncode != 0 and "OPENAI_API_KEY is not set" in refused.stdout + refused.stderr
    assert not (tmp_path / "results").exists()
    # Every (benchmark, variant, seed) of the preset, and only those, x 3 seeds: react, speedrunner and opo
    # on the 7 benchmarks (T4-after-T3 included); two ablations on babyai; no-interpreter on the 4 main
    # benchmarks (figure 7); asi on 4 (+ asi-crafter), asi_replay on ScienceWorld electricity (G.3), voyager
    # on the 3 Crafter variants.
    runs = {l.split("results/runs/")[1].split("/eval")[0] for l in text.splitlines()
            if "output:" in l and "/eval/v20/episodes.parquet" in l}
    assert len(runs) == 3 * (7 * 3 + 2 + 4 + 4 + 1 + 1 + 3)
    benches = lambda variant: {r.split("/")[0] for r in runs if r.split("/")[1] == variant}  # noqa: E731
    assert benches("speedrunner-asi_prompt") == benches("speedrunner-all_public") == {"babyai"}
    assert benches("voyager") == {"crafter", "crafter_zombie0x", "crafter_zombie2x"}
    assert benches("asi_replay") == {"sciworld_electricity"}
    assert "rollout" in text and "induce" in text and "evaluate" in text


def gpus_per_rule(dry_run: str) -> dict[str, set[int]]:
    """rule -> the `gpu` values its jobs ask for in a dry run's listing (0 where a job names none)."""
    asked: dict[str, set[int]] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", dry_run):  # a job's listing starts at its rule's line
        head = [line for line in block.splitlines() if line.startswith(("rule ", "localrule "))]
        res = [line for line in block.splitlines() if line.strip().startswith("resources:")]
        if head and res:
            gpu = [int(kv.split("=")[1]) for kv in res[0].split(": ", 1)[1].split(", ") if kv.startswith("gpu=")]
            asked.setdefault(head[0].split()[1].rstrip(":"), set()).add(gpu[0] if gpu else 0)
    return asked


# The environment of a user who exported no server URL (the session's llm_url fixture exports one): LLM jobs
# then start their server on their node, and ask for it.
UNSERVED = {k: v for k, v in os.environ.items() if k != "SKILLREPRO_LLM_URL"}


def test_slurm_profile_dry_run():
    # --forceall: list every job even when an earlier local run left results/ behind.
    out = snakemake("--profile", "profiles/slurm", "-n", "--forceall", "results/tables/main.csv", env=UNSERVED)
    assert "rollout" in out.stdout and "This was a dry-run" in out.stdout
    # The embedded model runs on the job's CPUs: no job asks the cluster for a GPU.
    asked = gpus_per_rule(out.stdout)
    assert {"rollout", "induce", "evaluate", "tables"} <= set(asked)
    assert set().union(*asked.values()) == {0}
    # Resources follow what a job does: react's and reference's sleep phases (carry_library) do nothing and
    # ask for the defaults; SpeedRunner's (induce) asks for its own process, a sandboxed call and the llama.cpp
    # server of config.yaml's inducer.model, the 1.5B, on its node (rules/common.smk: (400 + 1024 + 1066 +
    # 28 x 2 x 8192 / 1024 + 250) x 1.5 MB, 1 + 2 threads), not the 32 GB and 8 CPUs the profile once gave every
    # LLM job; no job asks for Snakemake's 50 GB of disk.
    jobs = [(re.search(r"(?:local)?rule (\w+):", block), re.search(r"variant=(\w+)", block),
             re.search(r"resources: (.*)", block)) for block in re.split(r"\n(?=(?:local)?rule \w+:)", out.stdout)]
    jobs = [(rule[1], variant[1] if variant else None, dict(kv.split("=", 1) for kv in res[1].split(", ")))
            for rule, variant, res in jobs if rule and res]
    sleeps = {(rule, variant): (res["mem_mb"], res["cpus_per_task"]) for rule, variant, res in jobs
              if rule in ("induce", "carry_library")}
    assert sleeps == {("induce", "speedrunner"): ("4800", "3"), ("carry_library", "react"): ("4000", "1"),
                      ("carry_library", "reference"): ("4000", "1")}
    assert all(res["disk_mb"] in ("1000", "<TBD>") for _, _, res in jobs), {r["disk_mb"] for _, _, r in jobs}


def test_slurm_profile_asks_a_gpu_only_for_llm_jobs_that_start_vllm(tmp_path):
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg["llm"].update(backend="vllm", base_url=None)  # (with a base_url, none: rules/common.smk LLM_GPUS)
    path = tmp_path / "vllm.yaml"
    path.write_text(yaml.safe_dump(cfg))
    args = ("--profile", "profiles/slurm", "-n", "--forceall", "results/tables/main.csv", "--configfile", str(path))
    out = snakemake(*args, env=UNSERVED)
    asked = gpus_per_rule(out.stdout)
    llm_jobs = {"rollout", "induce", "evaluate"}
    # each LLM job starts `vllm serve` on its node; no other job needs a GPU
    assert {rule: asked[rule] for rule in llm_jobs} == {rule: {1} for rule in llm_jobs}
    assert set().union(*(v for rule, v in asked.items() if rule not in llm_jobs)) == {0}
    # With one long-lived server exported to the jobs (docs/cluster.md), none asks for a GPU, and an
    # induce job asks for its own process and a sandboxed call only: (400 + 1024) x 1.5 MB, one CPU.
    out = snakemake(*args, env=dict(UNSERVED, SKILLREPRO_LLM_URL="http://gpu-node:8000/v1"))
    assert set().union(*gpus_per_rule(out.stdout).values()) == {0}
    induce = re.search(r"rule induce:\n(?:    .*\n)*?    resources: (.*)", out.stdout)[1]
    assert "mem_mb=2200," in induce and "cpus_per_task=1," in induce, induce


def test_bad_config_stops_before_any_job(tmp_path):
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg["methods"]["react"]["method"] = "telepathy"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    out = snakemake("-n", "--configfile", str(bad), check=False)
    assert out.returncode != 0
    known = ("config key methods.react.method: 'telepathy' is not allowed; allowed values: asi, asi_replay, opo, react, "
             "reference, speedrunner, voyager")
    assert known in out.stdout + out.stderr


@pytest.mark.workflow
def test_tiny_run_end_to_end_then_only_the_figure_reruns(tiny_run):
    tmp_path, console = tiny_run  # `snakemake all` on tests/data/tiny.yaml, with its report (conftest.py)
    cfg = str(DATA / "tiny.yaml")
    # The console says where the logs are and how far the long jobs are (lines from the jobs' stderr).
    assert "Logs: each job writes logs/" in console
    assert "rollout bench=babyai, variant=speedrunner, seed=0, k=1: 1/1 train episodes done" in console
    assert "2/2 test episodes done" in console and "1/1 sleep phase" in console

    main = pd.read_csv(tmp_path / "results/tables/main.csv")
    assert list(main.variant) == ["react", "speedrunner"]
    # Shareable: tables, figures, records and libraries have the umask's modes (0644, folders 0755).
    run = tmp_path / "results/runs/babyai/speedrunner/seed0"
    for path in ("results/tables/main.csv", "results/figures/figure2.png", run / "eval/v2/episodes.parquet",
                 run / "library/v1/manifest.json"):
        assert oct((tmp_path / path).stat().st_mode & 0o777) == oct(0o644), path
    assert oct((run / "library/v1").stat().st_mode & 0o777) == oct(0o755)
    for _, row in main.iterrows():
        assert (row.benchmark, row.method, row.n_seeds, row.n_episodes) == ("babyai", row.variant, 1, 2)
        assert row.library_version == 2 and row.train_rollouts == 2
        assert 1 <= row.llm_calls_per_episode <= 4 and row.output_tokens_per_episode_mean > 0
        assert 0 < row.cached_token_ratio < 1 and row.cost_per_episode == 0
    checkpoints = pd.read_csv(tmp_path / "results/tables/checkpoints.csv")
    assert list(checkpoints.library_version) == [0, 2, 0, 2]
    # How every episode ended, test checkpoints and training batches: each of the real model's episodes counted once,
    # none by a full context (so no row is flagged)
    ends = pd.read_csv(tmp_path / "results/tables/terminations.csv", keep_default_na=False)
    test_ends = ends[ends.split == "test"]
    assert list(zip(test_ends.variant, test_ends.library_version)) == list(zip(checkpoints.variant, checkpoints.library_version))
    assert (test_ends.episodes == 2).all() and ends[ends.split == "train"].episodes.sum() == 4
    assert (ends[["success", "env_done", "budget", "wall_clock", "context"]].sum(axis=1) == ends.episodes).all()
    assert (ends.context == 0).all() and (ends.flag == "").all()
    # SpeedRunner's sleep phases ran the inducer on the real model and wrote v1, v2; ReAct's carried v0 on.
    graph = pd.read_csv(tmp_path / "results/tables/callgraph.csv")
    assert sorted(graph[graph.variant == "speedrunner"].version) == [0, 1, 2]
    assert (graph[graph.variant == "react"]["size"] == 0).all()
    inducer = tmp_path / "results/runs/babyai/speedrunner/seed0/induce"
    assert sorted(p.name for p in inducer.iterdir()) == ["v1", "v2"]
    for v in ("v1", "v2"):  # each sleep phase: its 2 requests logged twice, and what it saved parses
        log = [json.loads(x) for x in (inducer / v / "transcript.jsonl").read_text().splitlines()]
        calls = pq.read_table(inducer / v / "llm_calls.parquet").to_pylist()
        assert len(calls) == len(log) == 2 and all(c["completion_tokens"] > 0 for c in calls)
        library = Library.load(run / "library" / v)
        for f in library.functions:
            compile(f.source, f.name, "exec")
        # SmolLM2 saved a function on its own, or its last request was the nudge, pre-filled with the start of a
        # write_function call, and the reply was read as that call: saved, or refused with the reason named, or (v2)
        # the function v1 saved written again word for word, which saves nothing and says so.
        # Whether a 135M model's code passes the checks is a draw (3 of 6 sessions over seeds 1-6 saved one).
        if library.meta["writes_accepted"] == 0:
            assert log[-1]["prefill"].startswith("Action: write_function") and log[-1]["tool"] == "write_function"
            # "Unchanged" only where there was something to repeat: a function v1 saved
            repeatable = v == "v2" and Library.load(run / "library" / "v1").functions
            assert log[-1]["observation"].startswith(("Error:", "Unchanged:") if repeatable else "Error:"), log[-1]
    log = (tmp_path / "logs/runs/babyai/react/seed0/rollout_batch0.log").read_text()
    assert "train task=" in log and "success=" in log and "output_tokens=" in log
    assert (tmp_path / "results/timings/runs/babyai/react/seed0/rollout_batch0.tsv").exists()

    # The paper's tables from the same real records: paired tests, table 1 over the final libraries.
    stats = pd.read_csv(tmp_path / "results/tables/stats.csv")
    assert set(stats.metric) == {"success", "output_tokens"} and (stats.n == 2).all()
    assert list(stats.baseline.unique()) == ["react"] and list(stats.speedrunner.unique()) == ["speedrunner"]
    table1 = pd.read_csv(tmp_path / "results/tables/table1.csv")
    assert list(table1.variant) == ["react", "speedrunner"] and (table1.version == 2).all()
    for n in (2, 3, 4, 5, 6, 7, 11, 12):
        assert (tmp_path / f"results/figures/figure{n}.png").stat().st_size > 5000

    # The report bundles every table and figure with its caption, naming the config that made it.
    html = (tmp_path / "report.html").read_text()
    for name in ("main.csv", "stats.csv", "table1.csv", "figure2.png", "figure11.png"):
        assert name in html
    assert f"Made from {cfg} (model smollm2-135m, embedded backend" in html
    assert "Two-sided paired t-tests" in html and "Figure 3: dollar cost per training episode" in html

    # Editing a figure script re-makes that figure and nothing else.
    figure = tmp_path / "workflow/scripts/speedrunner/figure_2.py"
    script = figure.read_text()
    figure.write_text(script + "\n# edited\n")
    try:
        dry = snakemake("all", "-n", "--cores", "2", "--configfile", cfg, cwd=tmp_path)
    finally:  # the folder is shared with test_views
        figure.write_text(script)
    assert scheduled(dry.stdout) - {"all"} == {"figure_2"}

    # Removing a variant from the config removes it from main.csv: only the tables rerun, from fewer files.
    react_only = tmp_path / "react_only.yaml"
    tiny = yaml.safe_load(Path(cfg).read_text())
    del tiny["methods"]["speedrunner"]
    react_only.write_text(yaml.safe_dump(tiny))
    try:
        snakemake("results/tables/main.csv", "--cores", "2", "--configfile", str(react_only), cwd=tmp_path)
        assert list(pd.read_csv(tmp_path / "results/tables/main.csv").variant) == ["react"]
    finally:  # the folder is shared with test_views: the table of the whole run again
        snakemake("results/tables/main.csv", "--cores", "2", "--configfile", cfg, cwd=tmp_path)


@pytest.mark.workflow
def test_every_benchmark_runs_through_the_dag_with_react(tmp_path):
    copy_workflow(tmp_path)
    cfg = str(DATA / "all_benchmarks.yaml")
    snakemake("results/tables/main.csv", "--cores", "2", "--configfile", cfg, cwd=tmp_path)
    main = pd.read_csv(tmp_path / "results/tables/main.csv")
    assert set(main.benchmark) == {"sciworld_electricity", "crafter_z2", "alfworld"}
    assert (main.n_episodes == 1).all() and (main.variant == "react").all()
    assert (main.llm_calls_per_episode > 0).all()
    crafter = main[main.benchmark == "crafter_z2"].iloc[0]
    assert 0 <= crafter.progression_mean <= 1


@pytest.mark.workflow
def test_a_speedrunner_table_of_a_config_without_runs_fails_naming_methods(tmp_path):
    """A config that sets SpeedRunner's protocol but no method asked for main.csv: the analytics job fails saying
    the config runs no SpeedRunner method, and no header-only table is written to pass for a result. (A config
    with none of SpeedRunner's sections stops before any job: tests/studies/test_study_contract.py.)"""
    config = yaml.safe_load((DATA / "tiny.yaml").read_text())
    config.pop("methods")
    study_workflow(tmp_path, config)
    out = snakemake("results/tables/main.csv", "--cores", "1", cwd=tmp_path, check=False)
    assert out.returncode != 0
    assert "config section `methods` is not set" in out.stdout + out.stderr
    assert "config section `methods` is not set" in (tmp_path / "logs/analytics.log").read_text()
    assert not (tmp_path / "results/tables/main.csv").exists()
