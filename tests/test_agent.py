"""The actor loop with a scripted LLM: parsing, feedback for bad actions, budgets and records."""
import json

import pytest

from scripted import ScriptedClient
from skillrepro.agent import Actor, EpisodeSpec, parse_text_action, primitive_tools, skill_tools
from skillrepro.benchmarks import get_benchmark
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
        # native mode's text fallback: a fenced JSON call, and one whose closing brace a stop sequence took
        ('```json\n{"name": "connect", "arguments": {"a": "x", "b": "y"}}\n```', "connect", ["x", "y"], "", 0),
        ('{"name": "connect", "arguments": {"a": "x", "b": "y"}', "connect", ["x", "y"], "", 0),
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


def test_an_episode_with_an_unreported_cached_count_has_an_unknown_total():
    """One call whose server reported no cached tokens (None) makes the episode's total unknown, not the
    partial sum of the others."""
    import dataclasses

    class OneUnreported(ScriptedClient):
        def chat(self, *args, **kwargs):
            reply = super().chat(*args, **kwargs)
            if len(self.requests) == 2:
                reply = dataclasses.replace(reply, record=dataclasses.replace(reply.record, cached_tokens=None))
            return reply

    bench = get_benchmark("babyai")
    env = bench.make(bench.sample_tasks("train", 1, 42)[0])
    rec = Actor(OneUnreported(["Action: turn_left()"]), bench.describe(), 3).run(env, primitive_tools(env), SPEC)
    assert [c.cached_tokens for c in rec.llm_calls] == [5, None, 5] and rec.episode.cached_tokens is None


def test_native_tool_calls_are_used_and_answered_as_tool_messages():
    rec, client = run([ToolCall("c1", "turn_left", {}), ToolCall("c2", "fly", {})], budget=2, tool_calling="native")
    assert [s.action for s in rec.steps] == ["turn_left", "fly"]
    assert [s.valid for s in rec.steps] == [True, False]
    assert client.requests[-1][-1] == {"role": "tool", "tool_call_id": "c1", "content": rec.steps[0].observation}


def test_solving_ends_the_episode_with_success():
    # Replay minigrid's own bot's actions through the actor to reach the goal.
    from skillrepro.benchmarks.babyai import bot_moves

    plan = bot_moves(get_benchmark("babyai").sample_tasks("train", 1, 42)[0], 40)
    rec, _ = run([f"Action: {a}()" for a in plan], budget=len(plan) + 5)
    assert rec.episode.success and rec.episode.termination == "success"
    assert rec.episode.n_steps == len(plan) and rec.episode.progression == 1.0
    assert rec.steps[-1].reward > 0 and all(s.reward == 0 for s in rec.steps[:-1])


# ---------------------------------------------------------------------------------------------------------
# SpeedRunner's protocol (appendices A-D), one rule per test
# ---------------------------------------------------------------------------------------------------------
def _capturing_client(backend: str, monkeypatch, **llm):
    """A real LLMClient whose HTTP call is replaced by one that records the request."""
    from skillrepro.config import LLMConfig
    from skillrepro.llm.client import LLMClient

    client = LLMClient(LLMConfig(backend=backend, model="m", **llm), "http://127.0.0.1:9/v1")
    sent: list[dict] = []

    def post(request):
        sent.append(request)
        return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}

    monkeypatch.setattr(client, "_post", post)
    return client, sent


