"""The SpeedRunner inducer: tool protocol, checks on writes, ablations, records; and one session on the
real embedded model over recorded BabyAI trajectories."""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from skillrepro.agent import EpisodeSpec, parse_text_action
from skillrepro.check import check_config
from skillrepro.config import BenchmarkConfig, ConfigError, LLMConfig, MethodConfig, llm_config, load_yaml
from skillrepro.methods import InduceContext, InducerLimits, asi, get_method
from skillrepro.methods.common import append_functions, read_traces, reply_code
from skillrepro.methods.speedrunner_gate import Session, write_function
from skillrepro.methods.speedrunner_protocol import (LAST_CHANCE_PREFILL, Action, example_loop, json_action, native_action,
                                                     parse_action, tool_schemas)
from skillrepro.methods.speedrunner_session import Workbench
from skillrepro.llm.client import LLMClient, Reply, ToolCall
from skillrepro.runner import run_batch
from skillrepro.skills import Library, parse_functions
from skillrepro.skills.isolation import SandboxPolicy
from skillrepro.skills.sandbox import SandboxSession
from skillrepro.studies.speedrunner.settings import inducer_limits
from skillrepro.benchmarks import get_benchmark, load_benchmark
from skillrepro.benchmarks.base import Env
from repo import DATA, ROOT
from scripted import ChatServer, Fake, ScriptedClient

BENCH = BenchmarkConfig(name="babyai", env="babyai", llm_call_budget=6)

