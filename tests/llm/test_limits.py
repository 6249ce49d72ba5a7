"""Provider limits (llm/limits.py): a refusal is read by the provider's error fields, never its words, and the
actor never sends more tools than the backend takes, every skill staying callable. Through the real client
against local servers that answer as OpenAI, llama.cpp and vLLM do."""
import json

import pytest

from scripted import ChatServer, openai_error
from skillrepro.agent import CALL_SKILL, Actor, EpisodeSpec, Tool, primitive_tools
from skillrepro.benchmarks import get_benchmark
from skillrepro.config import LLMConfig
from skillrepro.llm.client import LLMClient, LLMRequestError, ToolCall
from skillrepro.llm.limits import ToolLimits, tool_limits
from skillrepro.llm.standin import PROVIDERS, StandIn

SPEC = EpisodeSpec("babyai/reference/seed0", "babyai", "reference", "reference", 0, "test", 0, 0)


def client(url: str, backend: str = "openai", **llm) -> LLMClient:
    return LLMClient(LLMConfig(backend=backend, model="m", max_retries=0, **llm), url)


def refusal(status: int, body: bytes, backend: str, tokens: int = 0, **llm) -> LLMRequestError:
    """What the real client raises for a chat request the server answers with `body` (its /tokenize counting
    `tokens` prompt tokens)."""
    def answer(path, raw):
        if path.endswith("/tokenize"):
            return 200, json.dumps({"tokens": list(range(tokens)), "count": tokens}).encode()
        return status, body

    server = ChatServer(answer)
    try:
        with pytest.raises(LLMRequestError) as e:
            client(server.url, backend, **llm).chat([{"role": "user", "content": "hi"}], role="actor", session_id="s")
        return e.value
    finally:
        server.close()


def test_a_refused_tool_list_is_not_a_full_context_whatever_its_words():
    too_many = openai_error("Invalid 'tools': array too long. Expected an array with maximum length 128, but got "
                            "an array with length 129 instead.", "array_above_max_length", "tools")
    e = refusal(400, too_many, "openai")
    assert not e.context_full and e.error["code"] == "array_above_max_length"
    # the job's error names the request and the provider's fields
    assert "actor request to 'm'" in str(e) and "'array_above_max_length'" in str(e) and "0 tools" in str(e)
    full = openai_error("This model's maximum context length is 400000 tokens.", "context_length_exceeded")
    assert refusal(400, full, "openai").context_full


def test_llama_cpp_says_a_full_context_by_its_error_type():
    body = json.dumps({"error": {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 9000,
                                 "n_ctx": 8192, "message": "the request exceeds the available context size"}})
    assert refusal(400, body.encode(), "embedded").context_full
    other = json.dumps({"error": {"code": 400, "type": "invalid_request_error", "message": "context: bad field"}})
    assert not refusal(400, other.encode(), "embedded").context_full


def test_vllm_length_refusals_are_told_by_measuring_the_prompt():
    body = json.dumps({"error": {"message": "This model's maximum context length is 4096 tokens.",
                                 "type": "BadRequestError", "param": None, "code": 400}}).encode()
    # vLLM's error carries no code of its own: the prompt, counted by the server, plus the cap decide
    assert refusal(400, body, "vllm", tokens=4090, ctx_per_slot=4096, max_tokens=96).context_full
    assert not refusal(400, body, "vllm", tokens=100, ctx_per_slot=4096, max_tokens=96).context_full


def test_gemini_says_nothing_of_the_cause_so_a_full_context_is_told_by_counting_the_prompt():
    """Google's body is the same for every bad request ({code, message, status}); read by OpenAI's code field
    alone, a Gemini run whose history outgrew the window failed its job instead of ending the episode."""
    google = json.dumps([{"error": {"code": 400, "message": "The input token count (1200) exceeds the maximum "
                                    "number of tokens allowed (1000).", "status": "INVALID_ARGUMENT"}}]).encode()
    # the request is one short message (~40 characters) and a cap of 96: past a 30-token window by any count
    assert refusal(400, google, "openai", ctx_per_slot=30, max_tokens=96).context_full
    # the same body on a prompt that fits by far is another refusal (a bad field): the job fails, naming it
    e = refusal(400, google, "openai", ctx_per_slot=100_000, max_tokens=96)
    assert not e.context_full and "status 'INVALID_ARGUMENT'" in str(e) and "The input token count" in str(e)