def test_a1_actor_and_inducer_request_parameters(monkeypatch):
    """A.1: parallel_tool_calls=false; reasoning_effort low (actor) / medium (inducer) where the backend
    takes it; request limit 100 for the inducer and for the actor (per benchmark: B.3 100, C.3 30, D.4 2000)."""
    from skillrepro.config import load_yaml
    from skillrepro.check import check_config

    tools = [get_benchmark("babyai").primitives()[0].json_schema()]
    for backend in ("vllm", "openai"):
        client, sent = _capturing_client(backend, monkeypatch)
        client.chat([{"role": "user", "content": "hi"}], role="actor", session_id="e", tools=tools)
        client.chat([{"role": "user", "content": "hi"}], role="inducer", session_id="i", tools=tools)
        assert [r["reasoning_effort"] for r in sent] == ["low", "medium"]
        assert all(r["parallel_tool_calls"] is False for r in sent)
    # llama.cpp accepts the field and ignores it (checked: identical replies for low, medium and "bogus").
    client, sent = _capturing_client("embedded", monkeypatch)
    client.chat([{"role": "user", "content": "hi"}], role="actor", session_id="e", tools=tools)
    assert "reasoning_effort" not in sent[0] and sent[0]["parallel_tool_calls"] is False
    assert "top_p" not in sent[0]  # unset: the server's default

    client, sent = _capturing_client("vllm", monkeypatch, top_p=0.85)  # SkillScaffold's Executor (table 5)
    client.chat([{"role": "user", "content": "hi"}], role="actor", session_id="e")
    assert sent[0]["top_p"] == 0.85

    paper = load_yaml("configs/paper.yaml")
    assert paper["llm"]["max_tokens_param"] == "max_completion_tokens" and paper["llm"]["send_temperature"] is False
    client, sent = _capturing_client("openai", monkeypatch, max_tokens_param="max_completion_tokens",
                                     send_temperature=False)
    client.chat([{"role": "user", "content": "hi"}], role="actor", session_id="e")
    assert sent[0]["max_completion_tokens"] > 0 and "max_tokens" not in sent[0] and "temperature" not in sent[0]
    paper["llm"].update(load_yaml("configs/paper-vllm.yaml")["llm"])  # as Snakemake merges a second --configfile
    cfg = check_config(paper, check_files=False)
    assert cfg["budgets"]["inducer_requests"] == 100
    assert cfg["llm"]["reasoning_effort"] == {"actor": "low", "inducer": "medium"}
    budgets = {b: get_benchmark(b).llm_call_budget for b in ("scienceworld", "babyai", "crafter")}
    assert budgets == {"scienceworld": 100, "babyai": 30, "crafter": 2000}


def test_b3_c3_full_history_by_default_and_a_window_as_an_option():
    rec, client = run(["Action: turn_left()"], budget=6)
    assert rec.episode.history == "full" and len(client.requests[-1]) == 2 + 2 * 5

    bench = get_benchmark("babyai")
    env = bench.make(bench.sample_tasks("train", 1, 42)[0])
    client = ScriptedClient(["Action: turn_left()", "Action: turn_right()"])
    actor = Actor(client, bench.describe(), 6, history_window=2)
    rec = actor.run(env, primitive_tools(env), SPEC)
    assert rec.episode.history == "window:2" and rec.episode.n_steps == 6
    last = client.requests[-1]
    # System prompt, the opening observation (with the mission), then the last 2 steps only.
    assert len(last) == 2 + 2 * 2 and last[0]["role"] == "system"
    assert last[1]["content"].startswith("Mission:") and "last 2 of 5 steps" in last[1]["content"]
    assert [m["content"] for m in last[2::2]] == ["Action: turn_right()", "Action: turn_left()"]
    assert last[-1]["content"] == f"Observation: {rec.steps[4].observation}"
    assert client.requests[1][1]["content"] == client.requests[0][1]["content"]  # no note before it is needed


def test_d4_episode_ended_by_a_full_context_is_counted_not_hidden():
    from skillrepro.llm.client import LLMRequestError

    class FullAfter(ScriptedClient):
        def __init__(self, n, message, full):
            super().__init__(["Action: turn_left()"])
            self.n, self.message, self.full = n, message, full

        def chat(self, messages, **kw):
            if len(self.requests) >= self.n:
                raise LLMRequestError(self.message, context_full=self.full)
            return super().chat(messages, **kw)

    bench = get_benchmark("babyai")
    env = bench.make(bench.sample_tasks("train", 1, 42)[0])
    full = FullAfter(3, "400 from http://127.0.0.1/v1: the request exceeds the available context size", True)
    rec = Actor(full, bench.describe(), 10).run(env, primitive_tools(env), SPEC)
    assert rec.episode.termination == "context" and rec.episode.n_steps == 3
    # Any other refusal is a setup problem, whatever its words: it stops the job instead of becoming an outcome.
    with pytest.raises(LLMRequestError, match="array too long"):
        Actor(FullAfter(0, "400: Invalid 'tools': array too long", False), bench.describe(), 10).run(
            bench.make(env.task_id), primitive_tools(env), SPEC)


def test_a_wall_clock_of_the_episode_bounds_a_skill_call():
    """Section 5 / A: a 30-minute wall clock per rollout, which a looping skill cannot outlast."""
    import time

    from skillrepro import skills
    from skillrepro.skills.isolation import SandboxPolicy

    library = skills.Library(1, skills.parse_functions(
        'def spin():\n    """Loop forever."""\n    while True:\n        pass\n'))
    bench = get_benchmark("babyai")
    env = bench.make(bench.sample_tasks("train", 1, 42)[0])
    calls: list = []
    tools = primitive_tools(env) + skill_tools(library, env, calls.append, SandboxPolicy())
    actor = Actor(ScriptedClient(["Action: spin()"]), bench.describe(), 5, wall_s=4.0)
    started = time.monotonic()
    rec = actor.run(env, tools, SPEC)
    took = time.monotonic() - started
    assert rec.episode.termination == "wall_clock" and rec.episode.n_steps == 1
    assert "wall-clock limit of" in rec.steps[0].observation
    assert took < 20  # the sandbox's own per-call limit is 60 s: the episode's 4 s won