V0_SOURCE = 'def turn_around():\n    """Turn twice."""\n    turn_left()\n    return turn_left()\n'


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A run folder with library v0 and one training batch of 3 BabyAI episodes (scripted actor)."""
    run = tmp_path_factory.mktemp("run")
    lib_root = run / "library"
    Library(0, parse_functions(V0_SOURCE)).write(lib_root / "v0")
    tasks = load_benchmark(BENCH).sample_tasks("train", 3, 42)
    actor = Fake(["Thought: look around.\nAction: turn_around()", "Thought: go.\nAction: go_forward()",
                  "Thought: grab.\nAction: pick_up()"])
    spec = EpisodeSpec("r1", "babyai", "speedrunner", "speedrunner", 0, "train", 0, 0)
    run_batch(bench=BENCH, llm=LLMConfig(), library_dir=lib_root / "v0", task_ids=tasks, spec=spec,
              out_dir=run / "batches" / "c0", client=actor)
    return run


NUDGE = InducerLimits(nudge_requests=1)  # the last request nudged, as the small-model presets do


def ctx_for(run: Path, llm: LLMConfig | None = None, budget: int = 8, limits: InducerLimits = NUDGE,
            **options) -> InduceContext:
    lib_root = run / "library"
    return InduceContext(library=Library.load(lib_root / "v0"), cycle=0, history_dirs=(run / "batches" / "c0",),
                         library_root=lib_root, out_dir=lib_root / "v1", record_dir=run / "induce" / "v1", run_id="r1", bench=BENCH,
                         method=MethodConfig("sr", "speedrunner", options), llm=llm or LLMConfig(ctx_per_slot=8192),
                         request_budget=budget, limits=limits)


def tree_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


GOOD = '''Thought: parse the mission.
Action: write_function(public=True)
```python
def mission_parts(text="pick up the red ball, then go to the blue key"):
    """Split a mission into (pick-up target, go-to target), in execution order."""
    import re
    m = re.search(r"go to (?:the |a )?(\\w+ \\w+) after you pick up (?:the |a )?(\\w+ \\w+)", text)
    if m:
        return m.group(2), m.group(1)
    m = re.search(r"pick up (?:the |a )?(\\w+ \\w+), then go to (?:the |a )?(\\w+ \\w+)", text)
    return (m.group(1), m.group(2)) if m else (None, None)
```'''


def test_replay_check_is_an_explicit_option(recorded, monkeypatch):
    """The replay check exists only as `replay_check: true` (a deviation from the online protocol): it then
    runs a new zero-argument function on a past training task and rejects `crashes`."""
    stepped = []
    step = Env.step
    monkeypatch.setattr(Env, "step", lambda self, *a, **k: stepped.append(a) or step(self, *a, **k))
    get_method("speedrunner").induce(ctx_for(recorded), client=Fake(session_replies(recorded)))
    assert not stepped  # off (the default): no environment is stepped in the sleep phase
    lib = get_method("speedrunner").induce(ctx_for(recorded, replay_check=True), client=Fake(session_replies(recorded)))
    assert stepped and "crashes" not in {f.name for f in lib.functions} and lib.meta["replay_check"] is True


def test_parse_action_is_lenient():
    a = parse_action("Thought: x\nAction: `execute_code`\n```python\nprint(1)\n```", True)
    assert (a.name, a.code) == ("execute_code", "print(1)")
    a = parse_action("Action: write_function(public=False)\n```\ndef _h():\n    return 1\n```", True)
    assert (a.name, a.public, a.code.startswith("def _h")) == ("write_function", False, True)
    a = parse_action("Here is a function:\ndef f():\n    return go_forward()\nThis moves.", True)
    assert a.name == "write_function" and a.code == "def f():\n    return go_forward()"
    assert parse_action('Action: delete_function("old")', True).target == "old"
    assert parse_action("Action: finish()", True).name == "finish"
    assert parse_action("I am not sure.", True).problem


def session_replies(recorded: Path) -> list[str]:
    return [
        'Thought: data.\nAction: execute_code\n```python\nshow("SELECT episode_id, task_id, success, n_steps FROM episodes")\n'
        'print(sql("SELECT count(*) AS n FROM steps")[0]["n"])\nsql("SELECT opening FROM openings")[0]["opening"][:40]\n```',
        "Thought: try to escape.\nAction: execute_code\n```python\nopen('/tmp/evil_inducer.txt', 'w')\n```",
        "Thought: peek at files.\nAction: execute_code\n```python\nimport os\nos.listdir('" + str(recorded.parent) + "')\n```",
        "Action: write_function(public=True)\n```python\ndef broken(:\n    pass\n```",
        "Action: write_function(public=True)\n```python\ndef crashes():\n    \"\"\"Bad.\"\"\"\n    return 1 / 0\n```",
        GOOD,
        'Action: write_function(public=False)\n```python\ndef _step_twice():\n    go_forward()\n    return go_forward()\n```',
        "Action: finish()",
    ]


def test_session_writes_checks_and_records(recorded):
    """Appendix E, section 2: online induction never re-runs a finished task, so a write is checked for
    parsing and loading only; `crashes` (a runtime error) is kept, as no environment may reveal it."""
    v0_before = tree_hash(recorded / "library" / "v0")
    fake = Fake(session_replies(recorded))
    ctx = ctx_for(recorded)
    lib = get_method("speedrunner").induce(ctx, client=fake)
    assert lib.version == 1 and lib.meta["finished"] and lib.meta["requests"] == 8
    assert lib.meta["replay_check"] is False
    # the protocol's examples: a query, then a function that loops over what one of BabyAI's primitives returns
    system = fake.seen[0][0]["content"]
    assert "Action: execute_code\n```python\nshow(" in system
    assert "Action: write_function(public=True)\n```python\ndef turn_left_until(text" in system
    assert "seen = turn_left()" in system
    names = {f.name: f.public for f in lib.functions}
    assert names == {"crashes": True, "turn_around": True, "mission_parts": True, "_step_twice": False}
    assert tree_hash(recorded / "library" / "v0") == v0_before
    log = [json.loads(x) for x in (recorded / "induce" / "v1" / "transcript.jsonl").read_text().splitlines()]
    obs = [t["observation"] for t in log]
    # the episodes table and the missions (openings, read back from the records) reached the model
    assert "success" in obs[0] and "'Mission: " in obs[0]
    assert "PermissionError" in obs[1] and not Path("/tmp/evil_inducer.txt").exists()
    assert "Permission" in obs[2] or "Error" in obs[2]  # outside the run's history nothing is readable
    assert "does not parse" in obs[3] and obs[4].startswith("Saved crashes (public)")
    assert obs[5].startswith("Saved mission_parts (public)")
    calls = pq.read_table(recorded / "induce" / "v1" / "llm_calls.parquet").to_pylist()
    assert len(calls) == 8 and {c["role"] for c in calls} == {"inducer"}
    # The written library is a valid version: it loads and its functions run in the sandbox.
    lib.write(ctx.out_dir)
    again = Library.load(ctx.out_dir)
    assert [f.name for f in again.functions] == [f.name for f in lib.functions]

    s = SandboxSession(source=again.source)
    assert s.exec_code("mission_parts('go to the blue key after you pick up the red ball')").ret == "('red ball', 'blue key')"
    s.close()


def test_ablations(recorded):
    # interpreter off: no execute_code, trajectories in the context; all_public: helpers become public;
    # asi_style: the other prompt file.
    fake = Fake(["Action: execute_code\n```python\nprint(1)\n```",
                 "Action: write_function(public=False)\n```python\ndef _helper():\n    return go_forward()\n```",
                 "Action: finish()"])
    ctx = ctx_for(recorded, interpreter=False, access="all_public", prompt="asi_style")
    lib = get_method("speedrunner").induce(ctx, client=fake)
    first = fake.seen[0]
    assert "ABSTRACT THE BEHAVIOUR" in first[0]["content"] and "execute_code" not in first[0]["content"]
    assert "Recent episodes" in first[1]["content"] and "## Episode on task" in first[1]["content"]
    assert {f.name: f.public for f in lib.functions}["_helper"] is True
    log = [json.loads(x) for x in (recorded / "induce" / "v1" / "transcript.jsonl").read_text().splitlines()]
    assert "not available" in log[0]["observation"]


def test_missing_prompt_file_is_named(recorded):
    with pytest.raises(ConfigError, match="config key methods.sr.options: inducer_prompt_file: nope.txt does not exist"):
        get_method("speedrunner").induce(ctx_for(recorded, inducer_prompt_file="nope.txt"), client=Fake(["x"]))


EXAMPLES = ROOT / "src/skillrepro/resources/examples"
EXAMPLE_FILE = EXAMPLES / "babyai_approach.py"


def test_an_example_file_replaces_the_protocols_example_function(recorded):
    fake = Fake(["Action: finish()"])
    get_method("speedrunner").induce(ctx_for(recorded, budget=1, example_file=str(EXAMPLE_FILE)), client=fake)
    system = fake.seen[0][0]["content"]
    assert "Action: write_function(public=True)\n```python\ndef approach(name, max_steps=20):" in system
    assert "def turn_left_until(" not in system and "Action: execute_code\n```python\nshow(" in system
    fake = Fake(["Action: finish()"])  # a list of files: their functions in order, in the one example
    files = [str(EXAMPLE_FILE), str(EXAMPLES / "babyai_mission.py")]
    get_method("speedrunner").induce(ctx_for(recorded, budget=1, example_file=files), client=fake)
    system = fake.seen[0][0]["content"]
    assert system.index("def approach(name, max_steps=20):") < system.index("def mission_steps(mission):")
    with pytest.raises(ConfigError, match="config key methods.sr.options: example_file: nope.py does not exist"):
        get_method("speedrunner").parse_options({"example_file": "nope.py"}, "sr")


def test_the_shipped_babyai_examples_reach_the_missions_objects():
    """The example files are working routines: the mission's steps (`mission_steps`), each object approached
    (`approach`) and picked up where the step says so, solve most training tasks (the inducer is shown something
    that works, not a sketch)."""
    tasks = load_benchmark(BENCH).sample_tasks("train", 20, 7)
    solved = 0
    for task in tasks:
        env = load_benchmark(BENCH).make(task)
        mission = env.reset().splitlines()[0]
        space = {p.name: (lambda name=p.name: env.step(name).observation) for p in load_benchmark(BENCH).primitives()}
        exec(EXAMPLE_FILE.read_text() + (EXAMPLES / "babyai_mission.py").read_text(), space)
        steps = space["mission_steps"](mission)
        assert [verb for verb, _ in steps] == ["pick up", "go to"], mission
        for verb, name in steps:
            space["approach"](name)
            if verb == "pick up":
                space["pick_up"]()
        solved += env.success()
        env.release()
    assert solved >= 12, f"{solved} of {len(tasks)}"


def test_last_request_is_prefilled_when_nothing_was_saved(recorded):
    # The server answers a trailing assistant message with its continuation only (the name's leading space
    # included: the prefill ends at "def", not "def ", so that the model is not asked to start a word mid-token).
    fake = Fake(["I think the library is fine.",
                 ' step_ahead():\n    """Step forward."""\n    return go_forward()\n\ndef cut_off(x):\n    if x',
                 "Action: finish()"])
    ctx = ctx_for(recorded, limits=InducerLimits(nudge_requests=2), budget=3)
    lib = get_method("speedrunner").induce(ctx, client=fake)
    assert "requests left" not in json.dumps(fake.seen[0])  # the first of 3 requests is not nudged
    assert "You have 2 requests left" in fake.seen[1][-2]["content"]
    assert fake.seen[1][-1] == {"role": "assistant", "content": LAST_CHANCE_PREFILL}
    # the last request (not nudged: a write was saved) sees the whole reply, prefill and all
    assert fake.seen[2][-2]["content"].startswith(LAST_CHANCE_PREFILL + " step_ahead():")
    assert "last request" not in fake.seen[2][-1]["content"]
    assert {f.name: f.public for f in lib.functions} == {"turn_around": True, "step_ahead": True}
    log = [json.loads(x) for x in (recorded / "induce" / "v1" / "transcript.jsonl").read_text().splitlines()]
    assert "did not parse and were dropped" in log[1]["observation"]  # the half function cut by the token limit


def test_constrained_replies_are_one_json_tool_call_and_the_last_may_only_write(recorded):
    """llm.tool_calling: constrained decodes each inducer reply under a schema of its tools (the actor's
    shape, {"name", "arguments"}); code travels as a JSON string. A reply cut off by the token limit keeps
    its complete functions; the last request of a session that saved nothing may only call write_function."""
    source = 'def step_ahead():\n    """Step forward."""\n    return go_forward()\n'
    cut = json.dumps({"name": "write_function", "arguments": {"source": source + "\ndef half(x):\n    if x",
                                                              "public": True}})[:-25]
    fake = Fake([json.dumps({"name": "execute_code", "arguments": {"code": "sql('SELECT count(*) AS n FROM steps')"}}),
                 "not json at all", cut])
    lib = get_method("speedrunner").induce(ctx_for(recorded, LLMConfig(ctx_per_slot=8192, tool_calling="constrained"),
                                                   budget=3), client=fake)
    schemas = [e["response_format"]["json_schema"]["schema"] for e in fake.extra]
    names = [[c["properties"]["name"]["const"] for c in sch["anyOf"]] for sch in schemas]
    assert names[0] == ["execute_code", "read_library", "write_function", "delete_function", "finish"] == names[1]
    assert names[2] == ["write_function"]  # the nudge: nothing saved yet and one request left
    assert "one JSON object that calls one tool" in fake.seen[0][0]["content"]
    log = [json.loads(x) for x in (recorded / "induce" / "v1" / "transcript.jsonl").read_text().splitlines()]
    assert log[0]["tool"] == "execute_code" and "Error" not in log[0]["observation"]
    assert log[1]["observation"].startswith("Error: the reply is not one complete JSON tool call")
    assert log[2]["observation"].startswith("Saved step_ahead (public)") and "were dropped" in log[2]["observation"]
    assert {f.name: f.public for f in lib.functions} == {"turn_around": True, "step_ahead": True}


def test_the_inducer_limits_are_settings(recorded):
    """Config section inducer reaches the session: reply tokens, the library in the first message, each tool
    output, read_library, the history trim and the last-request nudge (off here); its defaults are today's (the
    library's views null: sized from the context)."""
    assert inducer_limits(check_config(load_yaml(DATA / "tiny.yaml"), check_files=False)) == \
        InducerLimits(256, None, None, 3000, None, True)

    class Sized(Fake):
        def chat(self, messages, *, max_tokens=None, **kw):
            self.asked = [*getattr(self, "asked", []), max_tokens]
            return super().chat(messages, max_tokens=max_tokens, **kw)

    fake = Sized(["Action: read_library()", "Action: execute_code\n```python\nprint('x' * 5000)\n```",
                  "nothing useful " * 400, "still nothing"])
    limits = InducerLimits(min_reply_tokens=300, history_tokens=700, library_chars=40, tool_output_chars=150,
                           read_library_chars=60, nudge_requests=0)
    lib = get_method("speedrunner").induce(ctx_for(recorded, budget=4, limits=limits), client=fake)
    assert fake.asked == [300] * 4 and lib.meta["limits"]["tool_output_chars"] == 150
    first = fake.seen[0][1]["content"]
    assert "# public\ndef turn_around():" in first and "return turn_left()" not in first  # cut to 40 characters
    log = [json.loads(x) for x in (recorded / "induce" / "v1" / "transcript.jsonl").read_text().splitlines()]
    # read_library: 60 characters of source, to a line's end, and the offset of the rest
    assert log[0]["observation"] == ('# public\ndef turn_around():\n    """Turn twice."""\n\n'
                                     "(shown 50 of 88 characters; call read_library(offset=50) for the rest)")
    assert len(log[1]["observation"]) == 150
    # 700 tokens x 3 characters: the first message gets half; the later turns are kept while all fits
    size = lambda ms: sum(len(m["content"] or "") for m in ms)  # noqa: E731
    assert len(first) <= 1050 and all(not sent[2:] or size(sent) <= 2100 for sent in fake.seen)
    assert len(fake.seen[3]) < 2 + 6  # request 4 would carry 3 turns untrimmed; the 6000-character reply is gone
    assert not any("last request" in (m["content"] or "") for sent in fake.seen for m in sent)


