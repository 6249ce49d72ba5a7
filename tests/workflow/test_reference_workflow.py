"""The reference method (the positive control) through the DAG on the real embedded model: the shipped
Qwen2.5-Coder-0.5B (the session's SmolLM2-135M never passes the skill its argument), the default run's actor
settings (constrained tool calls, the skill reminder), real Snakemake in a copied workflow folder with relative
paths, the real sandbox.

It asserts the science: the actor called the skill, the call ran in the sandbox and left its call stack,
an episode was solved through it, main.csv reports the final checkpoint's episodes, and table 8's re-evaluations
(the evaluate_truncated rule) played the tasks with the skills they show; it would fail if the
skill path, the success metric or the tables broke. Sampling is seeded; with 5 episodes and the 0.5B model
solving about 5 of 6 through the skill (docs/results.md, "The positive control"), all failing is unlikely."""
import json
import os

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from pages import VIEW_TARGETS, check_pages_of_the_workflow_run
from repo import copy_workflow, snakemake


@pytest.mark.workflow
def test_reference_solves_tasks_through_its_skill_in_the_dag_on_the_real_model(tmp_path):
    copy_workflow(tmp_path)
    cfg = {
        "llm": {"backend": "embedded", "model": "qwen2.5-coder-0.5b", "max_tokens": 96, "slots": 1,
                "ctx_per_slot": 4096, "seed": 1, "tool_calling": "constrained"},
        "actor": {"restate_skills": True, "stop": ["}\n{", "},\n{"]},  # the default run's actor settings
        "benchmarks": {"babyai": {"env": "babyai", "llm_call_budget": 3}},
        "methods": {"reference": {"method": "reference"}},
        "protocol": {"seeds": [0], "train_rollouts": 1, "sleep_every": 1, "eval_every": 1, "n_test": 2},
        "budgets": {"rollout_wall_s": 300},
        "pricing": {},
        # table 8 (appendix F): the final library re-evaluated showing its last skill, and in full
        "analysis": {"truncation": {"variant": "reference", "benchmark": "babyai", "sizes": [1]}},
    }
    (tmp_path / "ref.yaml").write_text(yaml.safe_dump(cfg))
    # The workflow starts its own server for this model: the session's (another model) is not passed on.
    env = {k: v for k, v in os.environ.items() if k != "SKILLREPRO_LLM_URL"}
    # The run's library and episode pages come from the same records (checked by tests/pages.py, at the end).
    snakemake("results/tables/main.csv", "results/tables/table8.csv", *VIEW_TARGETS, "--cores", "2", "--configfile", "ref.yaml", cwd=tmp_path,
              env=env)

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
    assert len(episodes) == 1 + 2 + 2 and (calls.role == "actor").all() and (calls.completion_tokens > 0).all()
    request = json.loads(calls.prompt.iloc[0])
    system, opening = request["messages"][0]["content"], request["messages"][1]["content"]
    assert "\nSkills: " in system and "- solve_mission(mission: str): " in system
    # the reply is decoded as one call of a listed tool, skills first, as listed
    schema = request["response_format"]["json_schema"]["schema"]
    assert schema["anyOf"][0]["properties"]["name"] == {"const": "solve_mission"}
    assert opening.startswith("Mission: ") and "solve_mission(mission: str)" in opening.split("\n\n")[-1]
    # The actor called the skill; every valid call ran in the sandbox and left its call stack, tagged with
    # its step, and its frames made primitive steps of the environment.
    called = steps[(steps.action == "solve_mission") & steps.valid]
    roots = frames[frames.parent_frame_id == ""]
    assert len(called) >= 1
    assert sorted(zip(roots.episode_id, roots.step)) == sorted(zip(called.episode_id, called.step))
    assert set(frames.function) <= {f["name"] for f in v0["functions"]} and (frames.primitives.map(json.loads).map(len) > 0).any()
    # An episode was solved through the skill: its step that called it is the one that ended it.
    solved = episodes[episodes.success]
    assert len(solved) >= 1 and set(solved.termination) == {"success"}
    ended_by_skill = called.merge(solved, on="episode_id")
    assert (ended_by_skill.step == ended_by_skill.n_steps - 1).any()
    main = pd.read_csv(tmp_path / "results/tables/main.csv")
    row = main.set_index("variant").loc["reference"]
    final = episodes[(episodes.split == "test") & (episodes.library_version == 1)]
    assert row.library_version == 1 and row.n_episodes == len(final) == 2
    assert row.success_mean == pytest.approx(final.success.mean())
    assert row.output_tokens_per_episode_mean == pytest.approx(final.completion_tokens.mean())
    # Table 8 through the evaluate_truncated rule: each re-evaluation played the test tasks with the skills it
    # shows, called them, and its row reports its own episodes.
    table8 = pd.read_csv(tmp_path / "results/tables/table8.csv").set_index("n_requested")
    for n, folder, shown in (("1", "n1", 1), ("all (final)", "nall", 1), ("0 (no skills)", "n0", 0)):
        t = run / "truncated" / folder
        assert json.loads((t / "library/manifest.json").read_text())["meta"]["truncated_to"] == shown
        eps = pq.read_table(t / "episodes.parquet").to_pandas()
        t_steps = pq.read_table(t / "steps.parquet").to_pandas()
        assert len(eps) == 2 and (t_steps.action == "solve_mission").any() == bool(shown)
        assert (len(pq.read_table(t / "skill_calls.parquet").to_pandas()) > 0) == bool(shown)
        assert table8.loc[n, "n_episodes"] == 2 and table8.loc[n, "score"] == pytest.approx(eps.success.mean())
    # v0 shows the reference library, so table 8's N=0 row is the n0 re-evaluation, not the v0 checkpoint
    assert table8.loc["0 (no skills)", "n_shown"] == 0
    check_pages_of_the_workflow_run(
        tmp_path, lambda *targets: snakemake(*targets, "--configfile", "ref.yaml", cwd=tmp_path, env=env))
