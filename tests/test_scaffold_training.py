"""SkillScaffold's GRPO joint training through snakemake on the real embedded model (SmolLM2-135M) and BabyAI:
two iterations of one chain, each played, carded and scored by the current checkpoint (iteration 1 on a
llama.cpp server of its own, serving checkpoint 1 written back as GGUF), two TRL updates, and table 4."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest

N, M, L, STEPS = 2, 2, 1, 2

pytestmark = [pytest.mark.integration, pytest.mark.workflow]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, run_scaffold):
    started = time.perf_counter()
    wd = run_scaffold(tmp_path_factory.mktemp("scaffold_training"), "scaffold_grpo",
                      call_budget=2,  # short samples: a short CPU update
                      scaffold={"variants": ["grp"], "n_queries": 1, "n_scouts": N, "n_candidates": M, "n_post": L,
                                "generator_max_tokens": 160, "evidence_max_chars": 1000,
                                # a learning rate that moves a few updates visibly (table 5's is 1e-6)
                                "training": {"steps": STEPS, "learning_rate": 1.0e-4, "query_batch_size": 1}})
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
        # the update trained on its own iteration's query batch
        assert meta["queries"] == json.loads((s / f"babyai@grp{k - 1}/queries.json").read_text())
    w1, w2 = _weights(ckpts[0]), _weights(ckpts[1])
    changed = [n for n in w1 if not torch.equal(w1[n], w2[n])]
    assert len(changed) > 0.5 * len(w1), f"update 2 changed {len(changed)} of {len(w1)} tensors"


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
    assert list(t.columns) == ["benchmark", "variant", "checkpoint", "n", "recovery_pp", "ci_low", "ci_high"]
    assert t.checkpoint.tolist() == list(range(1, STEPS + 1)) and set(t.variant) == {"grp"}
    # the early success: fresh skill-free rollouts of the cohort by checkpoint 0, none of them a Scout
    it0 = workdir / "results/scaffold/babyai@grp0"
    early = pd.read_parquet(it0 / "grp/cohort_early/episodes.parquet")
    scouts = pd.concat([pd.read_parquet(it0 / f"scouts/s{i}/episodes.parquet") for i in range(N)])
    assert len(early) == N * int(t.n[0]) and not set(early.episode_id) & set(scouts.episode_id)
    for k in range(1, STEPS + 1):
        played = pd.read_parquet(workdir / f"results/scaffold/babyai/grp/cohort/ckpt{k}/episodes.parquet")
        assert len(played) == N * int(t.n[k - 1])  # N skill-free rollouts per cohort query
        if t.n[k - 1]:
            assert t.ci_low[k - 1] <= t.recovery_pp[k - 1] <= t.ci_high[k - 1]