BOMBS = {
    "3,500 nested unary minus signs": "def f():\n    return " + "-" * 3500 + "1\n",
    "nesting under the parser's limit but too deep to unparse": "def f():\n    return " + "[" * 190 + "]" * 190 + "\n",
    "a NUL byte": "def f():\n    return 1\x00\n",
    "a megabyte of code": "def f():\n    return 1\n" + "x = 1\n" * 200_000,
}


@pytest.mark.parametrize("code", BOMBS.values(), ids=BOMBS.keys())
def test_model_code_that_the_parser_chokes_on_is_an_error_to_the_model(code):
    """Every place that parses model-written code answers with an error, never a crash of the job."""
    sess = Session({}, {"go_forward"}, all_public=True)
    assert write_function(sess, code, True, load_benchmark(BENCH), []).startswith("Error"), "write_function"
    assert not sess.functions
    added, _ = append_functions(Library(0), reply_code(f"```python\n{code}\n```"), {"go_forward"}, SandboxPolicy())
    assert all(len(f.source) < 200_000 for f in added)
    s = SandboxSession(source=code)  # a library file holding it: the parent parses it before the worker
    assert s.functions == [] and s._known == set()
    s.close()


def test_an_actor_reply_the_parser_chokes_on_is_an_invalid_action():
    action = parse_text_action("Action: go_to(" + "-" * 3500 + "1)", ["go_to"])
    assert action.name == "go_to" and "could not read the arguments" in action.problem