def test_the_tool_limits_are_the_providers_unless_configured():
    assert tool_limits("openai", None).max_tools == 128 and tool_limits("vllm", None) == ToolLimits()
    assert tool_limits("embedded", None).max_tools is None and tool_limits("openai", 512).max_tools == 512
    openai = tool_limits("openai", None)
    assert openai.name_ok("collect_wood-2") and not openai.name_ok("café") and not openai.name_ok("a" * 65)


def skills(n: int, ran: list[str]) -> list[Tool]:
    def runner(name):
        def run(args, wall_s=None):
            ran.append(name)
            return f"{name} done with {args}"
        return run

    return [Tool(f"skill_{i}", (("target", "str"),), f"skill number {i}", runner(f"skill_{i}")) for i in range(n)]


def test_past_the_tool_limit_every_skill_stays_callable_through_call_skill():
    bench = get_benchmark("babyai")
    env = bench.make(bench.sample_tasks("test", 1, 42)[0])
    ran: list[str] = []
    tools = skills(150, ran) + primitive_tools(env)
    stand_in = StandIn(PROVIDERS["openai"], context_tokens=10**6).start()  # calls the first listed skill
    try:
        actor = Actor(client(stand_in.url), bench.describe(), 3, tool_calling="native",
                      tool_limits=tool_limits("openai", None))
        rec = actor.run(env, tools, SPEC)
    finally:
        stand_in.stop()
    assert [s.refused for s in stand_in.seen] == [""] * 3 and max(s.tools for s in stand_in.seen) == 7
    assert rec.episode.termination == "budget" and rec.episode.n_steps == 3
    # the step is the skill's call, the skill ran with its argument, and the prompt named it and the way to call it
    assert [s.action for s in rec.steps] == ["skill_0"] * 3 and all(s.valid for s in rec.steps)
    assert ran == ["skill_0"] * 3 and "skill_0 done with [" in rec.steps[0].observation
    system = json.loads(rec.llm_calls[0].prompt)["messages"][0]["content"]
    assert "- skill_149(target: str): skill number 149" in system and 'call_skill(name="skill_0"' in system


def test_without_a_limit_the_provider_refusal_fails_the_job_not_the_episode():
    """Today's code read this 400 as a full context: the episode ended at step 0 with termination context."""
    bench = get_benchmark("babyai")
    env = bench.make(bench.sample_tasks("test", 1, 42)[0])
    stand_in = StandIn(PROVIDERS["openai"], context_tokens=10**6).start()
    try:
        with pytest.raises(LLMRequestError, match="150 skills|array too long") as e:
            Actor(client(stand_in.url), bench.describe(), 3, tool_calling="native").run(
                env, skills(150, []) + primitive_tools(env), SPEC)
    finally:
        stand_in.stop()
    assert not e.value.context_full and [s.refused for s in stand_in.seen] == ["array_above_max_length"]


def test_a_skill_whose_name_the_provider_refuses_is_called_through_call_skill():
    """A model may name a function in any Unicode letters or at any length; OpenAI takes [a-zA-Z0-9_-]{1,64}."""
    bench = get_benchmark("babyai")
    env = bench.make(bench.sample_tasks("test", 1, 42)[0])
    ran: list[str] = []
    named = Tool("récolter_bois", (), "a skill named in French", lambda args, wall_s=None: ran.append("r") or "ok")
    actor = Actor(None, bench.describe(), 3, tool_calling="native", tool_limits=tool_limits("openai", None))
    schemas = actor.tool_schemas([named, *primitive_tools(env)])
    assert [s["function"]["name"] for s in schemas][0] == CALL_SKILL and len(schemas) == 7
    assert not Actor(None, "", 3, tool_calling="native").dispatches([named, *primitive_tools(env)])
