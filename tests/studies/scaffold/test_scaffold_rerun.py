"""SkillScaffold's rules rerun exactly the jobs whose settings changed: a finished run (recorded by `snakemake
--touch`, no model), then a changed config, and the jobs a dry run schedules. The held-out evaluation's settings
rerun the held-out jobs only; a scaffold setting reruns the scaffold jobs but not the held-out ones; a benchmark
the study does not use reruns nothing. Its settings errors are ConfigErrors naming the key, as the rest of the
config's are."""
from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from snakemake.iocontainers import Wildcards  # a job's wildcards, as a script sees them
import yaml

from skillrepro.check import job_fingerprint
from skillrepro.pipeline import start_job
from skillrepro.studies.contract import SettingsError
from skillrepro.config import ConfigError
from skillrepro.studies.scaffold.settings import ScaffoldConfig, scaffold_fingerprint

from repo import scheduled, study_workflow

BASE = {
    "llm": {"backend": "embedded", "model": "qwen2.5-coder-0.5b", "max_tokens": 48},
    "benchmarks": {"babyai": {"env": "babyai", "llm_call_budget": 3}, "other": {"env": "babyai", "llm_call_budget": 3}},
    "budgets": {"rollout_wall_s": 300},
    "scaffold": {"benchmarks": ["babyai"], "variants": ["grp"], "n_queries": 1, "n_scouts": 1, "n_candidates": 1,
                 "n_post": 1, "n_eval": 1, "n_probes": 1,
                 "training": {"steps": 1, "query_batch_size": 1, "baseline": False},
                 "heldout": {"splits": {"babyai": {"test": 1}}}},
}
HELDOUT = {"scaffold_heldout_tasks", "scaffold_heldout_eval", "scaffold_heldout_tables", "scaffold_heldout_figures"}

pytestmark = pytest.mark.workflow


def smk(*args, cwd):
    env = dict(os.environ, SKILLREPRO_LLM_URL="http://127.0.0.1:9/v1")  # no model server for a touch or dry run
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "scaffold_all", "scaffold_grpo", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    wd = tmp_path_factory.mktemp("scaffold_rerun")
    study_workflow(wd, BASE)  # the copy's config.yaml; each run below gives its own with --configfile
    (wd / "base.yaml").write_text(yaml.safe_dump(BASE))
    dry = smk("-n", "--configfile", "base.yaml", cwd=wd)
    outputs = [o.strip() for line in dry.splitlines() if line.strip().startswith("output:")
               for o in line.split("output:")[1].split(",")]
    smk("--touch", "--configfile", "base.yaml", cwd=wd)
    for out in outputs:  # in the dry run's order (inputs first), so the files' times agree with the DAG
        path = wd / out
        if re.search(r"/ckpt\d+$", out):  # a checkpoint is a directory() output
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
    assert "Nothing to be done" in smk("-n", "--configfile", "base.yaml", cwd=wd)
    return wd


def changed(wd: Path, change, stdout: list | None = None) -> set[str]:
    cfg = copy.deepcopy(BASE)
    change(cfg)
    (wd / "changed.yaml").write_text(yaml.safe_dump(cfg))
    out = smk("-n", "--configfile", "changed.yaml", cwd=wd)
    if stdout is not None:
        stdout.append(out)
    return scheduled(out) - {"scaffold_all", "scaffold_grpo"}  # the targets: rules without outputs