def test_restated_skills_follow_every_observation_only_when_asked_and_only_with_skills(tmp_path):
    """actor.restate_skills (a deviation for small models): the reminder, with the skills' signatures, ends the
    opening observation and every later one; the paper's default and an episode without skills get none."""
    from skillrepro import skills
    from skillrepro.agent import Prompts
    from skillrepro.config import ActorConfig
    from skillrepro.skills.isolation import SandboxPolicy

    library = skills.Library(1, skills.parse_functions(
        'def spin(times: int):\n    """Turn left `times` times."""\n    for _ in range(times):\n        turn_left()\n'
        '    return "spun"\n'))
    bench = get_benchmark("babyai")
    task = bench.sample_tasks("train", 1, 42)[0]

    def played(prompts, with_skills=True, replies=("Action: spin(2)", "Action: turn_left()")):
        env = bench.make(task)
        tools = primitive_tools(env) + (skill_tools(library, env, lambda c: None, SandboxPolicy()) if with_skills else [])
        client = ScriptedClient(list(replies))
        Actor(client, bench.describe(), 3, prompts=prompts).run(env, tools, SPEC)
        return [m["content"] for m in client.requests[-1] if m["role"] == "user"]

    restated = Prompts.configured(ActorConfig(restate_skills=True))
    shown = played(restated)
    assert len(shown) == 3 and all(m.endswith(restated.skill_reminder.format(skills="spin(times: int)")) for m in shown)
    assert "spin(times: int)" in restated.skill_reminder.format(skills="spin(times: int)")
    assert shown[1].startswith("Observation: spun")  # the skill's result comes first, then the reminder
    assert not any("spin(times" in m for m in played(Prompts.configured(ActorConfig())))
    assert not any("Your skills" in m or "skill" in m.lower() for m in played(restated, with_skills=False,
                                                                                 replies=("Action: turn_left()",)))
    # A user's reminder file replaces the shipped one; a broken placeholder is refused by name.
    mine = tmp_path / "reminder.txt"
    mine.write_text("\n(Skills: {skills})")
    assert played(Prompts.configured(ActorConfig(True, (("skill_reminder", str(mine)),))))[0].endswith("(Skills: spin(times: int))")
    # The stop sequences: the protocol's own unless configured ([] sends none).
    text, native = Actor(None, "", 1), Actor(None, "", 1, tool_calling="native")
    assert text.stop(False) == ["\nObservation:"] and native.stop(True) is None
    assert Actor(None, "", 1, prompts=Prompts.configured(ActorConfig(stop=("}\n{",)))).stop(True) == ["}\n{"]
    assert Actor(None, "", 1, prompts=Prompts.configured(ActorConfig(stop=()))).stop(False) is None
    mine.write_text("\n(Skills: {skill_list})")
    with pytest.raises(ValueError, match=r"prompt skill_reminder: KeyError 'skill_list'.*\{skills\}"):
        Prompts.configured(ActorConfig(True, (("skill_reminder", str(mine)),)))


def test_extra_arguments_are_refused_by_default_and_dropped_where_configured():
    """actor.extra_arguments: the paper's strict tool path refuses a call with arguments its action does not
    take; `drop` runs it without them (named ones the action does not name, else the last ones), says so in
    the observation and counts a valid action. A call within the action's arity is never changed."""
    from skillrepro.agent import Prompts, drop_extra_arguments
    from skillrepro.config import ActorConfig

    replies = [ToolCall("c1", "turn_left", {"direction": "left", "times": 2}), '{"name": "go_forward", "arguments": {"steps": 3}}',
               "Action: turn_right(1)", ToolCall("c2", "turn_left", {})]

    def play(extra):
        bench = get_benchmark("babyai")
        env = bench.make(bench.sample_tasks("train", 1, 42)[0])
        actor = Actor(ScriptedClient(list(replies)), bench.describe(), 4, tool_calling="native",
                      prompts=Prompts.configured(ActorConfig(extra_arguments=extra)))
        return actor.run(env, primitive_tools(env), SPEC)

    strict, lenient = play("refuse"), play("drop")
    assert [s.valid for s in strict.steps] == [False, False, False, True] and strict.episode.n_invalid_actions == 3
    assert "takes 0 argument" in strict.steps[0].observation
    assert [s.valid for s in lenient.steps] == [True] * 4 and lenient.episode.n_invalid_actions == 0
    assert [json.loads(s.arguments) for s in lenient.steps] == [[], [], [], []]
    assert "turn_left() takes no such argument: direction='left', times=2 ignored." in lenient.steps[0].observation
    assert "go_forward() takes no such argument: steps=3 ignored." in lenient.steps[1].observation
    assert "turn_right() takes no such argument: 1 ignored." in lenient.steps[2].observation
    assert "ignored" not in lenient.steps[3].observation
    # Named arguments bind by name; a call within arity is left alone.
    from skillrepro.agent import ParsedAction, Tool

    tool = Tool("go_to", (("obj", "str"),), "", lambda args, wall_s=None: "")
    kept, dropped = drop_extra_arguments(ParsedAction("go_to", ["x", "ball"], "", named={"x": 1, "obj": "ball"}), tool)
    assert kept.args == ["ball"] and dropped == "x=1"
    same = ParsedAction("go_to", ["ball"], "")
    assert drop_extra_arguments(same, tool) == (same, "")


