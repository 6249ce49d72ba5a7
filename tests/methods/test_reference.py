"""The `reference` method (a fixed hand-written library, the positive control): its options, library v0, the
shipped BabyAI library on its own through the real sandbox, and an episode played with it through the actor's
tool path (scripted replies). The run through the DAG on the real model is in tests/workflow/test_workflow.py."""
from __future__ import annotations

import json
import uuid

import pyarrow.parquet as pq
import pytest

from skillrepro.agent import EpisodeSpec
from skillrepro.benchmarks import get_benchmark
from skillrepro.config import BenchmarkConfig, ConfigError, LLMConfig, MethodConfig
from skillrepro.check import check_config
from skillrepro.llm.client import Reply
from skillrepro.methods import InduceContext, get_method, bind
from skillrepro.runner import run_batch
from skillrepro.skills import Library
from skillrepro.skills.sandbox import SandboxSession
from skillrepro.store import LLMCall
from scripted import methods_config

BABYAI = BenchmarkConfig(name="babyai", env="babyai", llm_call_budget=4)
REFERENCE = get_method("reference")


def shipped(bench: BenchmarkConfig = BABYAI) -> Library:
    return REFERENCE.initial(bench, REFERENCE.parse_options({}, "reference"))


def test_options_library_is_checked_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match=r"methods\.ref\.options: library: .*missing is not a folder"):
        REFERENCE.parse_options({"library": str(tmp_path / "missing")}, "ref")
    with pytest.raises(ConfigError, match=r"methods\.ref\.options: library: .* has no skills\.py"):
        REFERENCE.parse_options({"library": str(tmp_path)}, "ref")
    (tmp_path / "skills.py").write_text("def _private():\n    return 1\n")
    with pytest.raises(ConfigError, match=r"methods\.ref\.options: library: .*no public function"):
        REFERENCE.parse_options({"library": str(tmp_path)}, "ref")
    (tmp_path / "skills.py").write_text("def broken(:\n")
    with pytest.raises(ConfigError, match=r"methods\.ref\.options: library: .*does not parse"):
        REFERENCE.parse_options({"library": str(tmp_path)}, "ref")
    # The config check refuses it (before any job), and a shipped library exists only for some envs.
    with pytest.raises(ConfigError, match=r"methods\.ref\.options: library"):
        check_config(methods_config(ref={"method": "reference", "options": {"library": str(tmp_path / "missing")}}),
                     check_files=False)
    check_config(methods_config(ref={"method": "reference"}), check_files=False)  # BabyAI and Crafter: shipped
    with_alfworld = methods_config(ref={"method": "reference"})
    with_alfworld["benchmarks"]["alf"] = {"env": "alfworld"}
    with pytest.raises(ConfigError, match=r"methods\.ref\.benchmarks: method reference runs on babyai, crafter, "
                                          r"scienceworld only, not on alf"):
        check_config(with_alfworld, check_files=False)
    check_config(methods_config(ref={"method": "reference", "benchmarks": ["babyai"]}), check_files=False)


def test_v0_is_the_library_folder_and_no_sleep_phase_changes_it(tmp_path):
    lib = shipped()
    assert [f.name for f in lib.public()] == ["solve_mission"] and len(lib.functions) > 5
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "skills.py").write_text('def spin():\n    """Turn twice."""\n    turn_left()\n    return turn_left()\n')
    (mine / "notes.md").write_text("Call spin() first.")
    opts = REFERENCE.parse_options({"library": str(mine)}, "ref")
    v0 = REFERENCE.initial(BenchmarkConfig("crafter", "crafter"), opts)  # a user's library: any benchmark
    assert [f.name for f in v0.functions] == ["spin"] and v0.notes == "Call spin() first."
    v0.write(tmp_path / "lib" / "v0")
    ctx = InduceContext(library=Library.load(tmp_path / "lib" / "v0"), cycle=0, history_dirs=(),
                        library_root=tmp_path / "lib", out_dir=tmp_path / "lib" / "v1", record_dir=tmp_path / "rec",
                        run_id="babyai/ref/seed0", bench=BABYAI, method=MethodConfig("ref", "reference"),
                        llm=LLMConfig(), request_budget=0)
    v1 = REFERENCE.sleep(ctx)
    assert v1.version == 1 and v1.functions == v0.functions and v1.notes == v0.notes


