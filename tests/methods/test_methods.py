"""The comparison methods OPO, ASI (online and with replay) and Voyager: their sleep phases on a scripted
LLM over recorded episodes, what the actor is shown, and the "Add a method" example of docs/methods.md."""
from __future__ import annotations

import json
import re
import sys
import types

import pyarrow.parquet as pq
import pytest
import yaml

from skillrepro.agent import EpisodeSpec
from skillrepro.config import BenchmarkConfig, ConfigError, LLMConfig, MethodConfig
from skillrepro.check import check_config
from skillrepro.methods import InduceContext, TaskContext, get_method, registry, bind
from skillrepro.methods.common import Frame, Trace
from skillrepro.methods.voyager import FALLBACK_GOAL, parse_goals, progress, retrieve
from skillrepro.runner import run_batch
from skillrepro.skills import Library, parse_functions
from skillrepro.benchmarks import load_benchmark
from repo import ROOT
from scripted import RoleFake, methods_config
from sleep_phases import CRAFTER, calls_at, ctx_for


def test_every_method_registers_with_its_own_options_class():
    methods = registry()
    assert {"react", "speedrunner", "opo", "asi", "asi_replay", "voyager"} <= set(methods)
    assert len({methods[m].options for m in ("opo", "asi", "asi_replay", "voyager")}) == 4
    assert methods["voyager"].envs == ("crafter",) and methods["asi"].envs is None
    with pytest.raises(ConfigError, match=r"methods\.v\.options\.top_k"):
        get_method("voyager").parse_options({"top_k": "five"}, "v")


def test_voyager_runs_on_crafter_unless_told_otherwise():
    with pytest.raises(ConfigError, match=r"config key methods\.voy\.benchmarks: method voyager runs on crafter only, not on babyai"):
        check_config(methods_config(voy={"method": "voyager"}), check_files=False)
    check_config(methods_config(voy={"method": "voyager", "benchmarks": ["crafter"]}), check_files=False)
    check_config(methods_config(voy={"method": "voyager", "options": {"any_benchmark": True}}), check_files=False)


# ------------------------------------------------------------------------------------------ OPO
def test_opo_rewrites_the_notes_and_the_actor_reads_them(run, tmp_path):
    root = run["root"]
    fake = RoleFake(optimizer=["Reasoning.\n<notes>\nRead the mission twice; face the object, then pick_up.\n</notes>"])
    ctx = ctx_for(root, "opo", "opo", tag="_opo")
    v1 = get_method("opo").induce(ctx, fake)
    assert v1.version == 1 and v1.notes == "Read the mission twice; face the object, then pick_up."
    assert v1.functions == ctx.library.functions  # OPO writes notes, not skills
    # The rewrite read the batch's trajectories (both outcomes) and was recorded as an optimizer call.
    (role, _, messages), = fake.seen
    prompt = messages[1]["content"]
    assert role == "optimizer" and "SUCCESS" in prompt and "failure" in prompt and run["tasks"][1] in prompt
    calls = calls_at(ctx.record_dir)
    assert [c.role for c in calls] == ["optimizer"] and calls[0].completion_tokens == 20
    # v1's notes are what the actor is shown.
    v1.write(tmp_path / "v1")
    actor = RoleFake(actor=["Action: turn_left()"])
    run_batch(bench=BenchmarkConfig("babyai", "babyai", llm_call_budget=1), llm=LLMConfig(), library_dir=tmp_path / "v1",
              task_ids=run["tasks"][:1], spec=EpisodeSpec("r", "babyai", "opo", "opo", 0, "test", 1, 1),
              out_dir=tmp_path / "eval", method=bind(MethodConfig("opo", "opo")), client=actor)
    assert "Read the mission twice; face the object, then pick_up." in actor.seen[0][2][0]["content"]


def test_opo_keeps_the_notes_when_the_reply_has_none(run):
    ctx = ctx_for(run["root"], "opo", "opo", tag="_opo_empty")
    base = ctx.library.next_version(notes="old advice")
    ctx = InduceContext(**{**ctx.__dict__, "library": base})
    v = get_method("opo").induce(ctx, RoleFake(optimizer=["<notes></notes>"]))
    assert v.notes == "old advice" and v.meta["notes_kept"]