def test_the_notebook_calls_the_library_and_the_first_message_can_show_an_episode(recorded):
    """A cell can call the working library's functions (v0's from the start, a new one once written), and a
    primitive there raises, saying why; `inducer.example_steps` puts one recorded episode's first steps, each
    action with what it returned, in the first message (0, the paper's behaviour, puts none)."""
    fake = Fake(["Action: execute_code\n```python\nturn_around.__doc__\n```",
                 "Action: execute_code\n```python\nturn_around()\n```",
                 GOOD,
                 "Action: execute_code\n```python\nmission_parts('go to the blue key after you pick up the red ball')\n```",
                 "Action: finish"])
    get_method("speedrunner").induce(ctx_for(recorded, budget=5, limits=InducerLimits(example_steps=2)), client=fake)
    obs = [json.loads(x)["observation"] for x in (recorded / "induce/v1/transcript.jsonl").read_text().splitlines()]
    assert "Turn twice." in obs[0]
    assert "turn_left() steps the environment" in obs[1]
    assert obs[2].startswith("Saved mission_parts") and "('red ball', 'blue key')" in obs[3]
    first = fake.seen[0][1]["content"]
    assert "Opening observation:\n" in first and "turn_around() returned:\n" in first
    assert "go_forward() returned:\n" in first and "pick_up() returned" not in first  # its first 2 steps only
    fake = Fake(["Action: finish"])
    get_method("speedrunner").induce(ctx_for(recorded, budget=1), client=fake)
    assert "Opening observation" not in fake.seen[0][1]["content"]


def test_native_history_keeps_each_call_and_the_summary_reports_progression(recorded):
    """In native tool-calling mode the conversation keeps each call with its code and arguments (the next
    request sees what was written, public or not), and the first message's per-cycle summary reports
    progression beside success (Crafter is scored by progression)."""
    code = 'def _twice():\n    """Two steps."""\n    go_forward()\n    return go_forward()\n'
    client = ScriptedClient([ToolCall("c1", "write_function", {"source": code, "public": False}),
                             ToolCall("c2", "finish", {"summary": "done"})])
    lib = get_method("speedrunner").induce(ctx_for(recorded, llm=LLMConfig(ctx_per_slot=8192, tool_calling="native"),
                                                   budget=2), client=client)
    assert {f.name: f.public for f in lib.functions}["_twice"] is False
    said, answer = client.requests[1][2:4]
    (call,) = said["tool_calls"]
    assert said["role"] == "assistant" and call["function"]["name"] == "write_function"
    assert json.loads(call["function"]["arguments"]) == {"source": code, "public": False}
    assert answer == {"role": "tool", "tool_call_id": "c1", "content": answer["content"]}
    assert answer["content"].startswith("Saved _twice")
    assert '"mean_progression": 0.0' in client.requests[0][1]["content"]


def test_native_mode_speaks_native_and_reads_a_call_written_as_text(recorded):
    """llm.tool_calling: native through the real client and a fake server: the system prompt and the nudge ask
    for tool calls (no text protocol), the history holds each call as the assistant's tool call answered by the
    tool's message, a reply that writes the history's JSON as text is read as that call, and a reply with no call
    at all is told how to call."""
    first = 'def _twice():\n    """Two steps."""\n    go_forward()\n    return go_forward()\n'
    second = 'def three():\n    """Three steps."""\n    _twice()\n    return go_forward()\n'
    made = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "write_function", "arguments": json.dumps({"source": first, "public": False})}}]}
    replies = [made, {"role": "assistant", "content": json.dumps({"name": "write_function",
                                                                   "arguments": {"source": second, "public": True}})},
               {"role": "assistant", "content": "I am done thinking."}]
    bodies = []

    def answer(path, raw):
        bodies.append(json.loads(raw))
        msg = replies[len(bodies) - 1]
        return 200, json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [
            {"index": 0, "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop", "message": msg}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}).encode()

    server = ChatServer(answer)
    try:
        llm = LLMConfig(backend="openai", model="m", ctx_per_slot=8192, tool_calling="native", max_retries=0)
        lib = get_method("speedrunner").induce(ctx_for(recorded, llm=llm, budget=3), client=LLMClient(llm, server.url))
    finally:
        server.close()
    assert {f.name: f.public for f in lib.functions if f.name in ("_twice", "three")} == {"_twice": False, "three": True}
    system = bodies[0]["messages"][0]["content"]
    assert "through the tool\ninterface" in system and "Action:" not in system and "```python" not in system
    assert {t["function"]["name"] for t in bodies[0]["tools"]} >= {"write_function", "execute_code", "finish"}
    said, told = bodies[1]["messages"][2:4]
    assert said["tool_calls"][0]["id"] == "c1" and told["role"] == "tool" and told["tool_call_id"] == "c1"
    assert said["tool_calls"][0]["function"]["name"] == "write_function"
    assert bodies[2]["messages"][5]["content"].startswith("Observation:\nSaved three")  # read from its text
    log = [json.loads(x) for x in (recorded / "induce" / "v1" / "transcript.jsonl").read_text().splitlines()]
    assert log[2]["tool"] == "" and "Call one of the offered tools through the tool interface" in log[2]["observation"]


