"""BabyAI-Text PickUpSeqGoTo: text view, task sampling, and minigrid's own bot as the oracle."""
import re

import numpy as np
import pytest
from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX

from skillrepro.benchmarks import ActionError, TaskError, get_benchmark
from skillrepro.benchmarks.babyai import EXCLUDED, NUM_DISTS, bot_moves, describe_view


def blank_view():
    img = np.zeros((7, 7, 3), dtype=np.uint8)
    img[:, :, 0] = OBJECT_TO_IDX["empty"]
    return img


def test_c3_view_is_worded_as_babyai_text():
    img = blank_view()
    img[1, 3] = (OBJECT_TO_IDX["ball"], COLOR_TO_IDX["red"], 0)
    img[4, 6] = (OBJECT_TO_IDX["key"], COLOR_TO_IDX["blue"], 0)
    img[5, 1] = (OBJECT_TO_IDX["door"], COLOR_TO_IDX["green"], 2)
    img[3, 2] = (OBJECT_TO_IDX["wall"], 0, 0)
    img[0, 6] = (OBJECT_TO_IDX["wall"], 0, 0)
    img[6, 6] = (OBJECT_TO_IDX["wall"], 0, 0)
    img[3, 5] = (OBJECT_TO_IDX["box"], COLOR_TO_IDX["yellow"], 0)
    carried = type("Obj", (), {"color": "purple", "type": "ball"})()
    lines = describe_view(img, carried).splitlines()
    # BabyAI-Text's order: carrying, walls (forward, left, right), then objects column by column.
    assert lines == [
        "You carry a purple ball",
        # the box 1 step ahead hides the wall behind it; the key 1 step right hides the right wall
        "a wall 3 steps left",
        "a red ball 2 steps left and 3 steps forward",
        "a yellow box 1 step forward",
        "a blue key 1 step right",
        "a locked green door 2 steps right and 5 steps forward",
    ]


def test_unseen_cells_are_not_described():
    img = blank_view()
    img[0:2, :, 0] = OBJECT_TO_IDX["unseen"]
    img[0, 6] = (OBJECT_TO_IDX["unseen"], COLOR_TO_IDX["red"], 0)
    assert "red" not in describe_view(img)


def test_train_and_test_tasks_are_disjoint_and_reproducible():
    b = get_benchmark("babyai")
    train, test = b.sample_tasks("train", 200, 42), b.sample_tasks("test", 30, 42)
    assert len(set(train)) == 200 and len(set(test)) == 30 and not set(train) & set(test)
    assert b.sample_tasks("train", 5, 42) == train[:5]
    assert b.sample_tasks("train", 5, 43) != train[:5]
    with pytest.raises(TaskError, match="30 test tasks"):
        b.sample_tasks("test", 31, 42)
    with pytest.raises(TaskError, match="split must be"):
        b.sample_tasks("dev", 1, 42)
    with pytest.raises(TaskError, match="non-negative integer seed"):
        b.make("seed-7")


@pytest.fixture(scope="module")
def missions():
    """(mission, objects in the room, their (type, color) pairs) of every task of the 200/30 lists."""
    b = get_benchmark("babyai")
    out = []
    for task in b.sample_tasks("train", 200, 42) + b.sample_tasks("test", 30, 42):
        env = b.make(task)
        env.reset()
        grid = env._env.unwrapped.grid
        objs = [o for o in grid.grid if o is not None and o.type != "wall"]
        out.append((env.mission, objs))
    return out


def test_c1_level_is_mixed_train_local_pick_up_seq_go_to(missions):
    """BALROG's pick_up_seq_go_to: one 8x8 room, 8 distractors + 2 objects, both phrasings, exclusions."""
    env = get_benchmark("babyai").make("7")
    env.reset()
    level = env._env.unwrapped
    assert (level.width, level.height, level.num_rows, level.num_cols) == (8, 8, 1, 1)
    assert {len(objs) for _, objs in missions} == {NUM_DISTS + 2}
    assert all({o.type for o in objs} <= {"key", "ball", "box"} for _, objs in missions)
    forward = [m for m, _ in missions if re.fullmatch(r"pick up (a|the) \w+ \w+, then go to (a|the) \w+ \w+", m)]
    backward = [m for m, _ in missions if re.fullmatch(r"go to (a|the) \w+ \w+ after you pick up (a|the) \w+ \w+", m)]
    assert len(forward) + len(backward) == len(missions)
    assert 0.35 < len(forward) / len(missions) < 0.65
    assert not [m for m, _ in missions if any(x in m for x in EXCLUDED)]
    # Look-alikes: most rooms hold another object of the target's type or colour.
    with_lookalike = 0
    for mission, objs in missions:
        carry = re.search(r"pick up (?:a|the) (\w+) (\w+)", mission).groups()
        with_lookalike += sum(o.color == carry[0] or o.type == carry[1] for o in objs) > 1
    assert with_lookalike > 0.8 * len(missions)