# ------------------------------------------------------------------------------------------ ASI
SKILL = '''```python
def face_and_grab():
    """Turn left, then pick up what is in front."""
    turn_left()
    return pick_up()
```'''


def test_asi_learns_from_successful_episodes_only_and_appends(run):
    root = run["root"]
    clash = '```python\ndef turn_around():\n    """Edited."""\n    return turn_right()\n```'
    fake = RoleFake(inducer=[SKILL + "\nAnd a better turn:\n" + clash])
    ctx = ctx_for(root, "asi", "asi", tag="_asi")
    v1 = get_method("asi").induce(ctx, fake)
    # One inducer call: the solved episode; the failed one is never shown.
    assert fake.roles() == ["inducer"]
    shown = fake.seen[0][2][1]["content"]
    assert "SUCCESS" in shown and "failure" not in shown
    # Append-only: the new function is added; the old one is neither edited nor deleted.
    assert [f.name for f in v1.functions] == ["turn_around", "face_and_grab"]
    assert v1.functions[0] == ctx.library.functions[0]
    assert v1.meta["successful"] == 1 and v1.meta["induced"] == 1
    assert [c.role for c in calls_at(ctx.record_dir)] == ["inducer"]
    log = [json.loads(line) for line in (ctx.record_dir / "transcript.jsonl").read_text().splitlines()]
    assert any("append-only" in r for r in log[0]["refused"])


def test_asi_refuses_code_that_does_not_load(run):
    ctx = ctx_for(run["root"], "asi", "asi", tag="_asi_bad")
    v1 = get_method("asi").induce(ctx, RoleFake(inducer=["```python\ndef broken(:\n    pass\n```"]))
    assert [f.name for f in v1.functions] == ["turn_around"]


def _solver(gold: list[str], name="solve_task") -> str:
    body = "\n".join(f"    {a}()" for a in gold)
    return f'```python\ndef {name}():\n    """Solve the task."""\n{body}\n    return "done"\n```'


@pytest.mark.parametrize("good", [True, False])
def test_asi_replay_keeps_a_skill_only_when_the_task_is_solved_again(run, good):
    root = run["root"]
    inducer = _solver(run["gold"]) if good else _solver(["turn_left", "turn_left"])
    fake = RoleFake(inducer=[inducer], actor=["Action: solve_task()", "Action: turn_left()"])
    ctx = ctx_for(root, "asi_replay", "asi_replay", tag=f"_replay{good}")
    v1 = get_method("asi_replay").induce(ctx, fake)
    assert ("solve_task" in [f.name for f in v1.functions]) is good
    assert v1.meta["replays"] == 1 and v1.meta["replays_solved"] == int(good)
    # The replay was a real episode on the inducing task, recorded with its own split and counted as a cost.
    replay = ctx.record_dir / "replay" / "000"
    (episode,) = pq.read_table(replay / "episodes.parquet").to_pylist()
    assert (episode["split"], episode["task_id"], episode["success"]) == ("replay", run["tasks"][0], good)
    assert pq.read_table(replay / "steps.parquet").num_rows >= 1
    assert not (replay / "llm_calls.parquet").exists()  # its calls are in the sleep phase's table
    roles = [c.role for c in calls_at(ctx.record_dir)]
    assert roles[0] == "inducer" and set(roles[1:]) == {"replay"} and len(roles) >= 2


def test_asi_online_does_not_replay(run):
    ctx = ctx_for(run["root"], "asi", "asi", tag="_noreplay")
    get_method("asi").induce(ctx, RoleFake(inducer=[_solver(["turn_left"])]))
    assert not (ctx.record_dir / "replay").exists()


# ------------------------------------------------------------------------------------------ Voyager
SKILLS = '''def collect_wood():
    """Walk to the nearest tree and collect wood from it."""
    return do()

def drink_water():
    """Go to water and drink until thirst is gone."""
    return do()

def place_crafting_table():
    """Place a crafting table next to you when you carry wood."""
    return place_table()
'''


def test_retrieval_ranks_the_skill_that_fits_the_goal():
    lib = Library(3, parse_functions(SKILLS))
    assert retrieve(lib, "gather wood from a tree", 1, "tfidf") == ["collect_wood"]
    assert retrieve(lib, "quench thirst at the lake", 1, "embedding") == ["drink_water"]  # words shared: none
    assert sorted(retrieve(lib, "anything", 5, "embedding")) == sorted(f.name for f in lib.functions)


