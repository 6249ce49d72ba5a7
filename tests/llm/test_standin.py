"""The provider stand-in refuses what OpenAI documents it refuses, with OpenAI's error codes, through the real
client (so a rehearsal's refusal reaches the pipeline as a real one would)."""
import pytest

from skillrepro.config import LLMConfig
from skillrepro.llm.client import LLMClient, LLMRequestError
from skillrepro.agent import PROMPTS
from skillrepro.llm.standin import PROVIDERS, StandIn, role_of


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
