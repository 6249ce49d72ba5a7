"""OPO, ASI, asi_replay and Voyager through the DAG on the real embedded model (tests/data/methods.yaml)."""
import json

import pyarrow.parquet as pq
import pytest

from repo import ROOT, copy_workflow, snakemake


@pytest.mark.workflow
def test_comparison_methods_run_through_the_dag(tmp_path):
    copy_workflow(tmp_path)
    runs = tmp_path / "results/runs"
    # Two wake/sleep cycles of each run (evaluation is the same code for every method: left out for time).
    pairs = [("babyai", "asi"), ("babyai", "asi_replay"), ("babyai", "opo"), ("crafter", "voyager")]
    targets = [f"results/runs/{b}/{v}/seed0/library/v2/manifest.json" for b, v in pairs]
    snakemake(*targets, "--cores", "2", "--configfile", str(ROOT / "tests/data/methods.yaml"), cwd=tmp_path)

    def roles(path):
        return list(pq.read_table(path, columns=["role"]).column("role").to_pylist())

    def manifest(bench, variant, v):
        return json.loads((runs / bench / variant / "seed0" / f"library/v{v}/manifest.json").read_text())

    for bench, variant in pairs:
        assert [manifest(bench, variant, v)["version"] for v in (0, 1, 2)] == [0, 1, 2]
    # OPO: one optimizer call per sleep phase, on the real model, and notes written from it.
    for v in (1, 2):
        calls = pq.read_table(runs / f"babyai/opo/seed0/induce/v{v}/llm_calls.parquet").to_pylist()
        assert [c["role"] for c in calls] == ["optimizer"] and calls[0]["completion_tokens"] > 0
        assert manifest("babyai", "opo", v)["meta"]["episodes_read"] == 1
    assert (runs / "babyai/opo/seed0/library/v1/notes.md").read_text().strip()
    # ASI: one episode per batch was read; an inducer call only for a solved one; append-only.
    for variant in ("asi", "asi_replay"):
        meta = [manifest("babyai", variant, v)["meta"] for v in (1, 2)]
        assert all(m["episodes"] == 1 for m in meta) and all(m["replay_check"] == (variant == "asi_replay") for m in meta)
        for v in (1, 2):
            assert roles(runs / f"babyai/{variant}/seed0/induce/v{v}/llm_calls.parquet").count("inducer") == meta[v - 1]["successful"]
        names = [[f["name"] for f in manifest("babyai", variant, v)["functions"]] for v in (0, 1, 2)]
        assert names[1][: len(names[0])] == names[0] and names[2][: len(names[1])] == names[1]
    # Voyager: in each training batch's table a curriculum call before its episode and one more after each
    # achievement that ended a goal's attempt, each proposing one goal (goal_proposal: on_achievement); a
    # critic call per goal in each sleep phase.
    judged_so_far = 0
    for k in (0, 1):
        proposed = roles(runs / f"crafter/voyager/seed0/train/batch{k}/llm_calls.parquet").count("curriculum")
        sleep = roles(runs / f"crafter/voyager/seed0/induce/v{k + 1}/llm_calls.parquet")
        transcript = (runs / f"crafter/voyager/seed0/induce/v{k + 1}/transcript.jsonl").read_text().splitlines()
        judged = [t for t in map(json.loads, transcript) if "goal" in t]
        assert sleep.count("critic") == len(judged) == proposed >= 1 and set(sleep) <= {"critic", "skill_writer"}
        judged_so_far += len(judged)
        meta = manifest("crafter", "voyager", k + 1)["meta"]
        assert len(meta["completed_goals"]) + len(meta["failed_goals"]) == judged_so_far
    actor = next(c for c in pq.read_table(runs / "crafter/voyager/seed0/train/batch1/llm_calls.parquet").to_pylist()
                 if c["role"] == "actor")
    system = json.loads(actor["prompt"])
    assert "Goal for this episode:" in system["messages"][0]["content"]