def test_parse_goals_reads_the_task_lines_in_order():
    assert parse_goals("Reasoning: wood first.\nTask: Collect 3 wood.", 5) == ["Collect 3 wood."]
    assert parse_goals("**Task**: Make a wood pickaxe", 5) == ["Make a wood pickaxe"]
    reply = "Reasoning: r.\nTask: Collect wood\nTask 2: Place a table\n3. Task: Make a wood pickaxe\nTask: Collect wood"
    assert parse_goals(reply, 5) == ["Collect wood", "Place a table", "Make a wood pickaxe"]
    assert parse_goals(reply, 2) == ["Collect wood", "Place a table"]  # max_goals
    assert parse_goals("Reasoning: nothing", 5) == [FALLBACK_GOAL]


@pytest.fixture(scope="module")
def voyager_run(tmp_path_factory):
    """A Voyager training batch of two Crafter episodes, all goals proposed up front (`goal_proposal:
    upfront`; tests/methods/test_voyager.py plays the default, one goal per achievement): each with its curriculum
    goals and retrieved skills."""
    root = tmp_path_factory.mktemp("voyager")
    Library(0, parse_functions(SKILLS), meta={"completed_goals": ["Drink water"]}).write(root / "library" / "v0")
    tasks = load_benchmark(CRAFTER).sample_tasks("train", 2, 42)
    fake = RoleFake(curriculum=["Reasoning: trees are near.\nTask: Collect wood\nTask: Drink water",
                                "Task: Place a table"], actor=["Action: noop()"])
    method = MethodConfig("voyager", "voyager", {"top_k": 1, "retrieval": "tfidf", "goal_proposal": "upfront"})
    spec = EpisodeSpec("crafter/voyager/seed0", "crafter", "voyager", "voyager", 0, "train", 0, 0)
    run_batch(bench=CRAFTER, llm=LLMConfig(), library_dir=root / "library" / "v0", task_ids=tasks, spec=spec,
              out_dir=root / "train" / "batch0", method=bind(method), client=fake)
    return {"root": root, "fake": fake, "tasks": tasks}


def test_voyager_curriculum_goal_and_retrieved_skills_reach_the_actor(voyager_run):
    fake = voyager_run["fake"]
    assert fake.roles()[:2] == ["curriculum", "actor"]
    curriculum = fake.seen[0][2][1]["content"]
    assert "Completed goals: Drink water" in curriculum and "Achievements unlocked so far" in curriculum
    second = next(m for r, _, m in fake.seen if r == "curriculum" and m is not fake.seen[0][2])
    assert "not yet judged: Collect wood; Drink water" in second[1]["content"]  # this batch's earlier goals
    assert "up to 5 concrete tasks" in fake.seen[0][2][0]["content"]  # max_goals reaches the prompt
    actors = [m for r, _, m in fake.seen if r == "actor"]
    first_system = actors[0][0]["content"]
    assert "Goal for this episode: Collect wood; then Drink water" in first_system
    # Only the top-1 skill for each goal is listed to the actor.
    assert "collect_wood" in first_system and "drink_water" in first_system
    assert "place_crafting_table" not in first_system
    # The curriculum calls are in the batch's llm_calls table, next to the episodes they chose.
    calls = calls_at(voyager_run["root"] / "train" / "batch0")
    cur = [c for c in calls if c.role == "curriculum"]
    assert [c.session_id for c in cur] == [f"crafter/voyager/seed0/train/c0/{t}/curriculum" for t in voyager_run["tasks"]]