def test_bad_actions_raise_action_error_not_crash():
    env = get_benchmark("babyai").make("5")
    env.reset()
    with pytest.raises(ActionError, match="unknown action 'jump'"):
        env.step("jump")
    with pytest.raises(ActionError, match="takes 0 argument"):
        env.step("go_forward", ["far"])
    assert env.n_primitive_steps == 0


def test_babyai_bot_solves_our_levels_through_our_api():
    b = get_benchmark("babyai")
    solved, reversed_missions = 0, 0
    for task in b.sample_tasks("train", 20, 42):
        env = b.make(task)
        env.reset()
        reversed_missions += "after you" in env.mission
        env.release()
        solved += bot_moves(task, 64) is not None
    assert solved >= 19
    assert reversed_missions >= 1


def test_c_prompt_is_the_papers_by_default_and_hints_are_a_named_file(tmp_path):
    paper = get_benchmark("babyai").describe()
    hints = get_benchmark("babyai", prompt="hints").describe()
    assert "directly in front of you" in hints and "directly in front of you" not in paper
    own = tmp_path / "mine.txt"
    own.write_text("My own BabyAI description.")
    assert get_benchmark("babyai", prompt=str(own)).describe() == "My own BabyAI description."
    with pytest.raises(TaskError, match="unknown prompt 'fancy'"):
        get_benchmark("babyai", prompt="fancy")
    with pytest.raises(TaskError, match="does not exist"):
        get_benchmark("babyai", prompt=str(tmp_path / "missing.txt"))


def test_c3_bot_actions_replayed_through_the_cli_succeed(capsys, tmp_path):
    """The oracle path a user can follow by hand: minigrid's bot plans, `skillrepro env replay` plays it."""
    import json

    from skillrepro.cli import main

    b = get_benchmark("babyai")
    task = b.sample_tasks("test", 1, 42)[0]
    plan = bot_moves(task, 64)
    assert plan is not None
    env = b.make(task)
    mission = env.reset().splitlines()[0]  # "Mission: ..."
    env.release()
    calls = tmp_path / "calls.txt"
    calls.write_text("".join(f"{a}()\n" for a in plan))
    assert main(["env", "replay", "babyai", "--task", task, "--calls", str(calls)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{mission}\n") and "Mission complete." in out
    assert json.loads(out.strip().splitlines()[-1]) == {"score": 1.0, "success": True, "done": True,
                                                        "steps": len(plan)}


def test_option_current_observation_reads_the_view_without_a_step():
    """Option current_observation (a deviation, off by default) gives BabyAI Crafter's read: a primitive that
    returns what the agent sees and does not act; a skill in the sandbox reads it as Crafter's skills do."""
    from skillrepro.skills.sandbox import SandboxSession

    assert "get_current_observation" not in {p.name for p in get_benchmark("babyai").primitives()}
    bench = get_benchmark("babyai", current_observation=True)
    listed = {p.name: p for p in bench.primitives()}
    assert listed["get_current_observation"].signature == "get_current_observation() -> str"
    assert not listed["get_current_observation"].advances and listed["go_forward"].advances
    env = bench.make(bench.sample_tasks("train", 1, 0)[0])
    opening = env.reset()
    source = ('def look_then_turn():\n    """Read, turn, read."""\n    before = get_current_observation()\n'
              '    turn_left()\n    return before + "|" + get_current_observation()\n')
    session = SandboxSession(source=source, env=env)
    try:
        out = session.call_skill("look_then_turn", [])
    finally:
        session.close()
    before, after = out.ret.split("|")
    assert opening.endswith(before) and after == env.observe() and env.n_primitive_steps == 1
    env.release()
    with pytest.raises(TaskError, match="current_observation must be true or false"):
        get_benchmark("babyai", current_observation="yes")


@pytest.mark.parametrize("level", ["go_to_local", "go_to_obj"])
def test_easier_levels_ask_to_go_to_an_object_and_the_bot_solves_them(level):
    """Option `level`: BabyAI's GoTo levels on the same task ids and view; the prompt says what the mission asks,
    and the default level's prompts are the files' text with its own wording."""
    from skillrepro.benchmarks.babyai import BabyAIBenchmark

    b = BabyAIBenchmark(level=level)
    assert "go to" in b.describe() and "pick up" not in b.describe()
    assert "pick up one object and go to another" in BabyAIBenchmark().describe()
    assert "go to Y after you pick up X" in BabyAIBenchmark(prompt="hints").describe()
    assert "go to Y after" not in BabyAIBenchmark(prompt="hints", level=level).describe()
    for task in b.sample_tasks("train", 5, 42):
        env = b.make(task)
        first = env.reset()
        assert re.match(r"Mission: go to (the|a) \w+ (ball|box|key)\n", first), first
        moves = bot_moves(task, 40, level)
        assert moves, task
        for m in moves:
            env.step(m)
        assert env.success() and env.done
    with pytest.raises(TaskError, match="unknown level 'go_to_everything'"):
        BabyAIBenchmark(level="go_to_everything")
