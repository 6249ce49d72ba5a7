"""ScienceWorld: ScienceWorld's own gold paths, replayed through our primitives, are the oracle.

One JVM serves the whole module (as in production: one per process), so the tests share it and run in order.
"""
from __future__ import annotations

import re

import pytest

from scripted import ScriptedClient
from skillrepro.agent import Actor, EpisodeSpec, primitive_tools
from skillrepro.benchmarks import ActionError, TaskError, get_benchmark
from skillrepro.benchmarks import scienceworld as sw
from skillrepro.benchmarks.scienceworld import FAMILIES, ScienceWorldBenchmark, gold_path, parse_command, partitions

PAPER_PRIMITIVES = [
    "go", "look_around", "look_at", "look_in", "pick_up", "put_down", "move", "pour", "dunk", "open", "close",
    "activate", "deactivate", "connect", "disconnect", "mix", "focus_on", "read", "use", "inventory",
    "task_description", "eat", "flush", "wait", "disambiguate",
]


def _oracle_cases() -> list[tuple[str, str]]:
    return [(family, task) for family, tasks in FAMILIES.items() for task in tasks]


@pytest.mark.parametrize("family,task", _oracle_cases())
def test_gold_path_through_our_primitives_reaches_100(family, task):
    bench = ScienceWorldBenchmark(family=family)
    parts = partitions(task)
    # Five variations per task: three from ScienceWorld's train partition, two from its test partition.
    variations = list(parts["train"][:2]) + [parts["train"][-1]] + list(parts["test"][:1]) + [parts["test"][-1]]
    assert len(set(variations)) == 5
    for v in variations:
        task_id = f"{task}:{v}"
        gold = gold_path(task_id)
        assert gold and not gold[0].startswith("ERROR"), gold
        env = bench.make(task_id)
        env.reset()
        for command in gold:
            name, args = parse_command(command)
            env.step(name, args)
            if env.raw_score == 100:
                break
        assert env.raw_score == 100, f"{task_id}: gold path of {len(gold)} steps ended at score {env.raw_score}"
        assert env.success() and not env.done and env.score() == 1.0
        assert env.step("submit_answer").done and env.success()
        env.release()


def test_lean_step_says_what_the_shipped_step_says():
    """Our lean step returns the same text and score as ScienceWorld's shipped `step` on the same commands."""
    task_id = "test-conductivity:3"
    gold = gold_path(task_id)
    sim = sw.simulator()
    sim.load("test-conductivity", 3, "", False)
    shipped = []
    for command in gold:
        obs, _, done, info = sim.step(command)
        shipped.append((obs.strip(), info["score"]))
    env = ScienceWorldBenchmark(room_each_step=False).make(task_id)
    env.reset()
    ours = []
    for command in gold:
        obs = env.step(*parse_command(command)).observation
        ours.append((obs, env.raw_score))
        if env.done:
            break
    assert ours == shipped[: len(ours)]
    assert ours[-1][1] == 100


def test_primitives_are_the_paper_set_plus_submit_answer():
    bench = get_benchmark("scienceworld", family="classification")
    names = [p.name for p in bench.primitives()]
    assert names == PAPER_PRIMITIVES + ["submit_answer"]
    by_name = {p.name: p for p in bench.primitives()}
    assert by_name["connect"].params == (("terminal_a", "str"), ("terminal_b", "str"))
    assert by_name["wait"].params == (("ticks", "int"),)
    assert not by_name["submit_answer"].advances
    assert bench.llm_call_budget == 100
    assert "find-plant" in bench.describe() and "submit_answer" in bench.describe()


def test_opening_observation_has_task_and_room_but_no_valid_actions():
    env = ScienceWorldBenchmark(family="classification").make("find-plant:2")
    first = env.reset()
    assert first.startswith("Task: Your task is to find a(n) plant")
    assert "This room is called" in first
    assert "valid action" not in first.lower()
    obs = env.open("door to hallway") if "door to hallway" in first else env.look_around()
    assert "This room is called" in obs  # the room description comes with every step
    assert "valid action" not in obs.lower()


def test_b3_scienceworld_episode_ends_only_on_submit_or_100_calls():
    """B.3: neither the maximum score nor a negative one ends an episode; submit_answer or the budget does,
    and success is the score being at its maximum at that moment."""
    bench = ScienceWorldBenchmark(family="classification")
    env = bench.make("find-animal:1")
    env.reset()
    result = env.step("submit_answer")
    assert result.done and env.done and not env.success()
    assert env.step("look_around").observation == "The episode is over."

    env = bench.make("find-animal:1")
    env.reset()
    # The agent itself is no animal the task accepts: the score drops to -100, and the episode goes on.
    obs = env.focus_on("air")
    assert env.raw_score < 0 and not env.done, obs
    assert "This room is called" in env.look_around() and not env.done
    assert env.step("submit_answer").done and not env.success() and env.score() == 0.0
    env.release()

    # The gold path reaches the maximum without ending the episode; the actor then spends its whole budget
    # (100 calls) without submitting, and the episode still counts as a success because the score is at max.
    task_id = "find-plant:2"
    gold = gold_path(task_id)
    script = [f"Action: {name}({', '.join(repr(a) for a in args)})" for name, args in map(parse_command, gold)]
    script += ["Action: look_around()"] * (bench.llm_call_budget - len(script))
    spec = EpisodeSpec("sw/react/seed0", "sw", "react", "react", 0, "train", 0, 0)
    actor = Actor(ScriptedClient(script), bench.describe(), bench.llm_call_budget)
    env = bench.make(task_id)
    rec = actor.run(env, primitive_tools(env), spec)
    assert bench.llm_call_budget == 100
    assert rec.episode.n_llm_calls == 100 and rec.episode.termination == "budget"
    assert rec.episode.success and rec.episode.progression == 1.0