def test_voyager_sleep_phase_verifies_and_appends_skills(voyager_run):
    root = voyager_run["root"]
    writer = '```python\ndef collect_wood():\n    """Face a tree and hit it for wood."""\n    return do()\n```'
    drinker = '```python\ndef drink_at_lake():\n    """Walk to water and drink."""\n    return do()\n```'
    yes = "Reasoning: done.\nSuccess: yes\nCritique: none"
    fake = RoleFake(critic=[yes, yes, "Reasoning: no table.\nSuccess: no\nCritique: collect wood first"],
                    skill_writer=[writer, drinker])
    ctx = ctx_for(root, "voyager", "voyager", {"retrieval": "tfidf", "goal_proposal": "upfront"}, bench=CRAFTER, tag="_v")
    v1 = get_method("voyager").induce(ctx, fake)
    # the first episode had two goals: each judged, each reached one a skill (several skills per episode)
    assert fake.roles() == ["critic", "skill_writer", "critic", "skill_writer", "critic"]
    assert "Goal: Collect wood" in fake.seen[0][2][1]["content"] and "Goal: Drink water" in fake.seen[2][2][1]["content"]
    # Append-only with a taken name: a numbered variant beside the untouched original (no consolidation).
    assert [f.name for f in v1.functions] == [f.name for f in ctx.library.functions] + ["collect_wood_2", "drink_at_lake"]
    assert v1.functions[:3] == ctx.library.functions
    assert v1.meta["descriptions"]["collect_wood_2"] == "Face a tree and hit it for wood."
    assert v1.meta["completed_goals"] == ["Drink water", "Collect wood", "Drink water"]
    assert v1.meta["failed_goals"] == ["Place a table"]
    assert [c.role for c in calls_at(ctx.record_dir)] == ["critic", "skill_writer", "critic", "skill_writer", "critic"]


def test_voyager_curriculum_reads_the_library_progress(voyager_run, tmp_path):
    lib = Library(2, parse_functions(SKILLS), meta={"completed_goals": ["Collect wood"], "failed_goals": ["Make iron"]})
    fake = RoleFake(curriculum=["Task: Make a wood pickaxe"])
    opts = get_method("voyager").parse_options({"retrieval": "tfidf", "top_k": 2}, "v")
    choice = get_method("voyager").next_task(TaskContext(
        lib, opts, 2, 0, ("7",), (voyager_run["root"] / "train" / "batch0",), LLMConfig(), CRAFTER, fake, "r"))
    assert choice.goal == "Make a wood pickaxe" and choice.task_id == "7" and len(choice.visible) == 2
    text = fake.seen[0][2][1]["content"]
    assert "Completed goals: Collect wood" in text and "Failed goals: Make iron" in text
    assert choice.llm_calls[0].role == "curriculum"


def test_voyager_curriculum_counts_achievements_unlocked_inside_skill_calls():
    """D.2/D.3: a primitive returns None and the world is read with get_current_observation(); an achievement
    unlocked in a skill is announced to the skill (its own look, or what it returns), not to the actor."""
    inside = Trace("e1", "7", 0, False, 0.1, "start", [("collect_wood", [], "done: wood 1"), ("noop", [], "None")],
                   {0: [Frame(0, "collect_wood", "[[], {}]", "done: wood 1", [
                       ["do", [], "None"], ["get_current_observation", [], "You see a tree.\nNew achievement: Collect Wood!"]]),
                        Frame(1, "_place", "[[], {}]", "New achievement: Place Table!", [])]})
    by_actor = Trace("e2", "8", 0, False, 0.1, "start", [("get_current_observation", [], "New achievement: Collect Drink!")])
    assert progress([inside, by_actor], 0) == "Achievements unlocked so far: Collect Drink, Collect Wood, Place Table."


# ------------------------------------------------------------------------------------------ README
def test_the_readme_example_method_works_as_written(run, monkeypatch):
    from skillrepro import methods

    monkeypatch.setattr(methods, "_REGISTRY", dict(methods._REGISTRY))  # the example leaves no method behind
    doc = (ROOT / "docs" / "methods.md").read_text()
    section = doc.split("## Add a method", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    module = types.ModuleType("readme_scribe")  # what importing methods/scribe.py would make
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(code, "docs/methods.md", "exec"), module.__dict__)
    method = get_method("scribe")
    # its one config entry is all the config check needs (the registry is the list of method names)
    entry = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.DOTALL).group(1))
    assert check_config(methods_config(**entry["methods"]), check_files=False)["methods"]["scribe"]["options"] == \
        {"max_lines": 8}
    ctx = ctx_for(run["root"], "scribe", "scribe", {"max_lines": 5}, tag="_scribe")
    fake = RoleFake(optimizer=["- face the object before pick_up\n- read the mission"])
    v1 = method.induce(ctx, fake)
    assert v1.version == 1 and "face the object before pick_up" in v1.notes
    assert [c.role for c in calls_at(ctx.record_dir)] == ["optimizer"]
    with pytest.raises(ConfigError, match="max_lines"):
        method.parse_options({"max_lines": 0}, "scribe")
