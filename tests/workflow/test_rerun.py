"""After a finished run, a config change reruns exactly the jobs that read the changed setting.

The finished run is made without an LLM: `snakemake --touch` records every job, params included, as a
real run would, and every output file is then created in dependency order.
"""
import copy
import os
import re
import subprocess
import sys

import pytest
import yaml

from repo import copy_workflow

CORE = ("sample_tasks", "init_library", "rollout", "induce", "evaluate")
SLEEP_RULES = {"induce": "induce", "carry_library": "induce"}  # react's sleep phase is carry_library
BASE = {
    "llm": {"backend": "embedded", "model": "qwen2.5-coder-0.5b", "temperature": 0.7, "max_tokens": 96},
    "benchmarks": {"babyai": {"env": "babyai"}, "crafter": {"env": "crafter", "options": {"zombie_frequency": 1.0}}},
    "methods": {"react": {"method": "react"}, "speedrunner": {"method": "speedrunner"}},
    "protocol": {"task_seed": 42, "seeds": [0], "train_rollouts": 4, "sleep_every": 2, "eval_every": 2, "n_test": 2},
    "budgets": {"rollout_wall_s": 1800, "inducer_requests": 100},
    "pricing": {},
}
RUNS = {f"{b}/{v}" for b in BASE["benchmarks"] for v in BASE["methods"]}