def test_a_repeated_call_is_answered_with_a_pointer_until_the_library_changes(recorded):
    """inducer.repeat_notice: the same cell or read again, with nothing changed, gets 'the same call as request N'
    instead of the same output; after a saved write the same read answers again (the library changed)."""
    cell = "Action: execute_code\n```python\nprint(6 * 7)\n```"
    fake = Fake([cell, cell, "Action: read_library()", "Action: read_library()",
                 'Action: write_function(public=True)\n```python\ndef step_ahead():\n    """Step."""\n    return go_forward()\n```',
                 "Action: read_library()"])
    get_method("speedrunner").induce(ctx_for(recorded, limits=InducerLimits(repeat_notice=True), budget=6), client=fake)
    obs = [json.loads(x)["observation"] for x in (recorded / "induce" / "v1" / "transcript.jsonl").read_text().splitlines()]
    assert obs[0].startswith("42") and obs[1].startswith("The same call as request 1,")
    assert "turn_around" in obs[2] and obs[3].startswith("The same call as request 3,")
    assert obs[4].startswith("Saved step_ahead") and "step_ahead" in obs[5]
    # off (the paper): every call is answered by its tool
    fake = Fake([cell, cell])
    get_method("speedrunner").induce(ctx_for(recorded, budget=2), client=fake)
    obs = [json.loads(x)["observation"] for x in (recorded / "induce" / "v1" / "transcript.jsonl").read_text().splitlines()]
    assert obs[0].startswith("42") and obs[1].startswith("42")


def test_the_inducer_may_speak_its_own_protocol_on_the_shared_server():
    """inducer.tool_calling replaces llm.tool_calling for the sleep phases only; the model stays, so no server
    of its own is started."""
    llm = LLMConfig(tool_calling="constrained")
    limits = InducerLimits(tool_calling="text")
    assert limits.sleep_llm(llm).tool_calling == "text" and limits.sleep_llm(llm).model == llm.model
    assert not limits.own_server(llm) and InducerLimits().sleep_llm(llm) is llm
    both = InducerLimits(tool_calling="text", model="qwen2.5-coder-1.5b")
    assert both.own_server(llm) and both.sleep_llm(llm).model == "qwen2.5-coder-1.5b"


def test_require_action_keeps_a_function_that_reaches_no_primitive_private(recorded):
    """inducer.require_action: a public function that reaches no primitive action is saved private (out of the
    agent's list, where it would do nothing; there for a function that acts to call), saying why: returning an
    action's name as text, acting through the notebook, calling a function defined nowhere or one passed in.
    A public function acting through a private helper and one that holds its primitives as values (the
    reference library's dispatch dict) stay public; the same code written again changes nothing and says so. Under
    access all_public (no private functions) it is refused."""
    idle = 'Action: write_function(public=True)\n```python\ndef pick_up_object():\n    return "pick_up()"\n```'
    # what the 1.5B inducer wrote next: acting through the notebook's connection
    through_db = ('Action: write_function(public=True)\n```python\ndef pick_and_move():\n'
                  '    db.execute_query("pick_up()")\n    return "done"\n```')
    acting = ('Action: write_function(public=True)\n```python\ndef _target(mission):\n    return mission.split()[-1]\n\n'
              'def grab_twice():\n    """Pick up, turn, pick up."""\n    _step()\n    return pick_up()\n\n'
              'def _step():\n    return turn_left()\n```')
    by_value = ('Action: write_function(public=True)\n```python\ndef do(name):\n'
                '    return {"left": turn_left, "up": pick_up}[name]()\n```')
    beside = ('Action: write_function(public=True)\n```python\ndef steps(mission):\n    return mission.split(", then ")\n\n'
              'def walk(n):\n    """Go forward n times."""\n    for _ in range(n):\n        go_forward()\n```')
    # what the 1.5B inducer wrote at 03078bb, five times: a call of the protocol's example, which is not saved
    unsaved = ('Action: write_function(public=True)\n```python\ndef go_to_box(observation):\n'
               '    return turn_left_until(observation)\n```')
    # and, from the same protocol example: the loop over an action passed in
    passed = ('Action: write_function(public=True)\n```python\ndef repeat_until(text, action, max_steps=4):\n'
              '    seen = ""\n    for _ in range(max_steps):\n        seen = action()\n        if text in seen:\n'
              '            break\n    return seen\n```')
    # a helper written alone, then the function that uses it (refused, the helper sank the second write too)
    parser = 'Action: write_function(public=True)\n```python\ndef targets(mission):\n    return mission.split()[-2:]\n```'
    user = ('Action: write_function(public=True)\n```python\ndef go_to_targets(mission):\n'
            '    for t in targets(mission):\n        go_forward()\n```')
    # the 1.5B inducer's public function at a84538f: a local named for the primitive holds text, acting on nothing
    shadow = ('Action: write_function(public=True)\n```python\ndef pick_up_and_go_to(text, obj, place):\n'
              '    pick_up = f"pick_up({obj})"\n    return pick_up + " then go to " + place\n```')
    fake = Fake([idle, through_db, acting, by_value, beside, unsaved, passed, parser, user, passed, shadow])
    lib = get_method("speedrunner").induce(ctx_for(recorded, limits=InducerLimits(require_action=True), budget=11), fake)
    obs = [json.loads(x)["observation"] for x in (recorded / "induce" / "v1" / "transcript.jsonl").read_text().splitlines()]
    public = {f.name: f.public for f in lib.functions}
    assert obs[0].startswith("Saved pick_up_object (private) (pick_up_object reach(es) no primitive action"), obs[0]
    assert "kept private, out of the agent's list" in obs[0] and "notebook" not in obs[0] and "uses" not in obs[0]
    assert "db exist only in execute_code's notebook" in obs[1] and "not db.execute_query" in obs[1]
    assert "uses db" not in obs[1]  # db: the notebook's own hint says why
    assert obs[2].startswith("Saved") and {"grab_twice", "_target", "_step"} <= set(public) and public["grab_twice"]
    assert obs[3].startswith("Saved do (public)") and public["do"]
    assert obs[4].startswith("Saved steps (private), walk (public)"), obs[4]
    assert "go_to_box uses turn_left_until, defined nowhere a skill runs" in obs[5], obs[5]
    assert "repeat_until call(s) a function passed in, which the agent, passing text, cannot" in obs[6], obs[6]
    assert obs[8].startswith("Saved go_to_targets (public)") and not public["targets"] and public["go_to_targets"]
    assert not any(public[n] for n in ("pick_up_object", "pick_and_move", "go_to_box", "repeat_until", "steps"))
    # the same code again: nothing changes, and the reply says what to write instead
    assert obs[9].startswith("Unchanged: repeat_until (private) is in the library already, word for word"), obs[9]
    assert obs[9].endswith("Write something new: a public function that acts and uses it.")
    assert obs[10].startswith("Saved pick_up_and_go_to (private)") and not public["pick_up_and_go_to"], obs[10]
    # access all_public: every function is offered to the agent, so one that does nothing is refused
    get_method("speedrunner").induce(ctx_for(recorded, limits=InducerLimits(require_action=True), budget=1,
                                             access="all_public"), Fake([idle]))
    (entry,) = [json.loads(x) for x in (recorded / "induce" / "v1" / "transcript.jsonl").read_text().splitlines()]
    assert entry["observation"].startswith("Error: pick_up_object call(s) no primitive action"), entry["observation"]
    # off (the paper): the idle function is kept public
    lib = get_method("speedrunner").induce(ctx_for(recorded, budget=1), Fake([idle]))
    assert {f.name: f.public for f in lib.functions}["pick_up_object"]


