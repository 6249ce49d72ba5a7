"""BabyAI-Text PickUpSeqGoTo: text view, task sampling, and minigrid's own bot as the oracle."""
import numpy as np
import pytest
from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX
from minigrid.utils.baby_ai_bot import BabyAIBot

from skillrepro.envs import ActionError, TaskError, get_benchmark
from skillrepro.envs.babyai import _ACTIONS, describe_view


def blank_view():
    img = np.zeros((7, 7, 3), dtype=np.uint8)
    img[:, :, 0] = OBJECT_TO_IDX["empty"]
    return img


def test_view_names_objects_walls_and_the_cell_in_front():
    img = blank_view()
    img[1, 3] = (OBJECT_TO_IDX["ball"], COLOR_TO_IDX["red"], 0)
    img[4, 6] = (OBJECT_TO_IDX["key"], COLOR_TO_IDX["blue"], 0)
    img[5, 1] = (OBJECT_TO_IDX["door"], COLOR_TO_IDX["green"], 2)
    img[3, 2] = (OBJECT_TO_IDX["wall"], 0, 0)
    img[3, 5] = (OBJECT_TO_IDX["box"], COLOR_TO_IDX["yellow"], 0)
    text = describe_view(img)
    assert "a red ball 2 steps left and 3 steps forward" in text
    assert "a blue key 1 step right" in text
    assert "a locked green door 2 steps right and 5 steps forward" in text
    assert "a yellow box 1 step forward" in text
    assert "a wall 4 steps forward" in text
    assert "Directly in front of you: a yellow box." in text
    assert "You are carrying: nothing." in text


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
    by_index = {v: k for k, v in _ACTIONS.items()}
    solved, reversed_missions = 0, 0
    for task in b.sample_tasks("train", 20, 42):
        env = b.make(task)
        env.reset()
        reversed_missions += "after you" in env.mission
        bot = BabyAIBot(env._env.unwrapped)
        for _ in range(64):
            action = int(bot.replan())
            if action not in by_index:
                break
            env.step(by_index[action])
            if env.done:
                break
        solved += env.success()
    assert solved >= 19
    assert reversed_missions >= 1
