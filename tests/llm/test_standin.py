"""The provider stand-in refuses what OpenAI and Gemini document they refuse, with their error bodies, through the
real client (so a rehearsal's refusal reaches the pipeline as a real one would)."""
import pytest

from skillrepro.config import LLMConfig
from skillrepro.llm.client import LLMClient, LLMRequestError
from skillrepro.agent import PROMPTS
from skillrepro.llm.standin import PROVIDERS, StandIn, provider_of, role_of


def tool(name: str) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}


@pytest.fixture(scope="module")
def standin():
    s = StandIn(PROVIDERS["openai"], context_tokens=20_000).start()
    yield s
    s.stop()


def ask(standin, model="gpt-5.4-mini", tools=None, content="hi", **llm):
    llm = {"max_tokens_param": "max_completion_tokens", "send_temperature": False, "max_tokens": 64,
           "max_retries": 0, "reasoning_effort": {}, **llm}
    client = LLMClient(LLMConfig.from_dict({"backend": "openai", "model": model, **llm}), standin.url)
    return client.chat([{"role": "system", "content": "You act."}, {"role": "user", "content": content}],
                       role="actor", session_id="s", tools=tools)


@pytest.mark.parametrize("case, code", [
    (dict(tools=[tool(f"t{i}") for i in range(129)]), "array_above_max_length"),
    (dict(tools=[tool("récolter")]), "invalid_value"),
    (dict(reasoning_effort={"actor": "extreme"}), "invalid_value"),
    (dict(max_tokens_param="max_tokens"), "unsupported_parameter"),
    (dict(send_temperature=True, temperature=0.7), "unsupported_value"),
    (dict(max_tokens=200_000), "invalid_value"),
    (dict(content="x" * 80_000), "context_length_exceeded"),
])
def test_each_documented_limit_is_refused_with_the_providers_code(standin, case, code):
    with pytest.raises(LLMRequestError) as e:
        ask(standin, **case)
    assert e.value.error["code"] == code and e.value.context_full == (code == "context_length_exceeded")
    assert standin.seen[-1].refused == code


def test_a_request_within_the_limits_is_answered_as_its_role(standin):
    reply = ask(standin, tools=[tool(f"t{i}") for i in range(128)])
    assert reply.tool_calls[0].name == "t0" and standin.seen[-1].refused == "" and standin.seen[-1].tools == 128
    # a model outside the reasoning family may send a temperature and max_tokens
    assert ask(standin, model="gpt-4.1", max_tokens_param="max_tokens", send_temperature=True).text
    critic = (PROMPTS / "voyager_critic.txt").read_text().format(environment="A grid world.")  # as Voyager sends it
    assert role_of({"messages": [{"role": "system", "content": critic}]}) == "critic"
    assert role_of({"tools": [tool("write_function")], "messages": []}) == "inducer"


def test_gemini_is_held_to_its_own_limits_with_googles_error_bodies():
    gemini = provider_of("https://generativelanguage.googleapis.com/v1beta/openai/")
    assert gemini.name == "gemini" and provider_of("http://localhost:8000/v1").name == "openai"
    s = StandIn(gemini, context_tokens=20_000).start()
    try:
        model = dict(model="gemini-3-flash", max_tokens_param="max_tokens", send_temperature=True, temperature=0.7,
                     ctx_per_slot=20_000)  # the preset's window, as the stand-in's
        assert ask(s, tools=[tool(f"t{i}") for i in range(300)], **model).tool_calls[0].name == "t0"  # past 128
        assert ask(s, tools=[tool("mod.skill:v2")], **model).tool_calls  # dots and colons are Gemini's
        for case, breach, words in (
                (dict(tools=[tool(f"t{i}") for i in range(513)]), "array_above_max_length", "At most 512 function"),
                (dict(tools=[tool("2nd_skill")]), "invalid_value", "Must start with a letter or an underscore"),
                (dict(content="x" * 80_000), "context_length_exceeded", "The input token count")):
            with pytest.raises(LLMRequestError) as e:
                ask(s, **model, **case)
            assert e.value.error["status"] == "INVALID_ARGUMENT" and words in e.value.error["message"]
            # Google's body says nothing of the cause: the client counts the prompt (80,000 characters: past the
            # window by any tokenizer's count; 513 tools: within it)
            assert e.value.context_full == (breach == "context_length_exceeded")
            assert s.seen[-1].refused == breach
    finally:
        s.stop()
