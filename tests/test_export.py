"""`skillrepro export RUN OUT`: a real run folder (scripted actor on BabyAI, two library versions, a training batch,
a checkpoint, a sleep phase's calls) exported as a user runs it, and read back with Hugging Face `datasets`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from skillrepro.agent import EpisodeSpec
from skillrepro.benchmarks import load_benchmark
from skillrepro.config import BenchmarkConfig, LLMConfig
from skillrepro.llm.client import Reply
from skillrepro.runner import run_batch
from skillrepro.skills import Library, parse_functions
from skillrepro.store import Episode, LLMCall, SkillCall, Step, read_records, write_records

SRC = Path(__file__).resolve().parents[1] / "src"
RUN = "results/runs/babyai/speedrunner/seed0"  # relative, as a user in the workflow's folder types it
REACT = "results/runs/babyai/react/seed1"
BENCH = BenchmarkConfig(name="babyai", env="babyai", llm_call_budget=6)

V0_SOURCE = 'def turn_around():\n    """Turn twice."""\n    turn_left()\n    return turn_left()\n'
V1_SOURCE = V0_SOURCE + '\n\ndef _step_twice():\n    go_forward()\n    return go_forward()\n\n\n' \
    'def advance():\n    """Turn, then step twice."""\n    turn_around()\n    return _step_twice()\n'


class Fake:
    """Scripted LLM, as tests/scripted.py's Fake: replays `replies` in a loop, recording each call as the real
    client does."""

    def __init__(self, replies: list[str]):
        self.replies, self.i = replies, 0

    def chat(self, messages, *, role, session_id, tools=None, max_tokens=None, stop=None, seed=0, extra_body=None):
        text = self.replies[self.i % len(self.replies)]
        self.i += 1
        rec = LLMCall(uuid.uuid4().hex, session_id, role, "fake", "fake", 100, None, 20, 0, 0.01, 0, "stop", "0" * 64,
                      json.dumps({"messages": messages, "tools": tools or []}), text, 0.0)
        return Reply(text, [], "stop", rec)


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """`skillrepro ARGS` in `cwd`, in a process of its own, with this checkout's package."""
    return subprocess.run([sys.executable, "-m", "skillrepro.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(SRC)})


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A workflow folder holding two runs. RUN: library v0 and v1, training batch 0 (v0), checkpoint eval/v1 (v1)
    and the sleep phase induce/v1's calls; REACT: an empty library v0 and training batch 0."""
    root = tmp_path_factory.mktemp("project")
    run = root / RUN
    Library(0, parse_functions(V0_SOURCE), meta={"method": "speedrunner"}).write(run / "library" / "v0")
    Library(1, parse_functions(V1_SOURCE), notes="Prefer advance().",
            meta={"method": "speedrunner", "requests": 3}).write(run / "library" / "v1")
    bench = load_benchmark(BENCH)
    actor = Fake(["Thought: look around.\nAction: turn_around()", "Thought: go.\nAction: go_forward()",
                  "Thought: grab.\nAction: pick_up()"])
    for split, k, out in (("train", 0, "train/batch0"), ("test", 1, "eval/v1")):
        spec = EpisodeSpec("babyai/speedrunner/seed0", "babyai", "speedrunner", "speedrunner", 0, split, k, k)
        run_batch(bench=BENCH, llm=LLMConfig(), library_dir=run / "library" / f"v{k}",
                  task_ids=bench.sample_tasks(split, 3 if split == "train" else 2, 42), spec=spec, out_dir=run / out,
                  client=actor)
    sleep = [LLMCall(f"sleep{i}", "induce-v1", "inducer", "fake", "fake", 50, 10, 5, 0, 0.1, 0, "stop", "1" * 64,
                     "[]", "Action: finish()", 1.0) for i in range(2)]
    write_records(run / "induce" / "v1" / "llm_calls.parquet", sleep, LLMCall)
    # a method that learns no functions: an empty library, an actor that calls primitives only
    react = root / REACT
    Library(0).write(react / "library" / "v0")
    spec = EpisodeSpec("babyai/react/seed1", "babyai", "react", "react", 1, "train", 0, 0)
    run_batch(bench=BENCH, llm=LLMConfig(), library_dir=react / "library" / "v0",
              task_ids=bench.sample_tasks("train", 2, 1), spec=spec, out_dir=react / "train" / "batch0",
              client=Fake(["Thought: go.\nAction: go_forward()"]))
    return root


@pytest.fixture(scope="module")
def exported(project) -> tuple[Path, subprocess.CompletedProcess]:
    done = cli(project, "export", RUN, "export_out")
    assert done.returncode == 0, done.stderr
    return project / "export_out", done


def records(project: Path, table: str, cls: type) -> dict[str, list]:
    """The run's own records of one table, by split: training batch 0 (and the sleep phase), checkpoint v1."""
    run = project / RUN
    folders = {"train": ["train/batch0", "induce/v1"], "test": ["eval/v1"]}
    return {split: [r for f in fs if (run / f / f"{table}.parquet").exists()
                    for r in read_records(run / f / f"{table}.parquet", cls)]
            for split, fs in folders.items()}


def load(out: Path, config: str, tmp: Path):
    import datasets

    return datasets.load_dataset(str(out), config, cache_dir=str(tmp / "hf_cache"))


def test_episodes_and_steps_read_back_with_datasets(exported, project, tmp_path):
    out, done = exported
    assert "episodes: train 3 rows, test 2 rows" in done.stdout
    episodes = load(out, "episodes", tmp_path)
    mine = records(project, "episodes", Episode)
    assert sorted(episodes) == ["test", "train"]
    for split in ("train", "test"):
        got = [(e["episode_id"], e["success"], e["n_steps"], e["split"], e["library_version"], e["folder"])
               for e in episodes[split]]
        want = [(e.episode_id, e.success, e.n_steps, e.split, e.library_version,
                 "train/batch0" if split == "train" else "eval/v1") for e in mine[split]]
        assert got == want
    # every other column as recorded, cached_tokens' None (unknown) included
    first = mine["train"][0]
    assert {k: v for k, v in episodes["train"][0].items() if k != "folder"} == vars(first)
    assert first.cached_tokens is None
    steps = load(out, "steps", tmp_path)
    my_steps = records(project, "steps", Step)
    for split in ("train", "test"):
        assert [(s["episode_id"], s["step"], s["action"], s["observation"]) for s in steps[split]] == \
               [(s.episode_id, s.step, s.action, s.observation) for s in my_steps[split]]
        # each episode's steps are as many as it says it took
        assert Counter(s["episode_id"] for s in steps[split]) == \
               Counter({e.episode_id: e.n_steps for e in mine[split]})


def test_calls_read_back(exported, project, tmp_path):
    out, _ = exported
    calls = load(out, "llm_calls", tmp_path)
    mine = records(project, "llm_calls", LLMCall)
    assert [c["call_id"] for c in calls["train"]] == [c.call_id for c in mine["train"]]
    assert [c["call_id"] for c in calls["test"]] == [c.call_id for c in mine["test"]]
    # the sleep phase's calls come after the batch before it, tagged with their folder
    assert [c["folder"] for c in calls["train"]][-2:] == ["induce/v1", "induce/v1"]
    assert calls["train"][-1]["role"] == "inducer" and calls["train"][-1]["cached_tokens"] == 10
    skill = load(out, "skill_calls", tmp_path)
    my_skill = records(project, "skill_calls", SkillCall)
    assert my_skill["train"], "the scripted actor calls turn_around(): the batch has skill calls to compare"
    for split in ("train", "test"):
        assert [(c["frame_id"], c["function"], c["episode_id"]) for c in skill[split]] == \
               [(c.frame_id, c.function, c.episode_id) for c in my_skill[split]]


def test_libraries_one_row_per_function_per_version(exported, project, tmp_path):
    out, _ = exported
    rows = load(out, "libraries", tmp_path)["train"]
    got = [(r["version"], r["name"], r["public"], r["signature"], r["doc"], r["source"], r["callees"]) for r in rows]
    want = [(lib.version, f.name, f.public, f.signature, f.doc, f.source, list(f.callees))
            for lib in (Library.load(project / RUN / "library" / f"v{k}") for k in (0, 1)) for f in lib.functions]
    assert got == want
    assert [(r[0], r[1], r[2]) for r in got][1:] == [(1, "turn_around", True), (1, "_step_twice", False),
                                                     (1, "advance", True)]
    assert [r for r in got if r[1] == "advance"][0][6] == ["_step_twice", "turn_around"]
    versions = load(out, "library_versions", tmp_path)["train"]
    assert [(v["version"], v["n_functions"], v["n_public"], v["notes"]) for v in versions] == \
           [(0, 1, 1, ""), (1, 3, 2, "Prefer advance().")]
    assert json.loads(versions[1]["meta"]) == {"method": "speedrunner", "requests": 3}


def test_the_card_names_the_run_and_its_globs_read_with_the_parquet_loader(exported, tmp_path):
    import datasets

    out, _ = exported
    text = (out / "README.md").read_text()
    _, front, body = text.split("---\n", 2)
    configs = {c["config_name"]: c for c in yaml.safe_load(front)["configs"]}
    assert sorted(configs) == ["episodes", "libraries", "library_versions", "llm_calls", "skill_calls", "steps"]
    assert configs["episodes"]["data_files"] == [{"split": "train", "path": "episodes/train-*.parquet"},
                                                 {"split": "test", "path": "episodes/test-*.parquet"}]
    assert "benchmark `babyai`, variant `speedrunner`" in body and "seed 0" in body
    assert f"skillrepro {version('skillrepro')}" in body
    for name in configs:
        assert f"| `{name}` |" in body  # what each table holds
    files = {d["split"]: str(out / d["path"]) for d in configs["steps"]["data_files"]}
    steps = datasets.load_dataset("parquet", data_files=files, cache_dir=str(tmp_path / "hf_cache"))
    episodes = load(out, "episodes", tmp_path)
    assert {s: steps[s].num_rows for s in steps} == {s: sum(episodes[s]["n_steps"]) for s in ("train", "test")}


def test_a_run_without_skills_leaves_out_its_empty_tables(project, tmp_path):
    """A method that learns no functions (react): no libraries or skill_calls config, whose empty Parquet files
    `datasets` could not read; every config the card lists loads."""
    done = cli(project, "export", REACT, "react_out")
    assert done.returncode == 0, done.stderr
    front = (project / "react_out" / "README.md").read_text().split("---\n", 2)[1]
    configs = [c["config_name"] for c in yaml.safe_load(front)["configs"]]
    assert configs == ["episodes", "steps", "llm_calls", "library_versions"]
    assert list(load(project / "react_out", "episodes", tmp_path)) == ["train"]
    for name in configs:
        assert sum(len(part) for part in load(project / "react_out", name, tmp_path).values()) > 0


def test_a_missing_or_empty_run_folder_is_named_and_nothing_is_written(project):
    missing = "results/runs/babyai/speedrunner/seed7"
    done = cli(project, "export", missing, "out_missing")
    assert done.returncode != 0 and f"run folder {missing} does not exist" in done.stderr
    assert not (project / "out_missing").exists()
    empty = project / "results/runs/babyai/speedrunner/seed8"
    Library(0, parse_functions(V0_SOURCE)).write(empty / "library" / "v0")  # a run started, no batch played yet
    done = cli(project, "export", "results/runs/babyai/speedrunner/seed8", "out_empty")
    assert done.returncode != 0
    assert "run folder results/runs/babyai/speedrunner/seed8 holds no episodes" in done.stderr
    assert not (project / "out_empty").exists()


def test_a_non_empty_out_is_refused_without_force(project):
    out = project / "occupied"
    (out / "skill_calls").mkdir(parents=True)  # as an earlier export of another run left it
    (out / "skill_calls" / "train-00000-of-00001.parquet").write_text("stale")
    (out / "notes.txt").write_text("mine")
    done = cli(project, "export", RUN, "occupied")
    assert done.returncode != 0 and "occupied exists and is not empty" in done.stderr and "--force" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "skill_calls"]
    done = cli(project, "export", REACT, "occupied", "--force")  # a run with no skill calls
    assert done.returncode == 0, done.stderr
    assert not (out / "skill_calls").exists()  # the earlier export's table, which the card no longer lists
    done = cli(project, "export", RUN, "occupied", "--force")
    assert done.returncode == 0, done.stderr
    assert (out / "README.md").is_file() and (out / "episodes" / "train-00000-of-00001.parquet").is_file()
    assert (out / "notes.txt").read_text() == "mine"  # only an export's own files are replaced
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no staging folder left behind


_PROBE = """
import sys
import skillrepro.cli as cli
try:
    cli.main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print(code, sorted(m for m in sys.modules if m.startswith(("skillrepro", "pyarrow"))), file=sys.stderr)
"""


def test_version_prints_the_package_version_and_imports_no_command(tmp_path):
    done = cli(tmp_path, "--version")
    assert (done.returncode, done.stdout) == (0, f"skillrepro {version('skillrepro')}\n")
    probe = subprocess.run([sys.executable, "-c", _PROBE, "--version"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(SRC)})
    assert probe.stderr.strip().splitlines()[-1] == "0 ['skillrepro', 'skillrepro.cli']"