def test_code_cut_at_the_reply_limit_is_refused_with_the_limit_named(recorded):
    class CutOff(Fake):
        def chat(self, *args, **kwargs):
            reply = super().chat(*args, **kwargs)
            return Reply(reply.text, [], "length", reply.record)

    cut = 'Action: write_function(public=True)\n```python\ndef walk(step):\n    if step == 0:\n        go_forward()\n    elif'
    get_method("speedrunner").induce(ctx_for(recorded, budget=1), CutOff([cut]))
    (entry,) = [json.loads(x) for x in (recorded / "induce" / "v1" / "transcript.jsonl").read_text().splitlines()]
    assert entry["observation"].startswith("Error: the code does not parse")
    assert "stopped at its 256-token limit" in entry["observation"]

    # Cut where what is left still parses (the example-file run at 4cc617a saved `navigate` ending in
    # `ahead, left, right = where.get("forward", 0), where.get`): the cut function is dropped, the complete one kept.
    parses = ('Action: write_function(public=True)\n```python\ndef face():\n    return turn_left()\n\n'
              'def navigate(where):\n    view = go_forward()\n    ahead, left, right = where.get("forward", 0), where.get')
    lib = get_method("speedrunner").induce(ctx_for(recorded, budget=1), CutOff([parses]))
    (entry,) = [json.loads(x) for x in (recorded / "induce" / "v1" / "transcript.jsonl").read_text().splitlines()]
    assert entry["observation"].startswith("Saved face") and "inside navigate, so navigate is incomplete" in entry["observation"]
    assert "face" in {f.name for f in lib.functions} and "navigate" not in {f.name for f in lib.functions}
    alone = 'Action: write_function(public=True)\n```python\ndef navigate(where):\n    ahead = where.get'
    lib = get_method("speedrunner").induce(ctx_for(recorded, budget=1), CutOff([alone]))
    (entry,) = [json.loads(x) for x in (recorded / "induce" / "v1" / "transcript.jsonl").read_text().splitlines()]
    assert entry["observation"].startswith("Error: the reply stopped at its 256-token limit inside navigate")
    # A block closed before the cap stopped the reply is whole: saved as written.
    closed = 'Action: write_function(public=True)\n```python\ndef navigate(where):\n    return where.get\n```\nThought: more'
    lib = get_method("speedrunner").induce(ctx_for(recorded, budget=1), CutOff([closed]))
    assert "navigate" in {f.name for f in lib.functions}


def test_require_defined_refuses_a_function_using_a_name_bound_nowhere(recorded):
    """inducer.require_defined: `move_to_grey_box` calling `is_in_grey_box` and `move_to`, written nowhere (what the
    1.5B inducer saved in the 3-seed run at 4cc617a; every call raised NameError), is refused with the names; the
    same function written with its helper in one block, and one using builtins, imports, its own locals, nested
    functions and the primitives, are kept. A name read as a value (the agent's view as a global) gets a word on
    where the view comes from."""
    unbound = ('Action: write_function(public=True)\n```python\ndef move_to_grey_box():\n'
               '    if not is_in_grey_box():\n        turn_left()\n    move_to()\n    return "Moved."\n```')
    with_helper = ('Action: write_function(public=True)\n```python\ndef is_in_grey_box():\n    return "grey box" in turn_left()\n\n'
                   'def move_to_grey_box():\n    if not is_in_grey_box():\n        turn_left()\n    return go_forward()\n```')
    bound = ('Action: write_function(public=True)\n```python\ndef walk(n=3):\n    import re\n    seen = [go_forward() for _ in range(n)]\n'
             '    def last():\n        return seen[-1]\n    try:\n        return str(len(re.findall("a", last())))\n'
             '    except ActionError as e:\n        return str(e)\n```')
    # what the inducer wrote at c7346c4, three times: the agent's view read as a global
    as_global = ('Action: write_function(public=True)\n```python\ndef go_to_obstacle():\n'
                 '    while "wall" not in observation:\n        go_forward()\n```')
    fake = Fake([unbound, with_helper, bound, as_global])
    lib = get_method("speedrunner").induce(ctx_for(recorded, limits=InducerLimits(require_defined=True), budget=4), fake)
    obs = [json.loads(x)["observation"] for x in (recorded / "induce" / "v1" / "transcript.jsonl").read_text().splitlines()]
    assert obs[0].startswith("Error: move_to_grey_box uses is_in_grey_box, move_to, defined nowhere") and "Nothing was saved" in obs[0]
    assert obs[1].startswith("Saved") and obs[2].startswith("Saved walk")
    assert "read as values" not in obs[0]  # called names: functions to write
    assert "observation: read as values, bound nowhere; what the agent sees is the text each action returns (seen = " \
        in obs[3], obs[3]
    assert {"is_in_grey_box", "move_to_grey_box", "walk"} <= {f.name for f in lib.functions}
    # off (the paper): the function is kept as written
    lib = get_method("speedrunner").induce(ctx_for(recorded, budget=1), Fake([unbound]))
    assert "move_to_grey_box" in {f.name for f in lib.functions}