@pytest.mark.parametrize("mission, goals", [
    ("pick up the red box, then go to the yellow key", [("pick", "red", "box"), ("go", "yellow", "key")]),
    ("go to the yellow key after you pick up the red box", [("pick", "red", "box"), ("go", "yellow", "key")]),
    ("pick up a grey ball after you go to a blue key", [("go", "blue", "key"), ("pick", "grey", "ball")]),
    ("Mission: go to a green box after you pick up a purple key\na wall 2 steps forward",
     [("pick", "purple", "key"), ("go", "green", "box")]),
    ("walk somewhere", []),
])
def test_the_mission_parser_puts_the_goals_in_execution_order(mission, goals):
    ns: dict = {}
    exec(shipped().source, ns)  # the parser needs no primitive
    assert ns["_parse_mission"](mission) == goals


def test_the_babyai_library_solves_test_tasks_on_its_own_through_the_sandbox():
    """No LLM: solve_mission(mission) on the first 10 test tasks, in the real sandbox, as the actor's tool would
    call it. Measured on all 30 test tasks (and 200 training tasks): every one solved."""
    bench, lib = get_benchmark("babyai"), shipped()
    solved, frames = 0, []
    for task in bench.sample_tasks("test", 10, 42):
        env = bench.make(task)
        env.reset()
        session = SandboxSession(source=lib.source, env=env, record=frames.append)
        try:
            out = session.call_skill("solve_mission", [env.mission])
        finally:
            session.close()
        solved += env.success()
        assert out.ok, out.exception
        assert (out.ret == "Mission complete.") == env.success()
    assert solved >= 8
    # The call stacks are recorded: nested helpers under the actor's call, with the primitives they issued.
    assert {"solve_mission", "_go_next_to", "_plan"} <= {f.function for f in frames}
    assert any(f.primitives and "go_forward" in f.primitives for f in frames)


class Scripted:
    """An actor that calls solve_mission with the mission it reads in the opening observation."""

    def __init__(self):
        self.prompts: list[list[dict]] = []

    def chat(self, messages, *, role, session_id, tools=None, max_tokens=None, stop=None, seed=0, extra_body=None):
        self.prompts.append(messages)
        mission = messages[1]["content"].splitlines()[0].removeprefix("Mission: ")
        text = f'Thought: the skill does it.\nAction: solve_mission("{mission}")'
        rec = LLMCall(uuid.uuid4().hex, session_id, role, "fake", "fake", 100, 0, 12, 0, 0.01, 0, "stop", "0" * 64,
                      json.dumps({"messages": messages}), json.dumps({"content": text}), 0.0)
        return Reply(text, [], "stop", rec)


def test_an_episode_with_the_reference_library_succeeds_through_the_actors_tool_path(tmp_path):
    shipped().write(tmp_path / "v0")
    actor = Scripted()
    task = get_benchmark("babyai").sample_tasks("test", 1, 42)
    run_batch(bench=BABYAI, llm=LLMConfig(), library_dir=tmp_path / "v0", task_ids=task,
              spec=EpisodeSpec("babyai/ref/seed0", "babyai", "reference", "ref", 0, "test", 0, 0),
              out_dir=tmp_path / "eval", method=bind(MethodConfig("ref", "reference")), client=actor)
    episodes = pq.read_table(tmp_path / "eval" / "episodes.parquet").to_pylist()
    calls = pq.read_table(tmp_path / "eval" / "skill_calls.parquet").to_pylist()
    assert [e["success"] for e in episodes] == [True] and episodes[0]["n_llm_calls"] == 1
    root = [c for c in calls if not c["parent_frame_id"]]
    assert [c["function"] for c in root] == ["solve_mission"] and root[0]["step"] == 0
    # The skill is listed to the actor under its own heading, before the primitives, and the protocol's
    # example is a call of it.
    system = actor.prompts[0][0]["content"]
    assert "\nSkills: " in system and "- solve_mission(mission: str): " in system
    assert system.index("solve_mission(") < system.index("Your primitive actions") < system.index("turn_left(")
    assert 'for example solve_mission("<mission>")' in system


# ------------------------------------------------------------------ ScienceWorld T3/T4 and Crafter
class ScriptedCall:
    """An actor that always answers with one call, built from the opening observation (messages[1])."""

    def __init__(self, action):
        self.action, self.prompts = action, []

    def chat(self, messages, *, role, session_id, tools=None, max_tokens=None, stop=None, seed=0, extra_body=None):
        self.prompts.append(messages)
        text = f"Thought: the skill does it.\nAction: {self.action(messages[1]['content'])}"
        rec = LLMCall(uuid.uuid4().hex, session_id, role, "fake", "fake", 100, 0, 12, 0, 0.01, 0, "stop", "0" * 64,
                      json.dumps({"messages": messages}), json.dumps({"content": text}), 0.0)
        return Reply(text, [], "stop", rec)


