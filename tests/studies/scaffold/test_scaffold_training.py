"""SkillScaffold's GRPO joint training through snakemake on the real embedded model (SmolLM2-135M) and BabyAI:
two iterations of one chain, each played, carded and scored by the current checkpoint (iteration 1 on a
llama.cpp server of its own, serving checkpoint 1 written back as GGUF), two TRL updates, and table 4, and the
held-out evaluation of the base model and the chain's last checkpoint on BabyAI's test split (tables 1-3, 6,
figures 1, 7). The plain-GRPO chain runs the same rules without cards; its wiring is checked on a dry run (two
more TRL updates would cost the suite about three minutes)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest

from skillrepro.studies.scaffold.paper import SOURCE_RUN  # noqa: F401 (read by DataFrame.query as @SOURCE_RUN)
from skillrepro.studies.scaffold.statistics import MIN_N

N, M, L, STEPS = 2, 2, 1, 2
HELDOUT = 1  # BabyAI test tasks per policy

# own_process: its GRPO update (4.5 GB) no longer lands beside the pytest process's own memory (tests/conftest.py)
pytestmark = [pytest.mark.integration, pytest.mark.workflow, pytest.mark.own_process]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, run_scaffold):
    started = time.perf_counter()
    wd = run_scaffold(tmp_path_factory.mktemp("scaffold_training"), "scaffold_grpo",
                      call_budget=2,  # short samples: a short CPU update
                      scaffold={"variants": ["grp"], "n_queries": 1, "n_scouts": N, "n_candidates": M, "n_post": L,
                                "generator_max_tokens": 160, "evidence_max_chars": 1000,
                                # a learning rate that moves a few updates visibly (table 5's is 1e-6)
                                "training": {"steps": STEPS, "learning_rate": 1.0e-4, "query_batch_size": 1,
                                             "baseline": False,
                                             # one sequence per forward/backward, accumulated: the update's
                                             # peak memory is one sequence's activations, not five
                                             "micro_batch_size": 1},
                                # the base model and the last checkpoints (every > 1: checkpoint 1 is skipped)
                                "heldout": {"splits": {"babyai": {"test": HELDOUT}}, "every": STEPS}})
    print(f"scaffold_grpo ({STEPS} updates, SmolLM2-135M): {time.perf_counter() - started:.0f} s")
    return wd


def _weights(ckpt: Path):
    from safetensors.torch import load_file

    return load_file(ckpt / "model.safetensors")


def test_each_update_trains_the_previous_checkpoint(workdir):
    import torch

    s = workdir / "results/scaffold"
    ckpts = [s / f"babyai/grp/grpo/ckpt{k}" for k in range(1, STEPS + 1)]
    for k, c in enumerate(ckpts, 1):
        meta = json.loads((c / "scaffold_update.json").read_text())
        assert meta["update"] == k and (c / "optimizer.pt").stat().st_size > 0
        assert meta["from"].endswith("grpo/ckpt1") if k == 2 else meta["from"] == "smollm2-135m"
        assert (c / "gguf/model.gguf").read_bytes()[:4] == b"GGUF"
        # the rule's threads reach torch (Snakemake sets OMP_NUM_THREADS to them; 1 where a rule names none)
        assert "; torch threads: 2\n" in (workdir / f"logs/scaffold/babyai/grp/grpo_update_{k}.log").read_text()
        # the update trained on its own iteration's query batch
        assert meta["queries"] == json.loads((s / f"babyai@grp{k - 1}/queries.json").read_text())
    w1, w2 = _weights(ckpts[0]), _weights(ckpts[1])
    changed = [n for n in w1 if not torch.equal(w1[n], w2[n])]
    assert len(changed) > 0.5 * len(w1), f"update 2 changed {len(changed)} of {len(w1)} tensors"


def test_a_checkpoint_read_from_its_folder_is_its_gguf(workdir):
    """The scorer reads a checkpoint from its Hugging Face folder, rounded as its GGUF export rounds it
    (load_served), not from the GGUF: every tensor and the chat template come out as transformers reads them
    from the GGUF that llama.cpp serves."""
    import torch

    from skillrepro.llm.scorer import _read_gguf
    from skillrepro.studies.scaffold.grpo import CHECKPOINT_GGUF, exported_checkpoint, load_served

    ckpt = workdir / "results/scaffold/babyai/grp/grpo/ckpt1"
    assert exported_checkpoint(ckpt / CHECKPOINT_GGUF) == ckpt
    assert exported_checkpoint("model.gguf") is None and exported_checkpoint(ckpt / "model.gguf") is None
    (lm, tok), (gguf_lm, gguf_tok) = load_served(ckpt), _read_gguf(ckpt / CHECKPOINT_GGUF)
    mine, theirs = lm.state_dict(), gguf_lm.state_dict()
    assert mine.keys() == theirs.keys()
    assert [n for n in mine if not torch.equal(mine[n], theirs[n])] == []
    chat = [{"role": "system", "content": "Act."}, {"role": "user", "content": "Mission: go to the red ball."}]
    assert tok.apply_chat_template(chat, tokenize=False) == gguf_tok.apply_chat_template(chat, tokenize=False)
    assert "scored skill-free with transformers (results/scaffold/babyai/grp/grpo/ckpt1/gguf/model.gguf)" in (
        workdir / "logs/scaffold/babyai@grp1/score_free.log").read_text()


def test_iteration_1_is_played_carded_and_scored_by_checkpoint_1(workdir):
    it0, it1 = workdir / "results/scaffold/babyai@grp0", workdir / "results/scaffold/babyai@grp1"
    served = "results/scaffold/babyai/grp/grpo/ckpt1/gguf/model.gguf"  # the checkpoint, as its own server loads it
    for i in range(N):
        calls = pd.read_parquet(it1 / f"scouts/s{i}/llm_calls.parquet")
        assert len(calls) and set(calls.model) == {served}, set(calls.model)
        assert set(pd.read_parquet(it0 / f"scouts/s{i}/llm_calls.parquet").model) == {"smollm2-135m"}
    assert set(pd.read_parquet(it1 / "grp/generate/llm_calls.parquet").model) <= {served}
    free = pd.read_parquet(it1 / "scores_free.parquet")
    assert len(free) == N and (free.mean_logprob < 0).all()
    # the two iterations drew their own query batches
    assert json.loads((it0 / "queries.json").read_text()) != json.loads((it1 / "queries.json").read_text())


def test_internalization_table_has_a_row_per_later_checkpoint(workdir):
    t = pd.read_csv(workdir / "results/tables/scaffold_internalization.csv")
    assert list(t.columns) == ["benchmark", "variant", "checkpoint", "n", "recovery_pp", "ci_low", "ci_high", "interval",
                               "policy"]
    assert set(t.policy) == {"SkillScaffold"}  # no plain-GRPO chain here (training.baseline: false), so no control
    assert t.checkpoint.tolist() == list(range(1, STEPS + 1)) and set(t.variant) == {"grp"}
    # the early success: fresh skill-free rollouts of the cohort by checkpoint 0, none of them a Scout
    it0 = workdir / "results/scaffold/babyai@grp0"
    early = pd.read_parquet(it0 / "grp/cohort_early/episodes.parquet")
    scouts = pd.concat([pd.read_parquet(it0 / f"scouts/s{i}/episodes.parquet") for i in range(N)])
    assert len(early) == N * int(t.n[0]) and not set(early.episode_id) & set(scouts.episode_id)
    for k in range(1, STEPS + 1):
        played = pd.read_parquet(workdir / f"results/scaffold/babyai/grp/cohort/ckpt{k}/episodes.parquet")
        assert len(played) == N * int(t.n[k - 1])  # N skill-free rollouts per cohort query
        if t.n[k - 1] >= MIN_N["expanded"]:
            assert t.ci_low[k - 1] <= t.recovery_pp[k - 1] <= t.ci_high[k - 1]
        else:  # too few cohort queries for a 95 % interval: none is printed, and the table says why
            assert pd.isna(t.ci_low[k - 1]) and "too few queries" in t.interval[k - 1]


def test_plain_grpo_chain_trains_the_executor_alone_on_a_dry_run(tmp_path):
    """With `training.baseline` on (the default), each iteration of the plain-GRPO chain plays its own Post-Scouts
    on the SkillScaffold chain's query batch and updates from its own previous checkpoint, with no card job
    anywhere in the chain; its last checkpoint is evaluated on the held-out split."""
    import re
    import subprocess
    import sys

    from repo import study_workflow

    cfg = {"llm": {"backend": "embedded", "model": "smollm2-135m"}, "benchmarks": {"babyai": {"env": "babyai"}},
           "scaffold": {"variants": ["grp"], "n_queries": 1, "n_scouts": N, "n_candidates": M, "n_post": L,
                        "training": {"steps": STEPS}, "heldout": {"splits": {"babyai": {"test": 1}}, "every": STEPS}}}
    study_workflow(tmp_path, cfg)
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "scaffold_grpo", "--cores", "1"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs, units = {}, {}  # output -> (rule, inputs); rule -> its jobs' `llm` units
    for block in re.split(r"\n(?=\[\w{3} \w{3} )", proc.stdout):
        rule = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        out = re.search(r"^\s+output: (.+)$", block, re.M)
        if rule:
            units.setdefault(rule.group(1), set()).add(int((re.search(r"\bllm=(\d+)", block) or [0, 0])[1]))
        if rule and out:
            inp = re.search(r"^\s+input: (.+)$", block, re.M)
            for o in out.group(1).split(", "):
                jobs[o] = (rule.group(1), inp.group(1).split(", ") if inp else [])
    # torch on the CPU (scoring, the update) never shares the cores with the embedded server's requests: every unit
    assert units["scaffold_score_free"] == units["scaffold_score"] == units["scaffold_grpo_update"] == {2}, units
    assert units["scaffold_scout"] == {1, 2}  # 2: iteration 1's Scouts, on checkpoint 1's server of their own
    plain = {o: j for o, j in jobs.items() if "babyai@grpo" in o or "/grpo/grpo/" in o}
    assert {r for r, _ in plain.values()} == {"scaffold_queries", "scaffold_scout", "scaffold_post_scout",
                                             "scaffold_grpo_update"}  # no evidence, Generator, scoring or selection
    for k in range(1, STEPS + 1):
        rule, inputs = jobs[f"results/scaffold/babyai/grpo/grpo/ckpt{k}"]
        assert rule == "scaffold_grpo_update"
        assert f"results/scaffold/babyai@grpo{k - 1}/grpo/post/l0/episodes.parquet" in inputs
        assert not [i for i in inputs if "candidates" in i or "selection" in i or "utilities" in i]
        assert (f"results/scaffold/babyai/grpo/grpo/ckpt{k - 1}" in inputs) == (k > 1)
    rule, inputs = jobs[f"results/scaffold/babyai/heldout/grpo/ckpt{STEPS}/episodes.parquet"]
    assert rule == "scaffold_heldout_eval" and f"results/scaffold/babyai/grpo/grpo/ckpt{STEPS}" in inputs


def test_every_policy_is_played_skill_free_on_the_held_out_split(workdir):
    from skillrepro.benchmarks import load_benchmark
    from skillrepro.config import BenchmarkConfig

    s = workdir / "results/scaffold"
    tasks = json.loads((s / "babyai/heldout/tasks.json").read_text())
    babyai = load_benchmark(BenchmarkConfig("babyai", "babyai", 2))
    assert tasks == {"test": babyai.sample_tasks("test", HELDOUT, 42)}
    trained = {t for d in s.glob("babyai@*") for t in json.loads((d / "queries.json").read_text())}
    assert not set(tasks["test"]) & (trained | set(babyai.sample_tasks("train", 200, 42)))
    table = pd.read_csv(workdir / "results/tables/scaffold_heldout.csv", keep_default_na=False)
    pooled = table[(table.split == "all") & (table.category == "all")].set_index(["chain", "checkpoint"])
    served = {"base": "smollm2-135m"}
    served[f"grp/ckpt{STEPS}"] = f"results/scaffold/babyai/grp/grpo/ckpt{STEPS}/gguf/model.gguf"
    for policy, model in served.items():
        d = s / "babyai/heldout" / policy
        eps = pd.read_parquet(d / "episodes.parquet")
        assert sorted(eps.task_id) == sorted(tasks["test"]) and set(eps.split) == {"test"}
        assert set(eps.variant) == {"heldout/test/r0"}
        calls = pd.read_parquet(d / "rollout0/llm_calls.parquet")
        assert set(calls.model) == {model} and not calls.prompt.str.contains("# Skill:").any()  # skill-free
        # the table's row is these episodes
        chain, k = ("", 0) if policy == "base" else (policy.split("/")[0], STEPS)
        row = pooled.loc[(chain, k)]
        assert row.n_episodes == HELDOUT and row.success_pct == pytest.approx(100 * eps.success.mean())
        assert row.ci_low_pct <= row.success_pct <= row.ci_high_pct and row.ci_high_pct - row.ci_low_pct > 50  # 1 task
    assert not (s / "babyai/heldout/grp/ckpt1").exists()  # every: STEPS
    # the rows run here (tables 1-3 then append the paper's own, marked so)
    t3 = pd.read_csv(workdir / "results/tables/scaffold_table3.csv").query("source == @SOURCE_RUN")
    assert t3.set_index("chain").method.to_dict() == {"grp": "SkillScaffold (grp)"}
    t1 = pd.read_csv(workdir / "results/tables/scaffold_table1.csv").query("source == @SOURCE_RUN")
    assert set(t1.method) == {"ReAct (base model, skill-free)", "SkillScaffold (grp)"} and (t1.n_tasks == HELDOUT).all()
    inj = pd.read_csv(workdir / "results/tables/scaffold_injection.csv")
    assert inj.benchmark.tolist() == ["babyai"] and inj.chain.tolist() == ["grp"] and inj.n_queries[0] == STEPS
    curve = pd.read_csv(workdir / "results/tables/scaffold_training_curve.csv")
    assert curve.chain.unique().tolist() == ["grp"] and curve.iteration.max() == STEPS - 1
    for fig in ("scaffold_figure1.png", "scaffold_figure7.png"):
        assert (workdir / "results/figures" / fig).stat().st_size > 1000