def smk(*args, cwd):
    # A URL in the environment keeps the workflow from starting a model server for a touch or a dry run.
    env = dict(os.environ, SKILLREPRO_LLM_URL="http://127.0.0.1:9/v1")
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def scheduled(stdout: str) -> dict[str, set[str]]:
    """rule -> the jobs a dry run lists for it, each as 'bench/variant[/k]' or 'bench/split'."""
    jobs: dict[str, set[str]] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", stdout):
        head = re.match(r"(?:local)?rule (\w+):", block)
        rule = head and SLEEP_RULES.get(head.group(1), head.group(1))
        if rule not in CORE:
            continue
        wc = dict(re.findall(r"(\w+)=([\w.-]+)", (re.search(r"wildcards: (.*)", block) or [""])[0]))
        key = "/".join(wc[n] for n in ("bench", "variant", "split", "k") if n in wc)
        jobs.setdefault(rule, set()).add(key)
    return jobs


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A workflow folder whose run of BASE is finished and recorded."""
    wf = tmp_path_factory.mktemp("finished")
    copy_workflow(wf)
    (wf / "base.yaml").write_text(yaml.safe_dump(BASE))
    dry = smk("all", "-n", "--configfile", "base.yaml", cwd=wf)
    outputs = [o.strip() for line in dry.splitlines() if line.strip().startswith("output:")
               for o in line.split("output:")[1].split(",")]
    # --touch records every job (params included) while no output exists yet; the files come after, in the
    # order the dry run listed them (inputs first), so their times agree with the DAG.
    smk("all", "--touch", "--configfile", "base.yaml", cwd=wf)
    for out in outputs:
        (wf / out).parent.mkdir(parents=True, exist_ok=True)
        (wf / out).touch()
    assert "Nothing to be done" in smk("all", "-n", "--configfile", "base.yaml", cwd=wf)
    return wf


def changed(finished, change) -> dict[str, set[str]]:
    cfg = copy.deepcopy(BASE)
    change(cfg)
    (finished / "changed.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return scheduled(smk("all", "-n", "--configfile", "changed.yaml", cwd=finished))


def whole_runs(runs, ks=(0, 1), versions=(0, 1, 2)):
    """Every job of these runs but the task draws."""
    return {
        "init_library": set(runs),
        "rollout": {f"{r}/{k}" for r in runs for k in ks},
        "induce": {f"{r}/{k}" for r in runs for k in range(1, len(ks) + 1)},
        "evaluate": {f"{r}/{k}" for r in runs for k in versions},
    }


def set_(path, value):
    def change(cfg):
        *parents, last = path.split(".")
        node = cfg
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return change


@pytest.mark.parametrize("path, value", [
    ("llm.temperature", 0.2),
    ("llm.model", "smollm2-135m"),
    ("llm.max_tokens", 64),
])
def test_an_llm_setting_reruns_every_run_but_not_the_task_draws(finished, path, value):
    assert changed(finished, set_(path, value)) == whole_runs(RUNS)


def test_an_actor_setting_or_a_replaced_prompt_file_reruns_every_run(finished, tmp_path):
    assert changed(finished, set_("actor.restate_skills", True)) == whole_runs(RUNS)
    prompt = tmp_path / "system.txt"
    prompt.write_text("{environment}\n{skills}\n{tools}\n{notes}\n{protocol}\n")
    assert changed(finished, set_("actor.prompts.system", str(prompt))) == whole_runs(RUNS)


def test_a_method_option_reruns_that_variant_only(finished):
    assert changed(finished, set_("methods.speedrunner.options", {"interpreter": False})) == whole_runs(
        {"babyai/speedrunner", "crafter/speedrunner"})


def test_a_call_budget_reruns_that_benchmark_only(finished):
    assert changed(finished, set_("benchmarks.babyai.llm_call_budget", 5)) == whole_runs(
        {"babyai/react", "babyai/speedrunner"})


def test_a_benchmark_option_redraws_its_tasks_and_reruns_its_runs(finished):
    jobs = changed(finished, set_("benchmarks.crafter.options", {"zombie_frequency": 2.0}))
    runs = {"crafter/react", "crafter/speedrunner"}
    assert jobs == {"sample_tasks": {"crafter/train", "crafter/test"}} | whole_runs(runs)


def test_n_test_redraws_the_test_tasks_and_reruns_the_evaluations_only(finished):
    jobs = changed(finished, set_("protocol.n_test", 3))
    assert jobs == {"sample_tasks": {"babyai/test", "crafter/test"},
                    "evaluate": {f"{r}/{k}" for r in RUNS for k in (0, 1, 2)}}


def test_task_seed_redraws_every_task_list(finished):
    jobs = changed(finished, set_("protocol.task_seed", 7))
    expected = whole_runs(RUNS)
    del expected["init_library"]  # library v0 is empty whatever the tasks
    assert jobs == {"sample_tasks": {f"{b}/{s}" for b in ("babyai", "crafter") for s in ("train", "test")}} | expected


def test_sleep_every_reruns_the_training_chain_but_not_the_v0_evaluation(finished):
    jobs = changed(finished, set_("protocol.sleep_every", 1))  # 4 batches, v1..v4, checkpoints v0 v2 v4
    assert jobs == {
        "rollout": {f"{r}/{k}" for r in RUNS for k in range(4)},
        "induce": {f"{r}/{k}" for r in RUNS for k in range(1, 5)},
        "evaluate": {f"{r}/{k}" for r in RUNS for k in (2, 4)},
    }


# (each value differs from BASE's default)
@pytest.mark.parametrize("path, value", [("budgets.inducer_requests", 5), ("inducer.nudge_requests", 1)])
def test_the_inducer_budget_reruns_the_sleep_phases_and_what_follows_them(finished, path, value):
    jobs = changed(finished, set_(path, value))
    assert jobs == {
        "induce": {f"{r}/{k}" for r in RUNS for k in (1, 2)},
        "rollout": {f"{r}/1" for r in RUNS},
        "evaluate": {f"{r}/{k}" for r in RUNS for k in (1, 2)},
    }


def test_a_price_reruns_the_dollars_but_no_run(finished):
    """Prices are read by the analytics, the tables and the pages that show dollars: none of the runs."""
    cfg = copy.deepcopy(BASE)
    cfg["pricing"] = {BASE["llm"]["model"]: {"input": 0.1, "cached_input": 0.01, "output": 0.4}}
    # under the base config's own file name: the tables and pages name the config file they were made from
    base = (finished / "base.yaml").read_text()
    (finished / "base.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    try:
        dry = smk("all", "-n", "--configfile", "base.yaml", cwd=finished)
    finally:
        (finished / "base.yaml").write_text(base)
    assert not scheduled(dry)
    rules = set(re.findall(r"^(?:local)?rule (\w+):", dry, re.M))
    assert {"analytics", "tables", "library_view", "episode_view"} <= rules, rules
    assert "sleep_view" not in rules  # a sleep phase's pages show no dollars


def test_reordered_keys_defaults_written_out_and_operational_settings_rerun_nothing(finished):
    def change(cfg):
        cfg["llm"] = dict(reversed(list(cfg["llm"].items())))
        cfg["llm"].update(threads=7, slots=3, timeout_s=30, seed=0)  # seed 0 is the default
        cfg["methods"]["speedrunner"]["options"] = {"interpreter": True}  # the default
        cfg["protocol"] = dict(reversed(list(cfg["protocol"].items())))
        cfg["benchmarks"]["crafter"]["options"]["zombie_frequency"] = 1  # 1 == 1.0
    assert changed(finished, change) == {}


def test_a_job_refuses_a_run_folder_made_under_other_settings(tmp_path):
    """The second line of defence, for when Snakemake's records are gone and cannot rerun the chain."""
    from types import SimpleNamespace

    from skillrepro.check import check_config
    from skillrepro.skills import Library
    from skillrepro.studies.contract import SettingsError
    from skillrepro.studies.speedrunner.settings import SPEEDRUNNER, run_settings

    library = tmp_path / "library"
    Library(0, meta={"method": "init", "settings": "made-before"}).write(library / "v0")
    Library(1).write(library / "v1")
    config = check_config(BASE)
    keyed = {"bench": "crafter", "variant": "speedrunner"}
    job = SPEEDRUNNER.job(config, SPEEDRUNNER.settings(config), "run", keyed, None)
    snakemake = SimpleNamespace(wildcards=SimpleNamespace(**keyed, seed="2"), params=SimpleNamespace(settings="this-config"))
    with pytest.raises(SettingsError, match="run crafter/speedrunner/seed2 was started under other settings"):
        run_settings(job, snakemake, library / "v1")
    snakemake.params.settings = "made-before"
    run = run_settings(job, snakemake, library / "v1")
    assert (run.bench.options, run.method.config.method, run.llm.seed) == ({"zombie_frequency": 1.0}, "speedrunner", 2000)