def test_a_top_level_import_is_copied_into_the_functions_that_use_it(recorded):
    """`import re` above the function using it (what the 1.5B inducer wrote at 651d6b7, refused as `re` defined
    nowhere: a library keeps functions only): copied into the function's body, after its docstring, so the
    function runs; an import nothing uses stays an ignored top-level statement."""
    code = ('Action: write_function(public=True)\n```python\nimport re\nfrom json import dumps as d\nimport os\n\n'
            'def where(text):\n    """The first colour named."""\n    m = re.search("red|blue", text)\n    return d(m and m.group())\n\n'
            'def walk():\n    return go_forward()\n```')
    lib = get_method("speedrunner").induce(ctx_for(recorded, limits=InducerLimits(require_defined=True), budget=1),
                                           Fake([code]))
    (obs,) = [json.loads(x)["observation"] for x in (recorded / "induce" / "v1" / "transcript.jsonl").read_text().splitlines()]
    assert obs.startswith("Saved where"), obs
    assert "import re; from json import dumps as d into where" in obs and "ignored top-level statements: import os" in obs
    fns = {f.name: f for f in lib.functions}
    assert fns["where"].source.splitlines()[1:4] == ['    """The first colour named."""', "    import re",
                                                     "    from json import dumps as d"]
    assert fns["where"].doc == "The first colour named." and "import" not in fns["walk"].source
    namespace: dict = {}
    exec(Library(0, (fns["where"],)).source, namespace)
    assert namespace["where"]("a blue key") == '"blue"'


def test_a_saved_function_that_never_reads_an_argument_is_told_so(recorded):
    """The function 002b237's inducer kept, `pick_up_and_move(text, target)` = pick_up(); go_forward(), does the
    same whatever the actor passes: its save says which arguments it never reads; one reading them gets no word."""
    ignores = ('Action: write_function(public=True)\n```python\ndef pick_up_and_move(text, target):\n'
               '    """Pick up, then move to the target."""\n    pick_up()\n    go_forward()\n```')
    reads = ('Action: write_function(public=True)\n```python\ndef walk_to(target, steps=3):\n'
             '    for _ in range(steps):\n        if target in go_forward():\n            return "there"\n    return "not yet"\n```')
    get_method("speedrunner").induce(ctx_for(recorded, budget=2), Fake([ignores, reads]))
    obs = [json.loads(x)["observation"] for x in (recorded / "induce" / "v1" / "transcript.jsonl").read_text().splitlines()]
    assert obs[0].startswith("Saved pick_up_and_move") and "pick_up_and_move never reads text, target" in obs[0]
    assert obs[1].startswith("Saved walk_to") and "never reads" not in obs[1]


@pytest.mark.parametrize("env_name", ["crafter", "babyai"])
def test_the_built_in_example_acts_in_the_world(env_name):
    """The protocol's worked function, run in the sandbox on a task: it steps the world (Crafter's actions return
    nothing under D.2, so it acts and then reads the observation; it is not a loop over a read)."""
    bench = get_benchmark(env_name)
    source = example_loop(bench.primitives())
    assert source.count("def ") == 1, source
    env = bench.make(bench.sample_tasks("train", 1, 0)[0])
    env.reset()
    session = SandboxSession(source=source, env=env)
    try:
        out = session.call_skill(source.split("(")[0].removeprefix("def "), ["a text that never appears"])
    finally:
        session.close()
        env.release()
    assert out.ok, out
    assert env.n_primitive_steps == 4  # max_steps actions, each a step of the world
    assert out.ret.strip()  # what the agent sees after them


CLOSING = "Improve the library now. One tool call per reply."


def test_without_the_interpreter_the_episodes_are_cut_to_fit_the_first_message(recorded):
    """interpreter: false puts the recorded episodes in the first message, whose room (half the conversation's) is
    smaller here than the episodes: they are fitted to what the rest of the message leaves, so the closing
    instruction stays and the message keeps to its room; the library's record counts as whole only the episodes
    shown whole, and names the one shown cut with how much of it was shown."""
    traces = read_traces([recorded / "batches" / "c0"])
    newest = traces[-1]
    for tokens, whole, cut in ((2000, 0, 1), (3500, 1, 0)):  # room for part of one episode; for one, not two
        limits = InducerLimits(history_tokens=tokens)
        fake = Fake(["Action: finish()"])
        lib = get_method("speedrunner").induce(ctx_for(recorded, budget=1, limits=limits, interpreter=False), fake)
        first = fake.seen[0][1]["content"]
        assert first.endswith(CLOSING) and len(first) <= limits.history_chars(LLMConfig(ctx_per_slot=8192)) // 2
        meta = lib.meta
        assert (meta["episodes_whole"], meta["episodes_cut"], meta["episodes_dropped"]) == (whole, cut, 3 - whole - cut)
        assert first.count("## Episode on task") == whole + cut
        assert (newest.render() in first) == bool(whole)
        if cut:
            assert meta["episode_id_cut"] == newest.episode_id and "characters of this episode cut" in first
            assert 0 < meta["cut_chars_shown"] < meta["cut_chars_total"] == len(newest.render())
        else:
            assert meta["episode_id_cut"] is None and "older ones did not fit" in first


def _big_library() -> Library:
    """The shipped BabyAI reference library (about 11k characters: more than the 3,000 the first message showed)."""
    return Library(0, parse_functions((ROOT / "src/skillrepro/resources/reference/babyai/skills.py").read_text()))


