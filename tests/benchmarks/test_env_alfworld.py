"""ALFWorld on the real engine (textworld PddlEnv + alfworld's rules, grammar and demangler).

The oracle is the bundled planner (`policy_commands`); we replay its commands through our typed primitives.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from skillrepro.benchmarks import TaskError, get_benchmark
from skillrepro.benchmarks import alfworld as alf
from skillrepro.benchmarks import _alfworld_gen as gen


@pytest.fixture()
def bench(tmp_path):
    return get_benchmark("alfworld", cache_dir=str(tmp_path / "cache"))


def _as_primitive(command: str) -> tuple[str, list[str]]:
    """A planner command -> our typed primitive call, so the replay exercises the helpers' mapping."""
    patterns = [
        (r"go to (.+)", "go_to"), (r"take (.+) from (.+)", "take"), (r"move (.+) to (.+)", "put"),
        (r"open (.+)", "open_receptacle"), (r"close (.+)", "close_receptacle"), (r"clean (.+) with (.+)", "clean"),
        (r"heat (.+) with (.+)", "heat"), (r"cool (.+) with (.+)", "cool"), (r"use (.+)", "use"),
        (r"examine (.+)", "examine"),
    ]
    for pattern, name in patterns:
        m = re.fullmatch(pattern, command)
        if m:
            return name, list(m.groups())
    return "act", [command]


@pytest.mark.parametrize("task_type", gen.TASK_TYPES)
@pytest.mark.parametrize("seed", [0, gen.TEST_SEED_BASE])
def test_planner_wins_generated_game(bench, task_type, seed):
    task_id = gen.game_id(task_type, seed)
    env = bench.make(task_id)
    try:
        first = env.reset()
        assert f"Your task is to: {env.task}." in first
        assert env.task_type == task_type
        assert "Admissible actions: " in first and env.admissible_actions
        plan = alf.policy_commands(env.game)
        assert 0 < len(plan) < alf.MAX_STEPS
        result = None
        for command in plan:
            assert not env.done
            assert command in env.admissible_actions, (command, env.admissible_actions)
            name, args = _as_primitive(command)
            result = env.step(name, args)
        assert result.done and result.reward == 1.0
        assert env.success() and env.score() == 1.0
        assert env.n_primitive_steps == len(plan)
    finally:
        env.release()


def test_generator_is_deterministic_and_splits_rooms(tmp_path):
    a, b = gen.generate("heat", 7), gen.generate("heat", 7)
    assert a == b
    assert gen.generate("heat", 8).pddl_problem != a.pddl_problem
    assert a.split == "train" and a.scene in gen.scene_numbers("train")
    t = gen.generate("heat", gen.TEST_SEED_BASE + 7)
    assert t.split == "test" and t.scene in gen.scene_numbers("test")
    assert not set(gen.scene_numbers("train")) & set(gen.scene_numbers("test"))
    # The cache returns the very same game and is keyed by the generator version.
    cached = gen.cached_game("heat", 7, tmp_path)
    assert cached == a
    assert (tmp_path / f"gen-v{gen.GENERATOR_VERSION}" / "heat" / "7.json").exists()
    assert gen.cached_game("heat", 7, tmp_path) == a


def test_sampler_splits_are_disjoint_and_cover_types(bench):
    train = bench.sample_tasks("train", 24, seed=42)
    test = bench.sample_tasks("test", 12, seed=42)
    assert len(set(train)) == 24 and not set(train) & set(test)
    assert bench.sample_tasks("train", 5, seed=42) == train[:5]
    assert bench.sample_tasks("train", 24, seed=42) == train
    assert {t.split(":")[1] for t in train} == set(gen.TASK_TYPES)
    assert all(int(t.split(":")[2]) < gen.TEST_SEED_BASE for t in train)
    assert all(int(t.split(":")[2]) >= gen.TEST_SEED_BASE for t in test)
    only = get_benchmark("alfworld", task_types=["cool"]).sample_tasks("train", 3, seed=1)
    assert all(t.startswith("gen:cool:") for t in only)


def test_inadmissible_command_and_step_limit(tmp_path):
    bench = get_benchmark("alfworld", cache_dir=str(tmp_path), max_steps=3, show_admissible=False)
    env = bench.make("gen:pick_and_place:3")
    try:
        first = env.reset()
        assert "Admissible actions" not in first
        r = env.step("act", ["fly to the moon"])
        assert r.observation == alf.NOTHING_HAPPENS and not r.done
        r = env.step("take", ["Unicorn 1", "nowhere 9"])
        assert r.observation == alf.NOTHING_HAPPENS and not r.done
        r = env.step("inventory")
        assert "You are not carrying anything." in r.observation
        assert r.done and not env.success() and env.score() == 0.0
        assert env.step("look").observation == "The episode is over."
    finally:
        env.release()


