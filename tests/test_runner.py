"""A batch killed mid-way resumes from the last finished episode; its files appear only when complete."""
import pytest

from scripted import ScriptedClient
from skillrepro.agent import EpisodeSpec
from skillrepro.config import BenchmarkConfig, LLMConfig
from skillrepro.runner import run_batch
from skillrepro.skills import Library
from skillrepro.store import Episode, read_records


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


def test_killed_batch_resumes_where_it_stopped(tmp_path):
    Library(version=0).write(tmp_path / "v0")
    bench = BenchmarkConfig("babyai", "babyai", llm_call_budget=2)
    tasks = bench.load().sample_tasks("train", 3, 42)
    spec = EpisodeSpec("babyai/react/seed0", "babyai", "react", "react", 0, "train", 0, 0)
    kw = dict(bench=bench, llm=LLMConfig(), library_dir=tmp_path / "v0", task_ids=tasks, spec=spec,
              out_dir=tmp_path / "batch0")

    with pytest.raises(Killed):
        run_batch(client=DiesAfter(3), **kw)  # episode 1 finishes, episode 2 dies after one call
    assert not (tmp_path / "batch0" / "episodes.parquet").exists()

    resumed = DiesAfter(100)
    out = run_batch(client=resumed, **kw)
    assert len(resumed.requests) == 4  # only episodes 2 and 3 were played again
    episodes = read_records(tmp_path / "batch0" / "episodes.parquet", Episode)
    assert [e.task_id for e in episodes] == tasks == [e.task_id for e in out.episodes]
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no partial folder left behind
