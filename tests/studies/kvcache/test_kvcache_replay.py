"""Model-free replay: trajectories from commands, recorded runs and recorded files; streams per format."""
from __future__ import annotations

import json

import pytest

from skillrepro.store import Episode, Step, write_records
from skillrepro.studies.kvcache import formats as F
from skillrepro.studies.kvcache import replay as R
from skillrepro.studies.kvcache import study
from skillrepro.studies.kvcache.tokenizers import get_tokenizer
from repo import DATA

TRAJECTORIES = DATA / "kvcache_trajectories.json"
TOK = get_tokenizer("qwen2.5")


@pytest.fixture(scope="module")
def trajectories():
    return R.read_trajectories(TRAJECTORIES)


def test_recorded_file_is_read_and_cut_to_the_budget(trajectories):
    ids = [t.task_id for t in trajectories]
    again = R.record_trajectories(str(TRAJECTORIES), None, ids, call_budget=50, reply=str)
    assert again == trajectories and all(t.success for t in again)
    cut = R.record_trajectories(str(TRAJECTORIES), None, ids[:1], call_budget=3, reply=str)
    assert len(cut[0].turns) == 3 and not cut[0].success  # the game was not finished within the budget
    with pytest.raises(ValueError, match="no trajectory for task.*gen:nope"):
        R.record_trajectories(str(TRAJECTORIES), None, ["gen:nope"], 5, str)


def test_stream_rebuilds_each_formats_prompts_from_the_same_games(trajectories):
    streams = {f: R.replay_stream(f, trajectories, TOK.encode) for f in ("skillrl", "evoskill", "noskill")}
    n = sum(len(t.turns) for t in trajectories)
    for fmt, s in streams.items():
        assert len(s) == n and [r.started_at for r in s] == list(range(n))
        assert all(r.completion_tokens == len(r.response_token_ids) > 5 for r in s)
    tr = trajectories[0]
    # request t of an episode is exactly the format's prompt over the recorded history
    msgs = F.build_messages("skillrl", F.load_bank(), tr.task, None, tr.turns[:2], tr.turns[2].observation,
                            tr.turns[2].admissible)
    assert streams["skillrl"][2].token_ids == TOK.encode(F.render_chatml(msgs))
    # the skills make skillrl's prompts longer than the no-skill baseline's, step for step (after step 0)
    for a, b in zip(streams["skillrl"], streams["noskill"]):
        assert (len(a.token_ids) > len(b.token_ids) + 300) if a.step > 0 else a.token_ids == b.token_ids


def test_commands_from_a_recorded_run(tmp_path):
    eps = [Episode(f"e{i}", "r", "alfworld", "kvcache", "skillrl", 0, "test", 0, 0, task, True, 1.0, 1.0, 2, 2,
                   0, 10, 0, 5, 0, 0.0, "success") for i, task in enumerate(["t1", "t1", "t2"])]
    steps = [Step("e0", 1, "", "act", json.dumps(["open drawer 1"]), True, "", 0.0, True, 0.0),
             Step("e0", 0, "", "act", json.dumps(["go to drawer 1"]), True, "", 0.0, False, 0.0),
             Step("e1", 0, "", "act", json.dumps(["look"]), True, "", 0.0, False, 0.0),  # t1's second episode
             Step("e2", 0, "", "", "[]", False, "", 0.0, False, 0.0)]  # no action parsed
    write_records(tmp_path / "episodes.parquet", eps, Episode)
    write_records(tmp_path / "steps.parquet", steps, Step)
    assert R.commands_from_run(tmp_path) == {"t1": ["go to drawer 1", "open drawer 1"], "t2": [""]}
    with pytest.raises(ValueError, match="has no trajectory for task.*t3"):
        R.load_commands(str(tmp_path), None, ["t1", "t3"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="has no episodes.parquet"):
        R.commands_from_run(tmp_path / "empty")


def test_replay_run_writes_a_model_runs_files(tmp_path, trajectories):
    stream = R.replay_run(fmt="skillrl", seed=0, bench_name="alfworld", split="test", trajectories=str(TRAJECTORIES),
                          out_dir=str(tmp_path))
    assert [r.token_ids for r in study.read_stream(tmp_path / "requests.jsonl")] == [r.token_ids for r in stream]
    import pandas as pd

    ep = pd.read_parquet(tmp_path / "episodes.parquet")
    assert list(ep.success) == [True, True] and list(ep.n_steps) == [len(t.turns) for t in trajectories]
    assert (pd.read_parquet(tmp_path / "llm_calls.parquet").backend == "replay").all()


def test_views_at_a_step(trajectories):
    views = R.views_at(trajectories, 2)
    assert [len(v.history) for v in views] == [2, 2]
    assert views[0].observation == trajectories[0].turns[2].observation
    assert len(R.views_at(trajectories, 99)[0].history) == len(trajectories[0].turns) - 1