def test_bad_input_is_named(tmp_path, monkeypatch):
    with pytest.raises(TaskError, match="nonsense"):
        get_benchmark("alfworld", nonsense=1)
    with pytest.raises(TaskError, match="boil"):
        get_benchmark("alfworld", task_types=["boil"])
    bench = get_benchmark("alfworld", cache_dir=str(tmp_path))
    for bad in ["gen:boil:1", "gen:heat:x", "heat:1", "official:train/x/y"]:
        with pytest.raises(TaskError, match=re.escape(bad)):
            bench.make(bad)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TaskError, match=re.escape(str(empty))):
        get_benchmark("alfworld", data_path=str(empty))
    monkeypatch.setattr(alf, "_USER_ALFWORLD_DATA", None)
    monkeypatch.setenv("ALFWORLD_DATA", str(empty))
    with pytest.raises(TaskError, match="ALFWORLD_DATA"):
        get_benchmark("alfworld")


def _write_official_game(root: Path, split_dir: str, task_type: str, seed: int, *, bake_task: bool,
                         solvable: bool = True, folder_suffix: str = "") -> str:
    """One game in the official layout, built from a generated problem and the wheel's domain/grammar."""
    g = gen.generate(task_type, seed)
    domain, grammar = alf._wheel_logic()
    long_type = gen.TASK_TYPES[task_type]
    trial = root / "json_2.1.1" / split_dir / f"{long_type}-{g.object_type}-None-{g.parent_type or 'None'}-{g.scene}{folder_suffix}" / f"trial_T{seed:06d}"
    trial.mkdir(parents=True)
    game = {"pddl_domain": domain, "grammar": grammar.replace("UNKNOWN GOAL", g.task) if bake_task else grammar,
            "pddl_problem": g.pddl_problem, "solvable": solvable}
    (trial / "game.tw-pddl").write_text(json.dumps(game))
    traj = {"task_type": long_type, "pddl_params": {"object_target": g.object_type, "parent_target": g.parent_type,
                                                     "toggle_target": g.toggle_type, "mrecep_target": "",
                                                     "object_sliced": False}}
    (trial / "traj_data.json").write_text(json.dumps(traj))
    return f"official:{trial.relative_to(root / 'json_2.1.1').as_posix()}"


def test_official_layout_loader(tmp_path, monkeypatch):
    root = tmp_path / "alfworld_data"
    train_a = _write_official_game(root, "train", "clean", 0, bake_task=True)
    train_b = _write_official_game(root, "train", "pick_and_place", 2, bake_task=False)
    _write_official_game(root, "train", "cool", 4, bake_task=True, solvable=False)  # skipped like alfworld does
    _write_official_game(root, "train", "heat", 5, bake_task=True, folder_suffix="-movable")  # skipped
    test_a = _write_official_game(root, "valid_unseen", "look_at_obj_in_light", gen.TEST_SEED_BASE, bake_task=True)

    bench = get_benchmark("alfworld", data_path=str(root))
    assert sorted(bench.sample_tasks("train", 2, seed=0)) == sorted([train_a, train_b])
    assert bench.sample_tasks("test", 1, seed=0) == [test_a]
    with pytest.raises(TaskError, match="asked for 3"):
        bench.sample_tasks("train", 3, seed=0)

    # A grammar without a task sentence gets ALFRED's template, the same one on every load.
    game_b = bench.game(train_b)
    assert game_b.source == "official" and game_b.task_type == "pick_and_place"
    assert game_b.task and "UNKNOWN GOAL" not in game_b.grammar and bench.game(train_b).task == game_b.task

    env = bench.make(train_a)
    try:
        assert f"Your task is to: {env.task}." in env.reset()
        assert env.task == gen.generate("clean", 0).task and env.task_type == "clean"
        for command in alf.policy_commands(env.game):
            result = env.step("act", [command])
        assert result.done and env.success()
    finally:
        env.release()

    # The same folder through ALFWORLD_DATA, and its json_2.1.1 subfolder as data_path, work alike.
    monkeypatch.setattr(alf, "_USER_ALFWORLD_DATA", None)
    monkeypatch.setenv("ALFWORLD_DATA", str(root))
    assert get_benchmark("alfworld").sample_tasks("test", 1, seed=0) == [test_a]
    assert get_benchmark("alfworld", data_path=str(root / "json_2.1.1")).sample_tasks("test", 1, seed=0) == [test_a]
