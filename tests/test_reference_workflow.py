"""The reference method (the positive control) through the DAG on the real embedded model: the session's
shared server (tests/conftest.py, `llm_url`), real Snakemake in a copied workflow folder with relative
paths, the real sandbox.

What it asserts holds whatever the model replies: v0 is the shipped library and no sleep phase changed it,
the actor was shown its skill (under its own heading, the protocol's example a call of it), every step that
called the skill has its call stack in skill_calls.parquet, and main.csv reports the final checkpoint's
episodes. It does not assert that the model called the skill and solved a task: the test model
(SmolLM2-135M) does not write actions in the protocol, and the shipped Qwen2.5-Coder-0.5B rarely calls a
listed skill (README, "Results on a laptop"). An episode solved through the skill, on the same tool path
and sandbox, is tests/test_reference.py's scripted-actor test."""
import json

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from test_views import VIEW_TARGETS, check_pages_of_the_workflow_run
from test_workflow import copy_workflow, snakemake


@pytest.mark.workflow
def test_reference_runs_through_the_dag_on_the_real_model(tmp_path, llm_cfg, llm_url):
    copy_workflow(tmp_path)
    cfg = {
        "llm": {"backend": "embedded", "model": llm_cfg.model, "max_tokens": 48, "slots": 2,
                "ctx_per_slot": llm_cfg.ctx_per_slot, "seed": 1, "tool_calling": "text"},
        "benchmarks": {"babyai": {"env": "babyai", "llm_call_budget": 1}},
        "methods": {"reference": {"method": "reference"}},
        "protocol": {"seeds": [0], "train_rollouts": 1, "sleep_every": 1, "eval_every": 1, "n_test": 1},
        "budgets": {"rollout_wall_s": 300},
        "pricing": {},
    }
    (tmp_path / "ref.yaml").write_text(yaml.safe_dump(cfg))
    # The run's library and episode pages come from the same records (checked in tests/test_views.py).
    snakemake("results/tables/main.csv", *VIEW_TARGETS, "--cores", "2", "--configfile", "ref.yaml", cwd=tmp_path)

    run = tmp_path / "results/runs/babyai/reference/seed0"
    # v0 is the shipped library; the sleep phase carried it over unchanged.
    v0, v1 = (json.loads((run / f"library/v{k}/manifest.json").read_text()) for k in (0, 1))
    assert [f["name"] for f in v0["functions"] if f["public"]] == ["solve_mission"]
    assert [f["sha256"] for f in v1["functions"]] == [f["sha256"] for f in v0["functions"]]

    batches = [run / "train/batch0", run / "eval/v0", run / "eval/v1"]
    frames = pd.concat([pq.read_table(b / "skill_calls.parquet").to_pandas() for b in batches])
    steps = pd.concat([pq.read_table(b / "steps.parquet").to_pandas() for b in batches])
    episodes = pd.concat([pq.read_table(b / "episodes.parquet").to_pandas() for b in batches])
    calls = pd.concat([pq.read_table(b / "llm_calls.parquet").to_pandas() for b in batches])
    assert len(episodes) == 1 + 1 + 1 and (calls.role == "actor").all() and (calls.completion_tokens > 0).all()
    system = json.loads(calls.prompt.iloc[0])["messages"][0]["content"]
    assert "\nSkills: " in system and "- solve_mission(mission: str): " in system
    assert 'for example solve_mission("<mission>")' in system
    # Every valid call of the skill ran in the sandbox and left its call stack, tagged with its step.
    called = steps[(steps.action == "solve_mission") & steps.valid]
    roots = frames[frames.parent_frame_id == ""]
    assert sorted(zip(roots.episode_id, roots.step)) == sorted(zip(called.episode_id, called.step))
    assert set(frames.function) <= {f["name"] for f in v0["functions"]}
    main = pd.read_csv(tmp_path / "results/tables/main.csv")
    row = main.set_index("variant").loc["reference"]
    final = episodes[(episodes.split == "test") & (episodes.library_version == 1)]
    assert row.library_version == 1 and row.n_episodes == len(final) == 1
    assert row.success_mean == pytest.approx(final.success.mean())
    assert row.output_tokens_per_episode_mean == pytest.approx(final.completion_tokens.mean())
    check_pages_of_the_workflow_run(
        tmp_path, lambda *targets: snakemake(*targets, "--configfile", "ref.yaml", cwd=tmp_path))