def test_wait_and_argument_checks():
    env = ScienceWorldBenchmark().make("power-component:0")
    env.reset()
    assert "wait for 3 iterations" in env.wait(3)
    assert env.n_primitive_steps == 1
    with pytest.raises(ActionError, match="1..10"):
        env.wait(11)
    with pytest.raises(ActionError, match="non-empty string"):
        env.step("go", [""])
    with pytest.raises(ActionError, match="takes 2 argument"):
        env.step("connect", ["battery anode"])


def test_a_newer_episode_takes_the_simulator_over():
    bench = ScienceWorldBenchmark()
    first = bench.make("power-component:0")
    first.reset()
    second = bench.make("power-component:1")
    second.reset()
    with pytest.raises(RuntimeError, match="no longer owns"):
        first.look_around()
    assert "This room is called" in second.look_around()


@pytest.mark.parametrize(
    "task_id,needle",
    [
        ("fly-to-the-moon:1", "unknown ScienceWorld task 'fly-to-the-moon'"),
        ("find-plant:300", "variation 300 is out of range"),
        ("find-plant", "task-name:variation"),
        ("find-plant:x", "task-name:variation"),
        ("test-conductivity:1", "not in family 'classification'"),
    ],
)
def test_bad_task_ids_are_task_errors(task_id, needle):
    with pytest.raises(TaskError, match=re.escape(needle)):
        ScienceWorldBenchmark(family="classification").make(task_id)


def test_bad_options_are_task_errors():
    with pytest.raises(TaskError, match="'chemistry'"):
        get_benchmark("scienceworld", family="chemistry")
    with pytest.raises(TaskError, match="famliy"):
        get_benchmark("scienceworld", famliy="electricity")


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("draw", ["union", "stratified"])
def test_sample_tasks_from_scienceworld_partitions(family, draw):
    bench = ScienceWorldBenchmark(family=family, **({} if draw == "union" else {"draw": draw}))
    train, test = bench.sample_tasks("train", 200, 42), bench.sample_tasks("test", 30, 42)
    assert len(set(train)) == 200 and len(set(test)) == 30
    assert train == bench.sample_tasks("train", 200, 42) and train != bench.sample_tasks("train", 200, 7)
    assert not set(train) & set(test)
    for split, ids in (("train", train), ("test", test)):
        per_task = {}
        for task_id in ids:
            name, var = sw.parse_task_id(task_id)
            assert var in partitions(name)[split], task_id
            per_task[name] = per_task.get(name, 0) + 1
        if draw == "stratified":
            assert set(per_task) == set(FAMILIES[family])  # every task of the family is drawn
    with pytest.raises(TaskError, match="only"):
        bench.sample_tasks("test", 10_000, 42)


def test_the_papers_draw_follows_the_partition_sizes():
    """B.1: 200 train pairs from electricity's pooled partition (10 + 10 + 450 + 300 variations): a task comes
    up in proportion to its partition, where the stratified draw gives each an equal share."""
    count = lambda ids: {t: sum(sw.parse_task_id(i)[0] == t for i in ids) for t in FAMILIES["electricity"]}  # noqa: E731
    union = count(ScienceWorldBenchmark().sample_tasks("train", 200, 42))
    stratified = count(ScienceWorldBenchmark(draw="stratified").sample_tasks("train", 200, 42))
    assert union["test-conductivity"] > union["test-conductivity-of-unknown-substances"] > 60
    assert union["power-component"] + union["power-component-renewable-vs-nonrenewable-energy"] <= 12
    assert stratified["power-component"] == 10 and stratified["test-conductivity"] >= 50
    with pytest.raises(TaskError, match="option draw"):
        ScienceWorldBenchmark(draw="uniform")


def test_parse_command_maps_every_gold_form():
    assert parse_command("connect battery anode to red wire terminal 1") == (
        "connect", ["battery anode", "red wire terminal 1"])
    assert parse_command("move egg blue jay egg in inventory to red box") == (
        "move", ["egg blue jay egg in inventory", "red box"])
    assert parse_command("open door to kitchen") == ("open", ["door to kitchen"])
    assert parse_command("drop aluminum foil") == ("put_down", ["aluminum foil"])
    assert parse_command("wait1") == ("wait", [1]) and parse_command("wait") == ("wait", [10])
    assert parse_command("0") == ("disambiguate", [0])
    with pytest.raises(ValueError, match="teleport"):
        parse_command("teleport to kitchen")


def test_missing_java_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(sw, "_SIM", None)  # pretend no JVM was started in this process
    monkeypatch.setattr(sw.shutil, "which", lambda name: None)
    with pytest.raises(sw.JavaMissingError, match="apt-get install openjdk-17-jre-headless"):
        sw.simulator()


def test_easy_simplification_teleports_and_unknown_names_are_refused():
    """Seed 002 (appendix A.1) plays ScienceWorld under the easy simplification: go() reaches any room."""
    for simplifications, reached in (("", False), ("easy", True)):
        env = ScienceWorldBenchmark(family="electricity", simplifications=simplifications).make("test-conductivity:3")
        env.reset()  # starts outside; the workshop is not adjacent
        obs = env.step("go", ["workshop"]).observation
        assert ("This room is called the workshop" in obs) is reached, obs[:200]
        env.release()
    with pytest.raises(TaskError, match=r"unknown simplification\(s\) \['fast'\]"):
        ScienceWorldBenchmark(simplifications="easy,fast")
    with pytest.raises(TaskError, match="noElectricalAction removes"):
        ScienceWorldBenchmark(family="electricity", simplifications="noElectricalAction")