def test_constrained_replies_are_decoded_under_a_schema_of_the_listed_tools():
    """llm.tool_calling: constrained asks the server for a JSON call of one listed tool (response_format), skills
    first, each call's arguments exactly its parameters; the protocol's example is that JSON; the reply is read
    as a JSON call. A schema check (jsonschema) stands in for the server's decoder."""
    import jsonschema

    from skillrepro.agent import reply_schema

    bench = get_benchmark("babyai")
    env = bench.make(bench.sample_tasks("train", 1, 42)[0])
    spin = primitive_tools(env)[0]
    skill = type(spin)("solve_mission", (("mission", "str"),), "Do it all.", lambda args, wall_s=None: "done")
    tools = [*primitive_tools(env), skill]
    client = ScriptedClient(['{"name": "solve_mission", "arguments": {"mission": "go to the key"}}'])
    actor = Actor(client, bench.describe(), 1, tool_calling="constrained")
    rec = actor.run(env, tools, SPEC)
    assert rec.steps[0].action == "solve_mission" and rec.steps[0].observation == "done" and rec.steps[0].valid
    system = client.requests[0][0]["content"]
    assert '{"name": "solve_mission", "arguments": {"mission": "<mission>"}}' in system
    assert "Action:" not in system and "tool interface" not in system
    (body,) = client.extra_bodies
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema == reply_schema(tools) and schema["anyOf"][0]["properties"]["name"] == {"const": "solve_mission"}
    jsonschema.validate({"name": "turn_left", "arguments": {}}, schema)
    jsonschema.validate({"name": "solve_mission", "arguments": {"mission": "x"}}, schema)
    for bad in ({"name": "pick up the ball", "arguments": {}}, {"name": "turn_left", "arguments": {"times": 2}},
                {"name": "solve_mission", "arguments": {}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    # the other protocols send no schema
    text = ScriptedClient(["Action: turn_left()"])
    Actor(text, bench.describe(), 1).run(bench.make(env.task_id), primitive_tools(env), SPEC)
    assert text.extra_bodies == [None]


def test_a_skill_parameter_without_annotation_takes_its_defaults_type():
    """`max_steps=4` is an integer in the call schema: typed as text, the 0.5B actor passed "3" and every call of
    the inducer's `repeat_until(text, max_steps=4)` raised TypeError (docs/results.md, the run at 7ba277c)."""
    from skillrepro.agent import _params

    assert _params("repeat_until(text, max_steps=4, ratio=0.5, strict=False, label='x')") == (
        ("text", "str"), ("max_steps", "int"), ("ratio", "float"), ("strict", "bool"), ("label", "str"))
    assert _params("solve_mission(mission: str, n: int = 2)") == (("mission", "str"), ("n", "int"))


def test_the_sleep_phase_budget_leaves_room_for_the_reply_and_its_reasoning():
    """The paper preset's inducer conversation (3 characters a token) plus its request's cap, reasoning room
    included, fits the context (it was cut to the context less the reply alone: 408,192 of 400,000 tokens)."""
    from skillrepro.check import check_config
    from skillrepro.config import llm_config, load_yaml
    from skillrepro.studies.speedrunner.settings import inducer_limits

    cfg = check_config(load_yaml("configs/paper.yaml"), check_files=False, billing=False)
    llm, limits = llm_config(cfg), inducer_limits(cfg)
    cap = llm.reply_cap("inducer", limits.reply_tokens(llm))
    assert cap > limits.reply_tokens(llm)  # the paper's medium effort has reasoning room
    assert limits.history_chars(llm) // 3 + cap <= llm.ctx_per_slot