def test_a_config_change_reruns_exactly_the_jobs_that_read_it(finished):
    # the held-out evaluation's own setting: its jobs and the tables after them, no scaffold rule
    assert changed(finished, lambda c: c["scaffold"]["heldout"].update(rollouts=2)) == HELDOUT
    # a setting of the scaffold rules (the gate's threshold): the scaffold jobs, not the held-out evaluation
    # the gate's threshold: the selections and what reads them (Post-Scouts, tables, the update and the checkpoint's
    # rollouts), not the Scouts, cards or scores before it
    out: list[str] = []
    jobs = changed(finished, lambda c: c["scaffold"].update(threshold=0.5), out)
    assert {"scaffold_select", "scaffold_post_scout", "scaffold_grpo_update", "scaffold_cohort_eval"} <= jobs
    assert not jobs & {"scaffold_queries", "scaffold_scout", "scaffold_evidence", "scaffold_generate", "scaffold_score",
                       "scaffold_score_free", "scaffold_eval", "scaffold_eval_free", "scaffold_heldout_tasks"}
    # ... the held-out evaluation plays the retrained checkpoint anew (an input changed), not the base model
    assert "hpolicy=base" not in out[0] and "hpolicy=grp/ckpt1" in out[0]
    # the Generator's settings: the cards and everything after them, not the Scouts
    jobs = changed(finished, lambda c: c["scaffold"].update(generator_max_tokens=500))
    assert {"scaffold_generate", "scaffold_score", "scaffold_select"} <= jobs
    assert not jobs & {"scaffold_scout", "scaffold_evidence", "scaffold_score_free", "scaffold_eval_free"}
    # the Generator's reply form (appendix D's per-benchmark format): the cards and after, not the Scouts
    jobs = changed(finished, lambda c: c["scaffold"].update(generator_reply={"babyai": "json"}))
    assert {"scaffold_generate", "scaffold_score", "scaffold_select"} <= jobs
    assert not jobs & {"scaffold_scout", "scaffold_evidence", "scaffold_score_free", "scaffold_eval_free"}
    # a benchmark the study does not use, and writing a default out (the paper's reply form too): nothing
    assert changed(finished, lambda c: (c["benchmarks"]["other"].update(llm_call_budget=9),
                                        c["scaffold"].update(evidence_max_chars=6000,
                                                             generator_reply={"babyai": "tagged"}))) == set()


@pytest.mark.parametrize("change, message", [
    (lambda s: s.update(n_scouts=0), "config key scaffold.n_scouts: 0 must be >= 1"),
    (lambda s: s.update(bogus=1), "config key scaffold: unknown key(s) bogus"),
    (lambda s: s["training"].update(steps={"other": 3}), "config key scaffold.training.steps: per benchmark"),
    (lambda s: s["training"].update(global_batch_size=7), "config key scaffold.training.global_batch_size: 7"),
])
def test_scaffold_settings_errors_are_config_errors(change, message):
    cfg = copy.deepcopy(BASE)
    change(cfg["scaffold"])
    with pytest.raises(ConfigError, match=re.escape(message)):
        ScaffoldConfig.from_config(cfg)
    assert ScaffoldConfig.from_config(BASE).steps("babyai") == 1


def test_a_job_refuses_settings_its_rule_did_not_record():
    """skillrepro.pipeline.start_job rebuilds a job's typed settings and refuses a fingerprint other than the config's
    (a job run by hand under another config); a training iteration gets its own batch size."""
    cfg = copy.deepcopy(BASE)
    cfg["scaffold"]["training"]["query_batch_size"] = 3
    fp = scaffold_fingerprint(cfg, ScaffoldConfig.from_config(cfg), "play", sbench="babyai")
    other = copy.deepcopy(cfg)
    other["scaffold"]["threshold"] = 0.5  # read by the selection, not by a rollout
    assert scaffold_fingerprint(other, ScaffoldConfig.from_config(other), "play", sbench="babyai") == fp
    assert (scaffold_fingerprint(other, ScaffoldConfig.from_config(other), "update", sbench="babyai")
            != scaffold_fingerprint(cfg, ScaffoldConfig.from_config(cfg), "update", sbench="babyai"))
    job = SimpleNamespace(wildcards=Wildcards(fromdict={"sbench": "babyai@grp0"}), config=cfg, rule="scaffold_scout", log=[],
                          params=SimpleNamespace(settings=job_fingerprint(cfg, "scaffold", "play", sbench="babyai"),
                                                 policy=""))
    settings = start_job(job).settings
    assert settings.bench.name == "babyai" and settings.scaffold.n_queries == 3 and settings.policy == ""
    job.params.settings = "scaffold/play:" + "0" * 16
    with pytest.raises(SettingsError, match="settings fingerprint"):
        start_job(job)


def test_a_card_format_changes_only_the_generate_fingerprint_of_its_env():
    cfg = copy.deepcopy(BASE)
    cfg["benchmarks"]["sw"] = {"env": "scienceworld", "llm_call_budget": 3}

    def fp(c, bench):
        return scaffold_fingerprint(c, ScaffoldConfig.from_config(c), "generate", sbench=bench)

    other = copy.deepcopy(cfg)
    other["scaffold"]["card"] = {"scienceworld": {"max_words": 300}}
    assert fp(other, "babyai") == fp(cfg, "babyai") and fp(other, "sw") != fp(cfg, "sw")