def play_reference(tmp_path, bench: BenchmarkConfig, task_ids: list[str], action) -> tuple[list[dict], list[dict]]:
    """Episodes of the shipped library for `bench`, each action the scripted actor's call of its top skill,
    through run_batch (the actor's tool path, the real sandbox and env): (episodes, skill-call frames)."""
    shipped(bench).write(tmp_path / "v0")
    run_batch(bench=bench, llm=LLMConfig(), library_dir=tmp_path / "v0", task_ids=task_ids,
              spec=EpisodeSpec(f"{bench.name}/ref/seed0", bench.name, "reference", "ref", 0, "test", 0, 0),
              out_dir=tmp_path / "eval", method=bind(MethodConfig("ref", "reference")), client=ScriptedCall(action))
    return (pq.read_table(tmp_path / "eval" / "episodes.parquet").to_pylist(),
            pq.read_table(tmp_path / "eval" / "skill_calls.parquet").to_pylist())


def task_call(opening: str) -> str:
    """solve_task("<the task text>"): the opening observation starts "Task: <text>" and then the room."""
    task = opening.split("\n\n")[0].removeprefix("Task: ").strip()
    return f"solve_task({json.dumps(task)})"


@pytest.mark.parametrize("family, task", [
    ("electricity", "test-conductivity:870"),  # T3: fetch the wood block, test it in a circuit, sort it
    ("electricity", "power-component-renewable-vs-nonrenewable-energy:18"),  # carry a wind generator outside
    ("classification", "find-animal:263"),  # T4: find an animal outdoors, carry it to the box
])
def test_the_scienceworld_library_solves_t3_and_t4_tasks_through_the_actors_tool_path(tmp_path, family, task):
    """One actor call of solve_task(task text) solves the task and submits it (measured without an LLM on 40
    test tasks of each family by perf/reference_libraries.py: every one solved)."""
    bench = BenchmarkConfig(name=f"sw_{family}", env="scienceworld", options={"family": family}, llm_call_budget=2)
    lib = shipped(bench)
    assert [f.name for f in lib.public()] == ["solve_task"]
    episodes, calls = play_reference(tmp_path, bench, [task], task_call)
    assert [(e["success"], e["termination"], e["n_llm_calls"]) for e in episodes] == [(True, "success", 1)]
    root = [c for c in calls if not c["parent_frame_id"]]
    assert [c["function"] for c in root] == ["solve_task"]
    issued = {p[0] for c in calls for p in json.loads(c["primitives"])}
    assert json.loads(root[0]["primitives"])[-1][0] == "submit_answer" and "focus_on" in issued
    assert ("connect" in issued) == (family == "electricity")


def test_the_scienceworld_library_reads_the_task_from_the_environment_when_the_actor_paraphrases_it(tmp_path):
    """The shipped 0.5B actor sometimes passes a paraphrase ("Check if ... is electrically conductive", "find
    living thing"): the skill then reads the task with the task_description primitive."""
    bench = BenchmarkConfig(name="sw_electricity", env="scienceworld", options={"family": "electricity"}, llm_call_budget=2)
    episodes, calls = play_reference(tmp_path, bench, ["test-conductivity:870"],
                                     lambda _opening: 'solve_task("Check if the wood block is electrically conductive.")')
    assert [(e["success"], e["n_llm_calls"]) for e in episodes] == [(True, 1)]
    root = [c for c in calls if not c["parent_frame_id"]]
    assert json.loads(root[0]["primitives"])[0][0] == "task_description"


def test_the_crafter_library_climbs_the_tech_tree_through_the_actors_tool_path(tmp_path):
    """Two actor calls of play_step() on a fixed test world (the sandbox allows 200 primitives a call, so
    each plays about 95 actions): wood, a table, a wood pickaxe and sword at least. Measured without an LLM on
    10 test worlds by perf/reference_libraries.py: progression 0.57 where random primitives get 0.10."""
    bench = BenchmarkConfig(name="crafter", env="crafter", llm_call_budget=2)
    assert [f.name for f in shipped(bench).public()] == ["play_step"]
    episodes, calls = play_reference(tmp_path, bench, ["1100596916"], lambda opening: "play_step()")
    [episode] = episodes
    assert episode["n_llm_calls"] == 2 and episode["progression"] >= 4 / 22
    root = [c for c in calls if not c["parent_frame_id"]]
    assert [c["function"] for c in root] == ["play_step", "play_step"] and not any(c["exception"] for c in root)
    issued = {p[0] for c in calls for p in json.loads(c["primitives"])}
    assert {"do", "place_table", "make_wood_pickaxe", "make_wood_sword", "get_current_observation"} <= issued
