"""The batch runner: a killed batch resumes from its finished episodes, a batch merged but not recorded is
restored as it was, and episodes in flight together give the records of a sequential run."""
import dataclasses
import threading
import time
import zlib
from dataclasses import replace

import pytest

from scripted import ScriptedClient
from skillrepro.agent import EpisodeSpec
from skillrepro.config import BenchmarkConfig, LLMConfig, MethodConfig
from skillrepro.llm.client import Reply
from skillrepro.methods import Method, NoOptions, TaskChoice, Variant
from skillrepro.methods.react import induce as react_induce
from skillrepro.runner import forget_finished, resume_dir, run_batch
from skillrepro.skills import Library
from skillrepro.store import Episode, LLMCall, SkillCall, Step, read_records
from skillrepro.benchmarks import load_benchmark

TABLES = {"episodes": Episode, "steps": Step, "llm_calls": LLMCall, "skill_calls": SkillCall}


class Killed(Exception):
    pass


class DiesAfter(ScriptedClient):
    """Answers `n` requests, then fails as if the job were killed."""

    def __init__(self, n):
        super().__init__(["Action: turn_left()"])
        self.left = n

    def chat(self, *a, **kw):
        if self.left == 0:
            raise Killed()
        self.left -= 1
        return super().chat(*a, **kw)


class ByRequest(ScriptedClient):
    """A reply chosen by the request's seed (episode and step), as a seeded server samples; it counts how
    many requests are in flight at once."""

    ACTIONS = ["Action: turn_left()", "Action: go_forward()", "Action: turn_right()", "Action: jump()"]

    def __init__(self, delay_s=0.0):
        super().__init__([])
        self.delay_s, self.lock, self.now, self.peak = delay_s, threading.Lock(), 0, 0

    def chat(self, messages, *, role, session_id, tools=None, max_tokens=None, stop=None, seed=0, extra_body=None):
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        time.sleep(self.delay_s)
        text = self.ACTIONS[zlib.crc32(f"{seed}".encode()) % len(self.ACTIONS)]
        rec = LLMCall(f"{session_id}/{len(messages)}", session_id, role, "scripted", "scripted", 10 * len(messages),
                      5, 4, 0, 0.0, 0, "stop", "0" * 64, "", text, 0.0)
        with self.lock:
            self.now -= 1
            self.requests.append(messages)
        return Reply(text, [], "stop", rec)


@pytest.fixture
def batch(tmp_path):
    Library(version=0).write(tmp_path / "v0")
    bench = BenchmarkConfig("babyai", "babyai", llm_call_budget=3)
    spec = EpisodeSpec("babyai/react/seed0", "babyai", "react", "react", 0, "train", 0, 0)
    return dict(bench=bench, llm=LLMConfig(), library_dir=tmp_path / "v0", task_ids=load_benchmark(bench).sample_tasks("train", 4, 42),
                spec=spec, out_dir=tmp_path / "batch0")


def tables(out_dir):
    """Every record of a batch folder, without what differs between two plays of the same batch (timings)."""
    drop = {"latency_s", "started_at", "wall_s", "harness_ms", "duration_s"}
    return {name: [{k: v for k, v in dataclasses.asdict(r).items() if k not in drop}
                   for r in read_records(out_dir / f"{name}.parquet", cls)] for name, cls in TABLES.items()}


def test_killed_batch_resumes_where_it_stopped(batch):
    batch["bench"] = replace(batch["bench"], llm_call_budget=2)
    with pytest.raises(Killed):
        run_batch(client=DiesAfter(3), **batch)  # episode 1 finishes, episode 2 dies after one call
    assert not (batch["out_dir"] / "episodes.parquet").exists()

    resumed = DiesAfter(100)
    out = run_batch(client=resumed, **batch)
    assert len(resumed.requests) == 6  # only episodes 2, 3 and 4 were played again
    episodes = read_records(batch["out_dir"] / "episodes.parquet", Episode)
    assert [e.task_id for e in episodes] == batch["task_ids"] == [e.task_id for e in out.episodes]


def test_batch_merged_but_not_recorded_is_restored_without_a_call(batch):
    run_batch(client=ByRequest(), **batch)
    before = tables(batch["out_dir"])
    for f in batch["out_dir"].iterdir():  # what Snakemake does to the outputs of a job it did not record
        f.unlink()
    run_batch(client=DiesAfter(0), **batch)  # any LLM call would raise
    assert tables(batch["out_dir"]) == before  # same episodes, same ids
    # Once Snakemake has recorded the job, the resume folder goes and a forced rerun plays afresh.
    assert forget_finished([batch["out_dir"] / "episodes.parquet"]) == 1
    assert not resume_dir(batch["out_dir"]).exists()


def test_a_batch_with_other_settings_starts_afresh(batch):
    run_batch(client=ByRequest(), **batch)
    (batch["out_dir"] / "episodes.parquet").unlink()
    fresh = ByRequest()
    run_batch(client=fresh, **{**batch, "llm": LLMConfig(temperature=0.3)})
    assert len(fresh.requests) == 4 * 3
    # Settings that only change speed keep the finished episodes.
    (batch["out_dir"] / "episodes.parquet").unlink()
    run_batch(client=DiesAfter(0), **{**batch, "llm": LLMConfig(temperature=0.3, episodes_in_flight=4, slots=8)})


def test_episodes_in_flight_give_the_records_of_a_sequential_run(batch, tmp_path):
    run_batch(client=ByRequest(), **{**batch, "out_dir": tmp_path / "seq" / "batch0"})
    parallel = ByRequest(delay_s=0.02)
    run_batch(client=parallel, **{**batch, "llm": LLMConfig(episodes_in_flight=3), "out_dir": tmp_path / "par" / "batch0"})
    assert parallel.peak == 3
    seq, par = tables(tmp_path / "seq" / "batch0"), tables(tmp_path / "par" / "batch0")
    assert [e["task_id"] for e in par["episodes"]] == batch["task_ids"]
    assert seq == par  # episode ids included


def test_a_failed_episode_stops_the_batch_and_keeps_the_finished_ones(batch):
    with pytest.raises(Killed):
        run_batch(client=DiesAfter(7), **{**batch, "llm": LLMConfig(episodes_in_flight=2)})
    finished = sorted(p.name for p in resume_dir(batch["out_dir"]).glob("[0-9]*") if (p / "episodes.parquet").exists())
    assert len(finished) >= 1
    resumed = DiesAfter(100)
    run_batch(client=resumed, **{**batch, "llm": LLMConfig(episodes_in_flight=2)})
    assert len(resumed.requests) == 3 * (4 - len(finished))


def test_a_curriculum_plays_its_batch_one_episode_at_a_time(batch):
    seen = []

    def next_task(ctx):
        seen.append(len(ctx.history_dirs))  # every earlier episode of the batch is visible to the next choice
        return TaskChoice(ctx.planned[ctx.index])

    method = Variant(MethodConfig("cur", "test-curriculum"), Method("test-curriculum", NoOptions, react_induce,
                                                                   next_task=next_task), NoOptions())
    client = ByRequest(delay_s=0.01)
    run_batch(client=client, method=method,
              **{**batch, "llm": LLMConfig(episodes_in_flight=4)})
    assert seen == [0, 1, 2, 3] and client.peak == 1
