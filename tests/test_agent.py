"""The actor loop with a scripted LLM: parsing, feedback for bad actions, budgets and records."""
import json

import pytest

from scripted import ScriptedClient
from skillrepro.agent import Actor, EpisodeSpec, parse_text_action, primitive_tools
from skillrepro.envs import get_benchmark
from skillrepro.llm.client import ToolCall

NAMES = ["turn_left", "turn_right", "go_forward", "pick_up", "drop", "toggle", "connect"]
SPEC = EpisodeSpec("babyai/react/seed0", "babyai", "react", "react", 0, "train", 0, 0)


@pytest.mark.parametrize(
    "text, name, args, problem, extra",
    [
        ("Thought: the ball is ahead\nAction: go_forward()", "go_forward", [], "", 0),
        ("action: `Turn_Left`", "Turn_Left", [], "", 0),
        ("Action: connect('battery anode', obj_b=\"red wire\")", "connect", ["battery anode", "red wire"], "", 0),
        ('Action: {"name": "pick_up", "arguments": {}}', "pick_up", [], "", 0),
        ("Action: go_forward() then turn_left()", "go_forward", [], "", 1),
        ("I should go_forward because the key is there", "go_forward", [], "", 0),
        ("The red box is far away.", "", [], "no action found", 0),
        ("Action: connect(anode, wire)", "connect", [], "could not read the arguments", 0),
    ],
)
def test_text_actions_are_read_leniently(text, name, args, problem, extra):
    p = parse_text_action(text, NAMES)
    assert (p.name, p.args, p.extra) == (name, args, extra)
    assert problem in p.problem and bool(problem) == bool(p.problem)


def run(replies, budget=6, tool_calling="text"):
    bench = get_benchmark("babyai")
    env = bench.make(bench.sample_tasks("train", 1, 42)[0])
    client = ScriptedClient(replies)
    actor = Actor(client, bench.describe(), budget, tool_calling=tool_calling)
    return actor.run(env, primitive_tools(env), SPEC), client


def test_bad_actions_become_observations_and_are_counted():
    rec, client = run(["Action: jump()", "nonsense", "Action: go_forward(3)", "Action: turn_left() turn_left()",
                       "Action: turn_right()"], budget=5)
    ep = rec.episode
    assert ep.n_steps == ep.n_llm_calls == 5 and ep.termination == "budget"
    assert ep.n_invalid_actions == 4
    obs = [s.observation for s in rec.steps]
    assert obs[0].startswith("Invalid action: unknown action 'jump'")
    assert obs[1].startswith("Invalid action: no action found")
    assert "takes 0 argument" in obs[2]
    assert "1 further action(s) ignored" in obs[3]
    assert [s.valid for s in rec.steps] == [False, False, False, False, True]
    # The model saw each observation, in order, with the whole history kept.
    last = client.requests[-1]
    assert last[0]["role"] == "system" and "turn_left() -> " not in last[0]["content"]
    assert "- go_forward(): Move one cell forward" in last[0]["content"]
    assert sum(m["role"] == "assistant" for m in last) == 4


def test_episode_records_sum_the_calls():
    rec, _ = run(["Action: turn_left()"], budget=3)
    ep = rec.episode
    assert (ep.prompt_tokens, ep.cached_tokens, ep.completion_tokens) == (sum(c.prompt_tokens for c in rec.llm_calls), 15, 12)
    assert all(c.session_id == ep.episode_id for c in rec.llm_calls)
    assert all(s.episode_id == ep.episode_id and s.harness_ms >= 0 for s in rec.steps)
    assert json.loads(rec.steps[0].arguments) == []


def test_native_tool_calls_are_used_and_answered_as_tool_messages():
    rec, client = run([ToolCall("c1", "turn_left", {}), ToolCall("c2", "fly", {})], budget=2, tool_calling="native")
    assert [s.action for s in rec.steps] == ["turn_left", "fly"]
    assert [s.valid for s in rec.steps] == [True, False]
    assert client.requests[-1][-1] == {"role": "tool", "tool_call_id": "c1", "content": rec.steps[0].observation}


def test_solving_ends_the_episode_with_success():
    # Replay minigrid's own bot's actions through the actor to reach the goal.
    from minigrid.utils.baby_ai_bot import BabyAIBot

    from skillrepro.envs.babyai import _ACTIONS

    bench = get_benchmark("babyai")
    task = bench.sample_tasks("train", 1, 42)[0]
    probe = bench.make(task)
    probe.reset()
    bot, names, plan = BabyAIBot(probe._env.unwrapped), {v: k for k, v in _ACTIONS.items()}, []
    while not probe.done and len(plan) < 40:
        plan.append(names[int(bot.replan())])
        probe.step(plan[-1])
    rec, _ = run([f"Action: {a}()" for a in plan], budget=len(plan) + 5)
    assert rec.episode.success and rec.episode.termination == "success"
    assert rec.episode.n_steps == len(plan) and rec.episode.progression == 1.0
    assert rec.steps[-1].reward > 0 and all(s.reward == 0 for s in rec.steps[:-1])