def test_the_library_views_are_sized_from_the_context():
    """inducer.library_chars and read_library_chars, null by default, are sized from the context: no more than the
    old fixed 3,000 and 6,000 characters at the laptop presets' 8,192 tokens, the shipped reference libraries (up to
    22.5k characters) whole at the paper preset's 400k; an explicit integer is kept, where the conversation holds it."""
    laptop = check_config(load_yaml(ROOT / "config.yaml"), check_files=False)
    limits, llm = inducer_limits(laptop), llm_config(laptop)
    assert 2000 <= limits.library_room(llm) <= 3000 and 4000 <= limits.read_library_room(llm) <= 6000
    paper = check_config(load_yaml(ROOT / "configs/paper.yaml"), check_files=False, billing=False)
    limits, llm = inducer_limits(paper), llm_config(paper)
    largest = max(len((p / "skills.py").read_text()) for p in (ROOT / "src/skillrepro/resources/reference").iterdir())
    assert limits.library_room(llm) >= 4 * largest and limits.read_library_room(llm) >= limits.library_room(llm)
    fixed = InducerLimits(library_chars=500, read_library_chars=700)
    assert (fixed.library_room(llm), fixed.read_library_room(llm)) == (500, 700)
    raw = load_yaml(ROOT / "config.yaml")
    raw["inducer"]["read_library_chars"] = 20_000  # the conversation at 8,192 tokens: 23,808 characters
    with pytest.raises(ConfigError, match=r"inducer.read_library_chars: 20000 characters .* at most 11904, or null"):
        check_config(raw, check_files=False)


def test_a_library_larger_than_the_old_view_is_shown_whole_at_paper_scale(recorded):
    fake = Fake(["Action: finish()"])
    ctx = replace(ctx_for(recorded, llm=LLMConfig(ctx_per_slot=400_000), budget=1, limits=InducerLimits()),
                  library=_big_library())
    get_method("speedrunner").induce(ctx, fake)
    source = Session({f.name: f for f in ctx.library.functions}, set(), False).library_text()
    assert len(source) > 3000 and source in fake.seen[0][1]["content"]
    assert "(shown " not in fake.seen[0][1]["content"]


class Reader(Fake):
    """An inducer that reads the library as its views say to: read_library at the offset the last one names."""

    def chat(self, messages, **kwargs):
        named = re.findall(r"call read_library\(offset=(\d+)\) for the rest", messages[-1]["content"])
        self.replies = iter([f"Action: read_library(offset={named[-1]})" if named else "Action: finish()"])
        return super().chat(messages, **kwargs)


def test_a_cut_library_view_says_so_and_read_library_reads_the_rest_from_an_offset(recorded):
    """A view of the library that does not hold it all says how much it shows and where the rest starts; read_library
    from that offset goes on from there, until the last view says it is the end: the pieces are the library."""
    fake = Reader([])
    ctx = replace(ctx_for(recorded, budget=20, limits=InducerLimits(library_chars=1000, read_library_chars=3000)),
                  library=_big_library())
    get_method("speedrunner").induce(ctx, fake)
    source = Session({f.name: f for f in ctx.library.functions}, set(), False).library_text()
    first = fake.seen[0][1]["content"]
    header = f"Current library (version 0, {len(source)} characters):\n"
    piece, note = first[first.index(header) + len(header):].split("\n(shown ", 1)
    assert note.startswith(f"{len(piece)} of {len(source)} characters; call read_library(offset={len(piece)}) ")
    log = [json.loads(x) for x in (recorded / "induce" / "v1" / "transcript.jsonl").read_text().splitlines()]
    reads = [t["observation"] for t in log if t["tool"] == "read_library"]
    assert len(reads) >= 3 and all(len(r.split("\n(shown ")[0]) <= 3000 for r in reads)
    assert reads[-1].endswith(f"of {len(source)}: the end of the library)")
    assert piece + "".join(r.split("\n(shown ")[0] for r in reads) == source
    assert log[-1]["tool"] == "finish"


def test_read_library_takes_an_offset_in_every_protocol():
    """The text protocol, a native call and a constrained JSON call all carry read_library's offset; the native and
    constrained schemas offer it (optional); an offset past the end is an error to the model."""
    assert parse_action("Action: read_library(offset=120)", True).offset == 120
    assert parse_action("Action: read_library(120)", True).offset == 120
    assert parse_action("Action: read_library()", True).offset == 0
    assert native_action("read_library", {"offset": 120}).offset == 120
    assert json_action('{"name": "read_library", "arguments": {"offset": 120}}').offset == 120
    assert native_action("read_library", {"offset": "lots"}).problem
    (schema,) = [t["function"]["parameters"] for t in tool_schemas(True) if t["function"]["name"] == "read_library"]
    assert schema["properties"]["offset"]["type"] == "integer" and "offset" not in schema["required"]
    lib = _big_library()
    sess = Session({f.name: f for f in lib.functions}, set(), False)
    bench = Workbench(sess, None, False, None, [], False, InducerLimits(read_library_chars=500), LLMConfig())
    assert bench.apply(Action("read_library", offset=10 ** 6)).startswith("Error: offset 1000000 is past the end")
    answer = bench.apply(Action("read_library", offset=700))
    assert sess.library_text()[700:].startswith(answer.split("\n(shown ")[0]) and ", from offset 700; " in answer


def test_asis_listing_says_how_many_functions_it_left_out():
    """ASI's inducer has no tool to read the library: a listing cut at inducer.library_chars keeps whole lines and
    counts the functions it left out; sized from a paper-scale context, it lists them all."""
    lib = _big_library()
    listing = asi._listing(lib, 300)
    shown = [line for line in listing.splitlines() if line.startswith("- ")]
    assert 0 < len(shown) < len(lib.functions) and len(listing.split("\n(")[0]) <= 300
    assert f"{len(shown)} of {len(lib.functions)} functions listed, {len(lib.functions) - len(shown)} left out" in listing
    whole = asi._listing(lib, InducerLimits().library_room(LLMConfig(ctx_per_slot=400_000)))
    assert whole.count("\n- ") + 1 == len(lib.functions) and "left out" not in whole
