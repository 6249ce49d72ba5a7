"""Retry logic and usage accounting of the one LLM client, against a local fake HTTP server."""
import json

import pytest

from skillrepro.config import LLMConfig
from skillrepro.llm.client import LLMClient, LLMFatalError
from scripted import OK_BODY, raw

NO_USAGE = {k: v for k, v in OK_BODY.items() if k != "usage"}

ROOM = (("low", 2048), ("medium", 8192))  # llm.reasoning_room as configs/paper.yaml sets it


def client(url, retries=3, backend="openai"):
    c = LLMClient(LLMConfig(backend=backend, model="fake-model", max_retries=retries, timeout_s=5,
                            reasoning_room=ROOM), url)
    c.backoff_base_s = 0.01
    return c


def test_transient_failures_are_retried_and_counted(fake_server):
    url, script = fake_server
    script.actions = [429, 500, "drop", 503, "ok"]
    c = client(url, retries=4)
    reply = c.chat([{"role": "user", "content": "hi"}], role="actor", session_id="ep1")
    assert reply.text == "Action: go_forward()"
    rec = reply.record
    assert rec.retries == 4 and script.seen == 5
    assert (rec.prompt_tokens, rec.cached_tokens, rec.completion_tokens, rec.reasoning_tokens) == (120, 96, 7, 3)
    # the configured model name (what `pricing` keys), not the name the server answers with
    assert rec.finish_reason == "stop" and rec.model == "fake-model" and rec.role == "actor"
    assert len(rec.prompt_sha256) == 64 and json.loads(rec.prompt)["messages"][0]["content"] == "hi"


@pytest.mark.parametrize("fault", ["truncated_json", "empty_choices", "null_message", "invalid_utf8",
                                   "lone_surrogate", "html_502", 429, 500, 503, "drop"])
def test_each_fault_is_retried_and_recorded(fake_server, fault):
    url, script = fake_server
    script.actions = [fault, fault, "ok"]
    reply = client(url, retries=2).chat([{"role": "user", "content": "hi"}], role="actor", session_id="e")
    kind = {"html_502": "502", "drop": "connection", "lone_surrogate": "invalid_utf8"}.get(fault, str(fault))
    assert reply.text == "Action: go_forward()" and script.seen == 3
    assert reply.record.retries == 2 and reply.record.faults == [kind, kind]
    assert not reply.record.usage_missing


def test_faults_reach_the_parquet_record(fake_server, tmp_path):
    from skillrepro.store import LLMCall, read_records, write_records

    url, script = fake_server
    script.actions = ["truncated_json", 503, "ok"]
    reply = client(url).chat([{"role": "user", "content": "hi"}], role="actor", session_id="e")
    [back] = read_records(write_records(tmp_path / "llm_calls.parquet", [reply.record], LLMCall), LLMCall)
    assert back.faults == ["truncated_json", "503"] and back.retries == 2 and back.usage_missing is False


def test_retry_after_is_honoured(fake_server, monkeypatch):
    from skillrepro.llm import client as client_module

    slept = []
    monkeypatch.setattr(client_module.time, "sleep", slept.append)
    url, script = fake_server
    script.actions = [raw({"error": {"message": "slow down"}}, 429, {"Retry-After": "7"}),
                      raw({"error": {"message": "busy"}}, 503, {"retry-after-ms": "1500"}), "ok"]
    reply = client(url).chat([{"role": "user", "content": "hi"}], role="actor", session_id="e")
    assert slept == [7.0, 1.5] and reply.record.faults == ["429", "503"]


def test_retry_after_as_http_date():
    import email.utils
    import time

    from skillrepro.llm.client import retry_after

    assert 25 <= retry_after({"retry-after": email.utils.formatdate(time.time() + 30, usegmt=True)}) <= 30
    assert retry_after({}) is None and retry_after({"retry-after": "soon"}) is None


@pytest.mark.parametrize("backend, tokens", [
    ("embedded", (4, 2)),  # llama.cpp: the templated prompt, split at whitespace by the fake /tokenize
    ("vllm", (5, 2)),
    ("openai", (0, 0)),  # no tokenizer: 0, but flagged
])
def test_a_reply_without_usage_is_flagged_and_counted_by_the_servers_tokenizer(fake_server, backend, tokens):
    url, script = fake_server
    script.actions = [raw(NO_USAGE)]
    reply = client(url, backend=backend).chat([{"role": "user", "content": "hi there"}], role="actor", session_id="e")
    rec = reply.record
    assert rec.usage_missing and (rec.prompt_tokens, rec.completion_tokens) == tokens
    assert rec.retries == 0


def test_every_llamacpp_tokenize_call_goes_through_one_function_with_its_callers_flags(fake_server, monkeypatch):
    """llm.tokenize is the one /tokenize request; each caller keeps its own flags: the client's usage fallback and
    the KV-cache `server` tokenizer parse specials, the KV-cache prompts add them too, its replies neither, and the
    SkillScaffold card counter leaves parse_special to the server."""
    from skillrepro.llm import tokenize as tokenize_module
    from skillrepro.llm.tokenize import tokenize
    from skillrepro.studies.kvcache.actor import prompt_ids_fn, text_ids_fn
    from skillrepro.studies.kvcache.tokenizers import ServerTokenizer
    from skillrepro.studies.scaffold.cards import server_token_counter

    url, script = fake_server
    root = url.removesuffix("/v1")
    llm = LLMConfig(backend="embedded", timeout_s=5)
    assert tokenize(root, "embedded", text="a b c", add_special=True, timeout_s=5) == [0, 1, 2]
    assert ServerTokenizer("server", root).encode("a b") == [0, 1]
    assert prompt_ids_fn(llm, url)([{"role": "user", "content": "hi"}]) == [0, 1, 2]
    assert text_ids_fn(llm, url)("x y") == [0, 1]
    assert server_token_counter(url, "embedded", "m")("p q r") == 3
    script.actions = [raw(NO_USAGE)]
    client(url, backend="embedded").chat([{"role": "user", "content": "hi"}], role="actor", session_id="e")
    bodies = [{k: v for k, v in body.items() if k != "content"} for path, body in script.requests
              if path == "/tokenize"]
    assert bodies == [{"add_special": True},
                      {"add_special": False, "parse_special": True},
                      {"add_special": True, "parse_special": True},
                      {"add_special": False, "parse_special": False},
                      {"add_special": False},
                      {"add_special": False, "parse_special": True}, {"add_special": False, "parse_special": True}]
    # a token given with its piece counts by its id
    monkeypatch.setattr(tokenize_module, "post_json", lambda url, body, timeout: {"tokens": [{"id": 7, "piece": "a"}, 8]})
    assert tokenize(root, "embedded", text="a b", parse_special=True, timeout_s=5) == [7, 8]
    with pytest.raises(ValueError, match="text or messages"):
        tokenize(root, "embedded", timeout_s=5)
    with pytest.raises(ValueError, match="'openai' has no /tokenize"):
        tokenize(root, "openai", text="a", timeout_s=5)


def test_vllm_tokenize_requests_name_the_model_and_the_generation_prompt(monkeypatch):
    """vLLM's /tokenize: messages with the generation prompt (its default, sent explicitly), text with
    add_special_tokens as asked; the ids are its `tokens`."""
    from skillrepro.llm import tokenize as tokenize_module
    from skillrepro.llm.tokenize import tokenize

    sent = []
    monkeypatch.setattr(tokenize_module, "post_json",
                        lambda url, body, timeout: sent.append((url, body)) or {"tokens": [4, 5], "count": 2})
    assert tokenize("http://h:1", "vllm", messages=[{"role": "user", "content": "x"}], model="m") == [4, 5]
    assert tokenize("http://h:1", "vllm", text="y", model="m") == [4, 5]
    assert sent == [("http://h:1/tokenize", {"model": "m", "messages": [{"role": "user", "content": "x"}],
                                             "add_generation_prompt": True}),
                    ("http://h:1/tokenize", {"model": "m", "prompt": "y", "add_special_tokens": False})]


def test_the_body_on_the_wire_is_the_request_with_server_fields_at_the_top_level(fake_server):
    """The SDK takes the fields it names; the rest (extra_body: a llama.cpp grammar, cache_prompt) still
    arrive beside them, unnested, and nothing else is added."""
    url, script = fake_server
    tools = [{"type": "function", "function": {"name": "go", "parameters": {"type": "object", "properties": {}}}}]
    client(url).chat([{"role": "user", "content": "hi"}], role="actor", session_id="e", tools=tools, stop=["\n"],
                     max_tokens=9, seed=2, extra_body={"grammar": 'root ::= "x"', "cache_prompt": True})
    [(path, body)] = script.requests
    assert path == "/v1/chat/completions"
    assert body == {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "seed": 2,
                    "max_tokens": 9 + 2048, "temperature": LLMConfig().temperature, "tools": tools,  # + low's room
                    "parallel_tool_calls": False, "stop": ["\n"], "reasoning_effort": "low",
                    "grammar": 'root ::= "x"', "cache_prompt": True}


EMPTY_AT_CAP = raw(OK_BODY | {"choices": [{"index": 0, "finish_reason": "length",
                                           "message": {"role": "assistant", "content": ""}}],
                               "usage": {"prompt_tokens": 120, "completion_tokens": 50,
                                         "prompt_tokens_details": {"cached_tokens": 0},
                                         "completion_tokens_details": {"reasoning_tokens": 50}}})


@pytest.mark.parametrize("role, effort, cap", [("actor", "low", 50 + 2048), ("critic", "medium", 50 + 8192),
                                               ("replay", "low", 50 + 2048), ("optimizer", "medium", 50 + 8192)])
def test_every_role_sends_an_effort_and_a_reply_empty_at_its_cap_is_asked_again_once(fake_server, role, effort, cap):
    """A.1 gives actor and inducer their efforts; the other roles take the one they stand in for
    (config.EFFORT_FROM), each cap leaves llm.reasoning_room for it, and a reasoning model's reply that spent
    its cap thinking is asked again with llm.cap_retry_factor times the cap. Each request is a record of its own
    with its own counts: one recorded request, one server count (a cache study's reuse never sums two)."""
    url, script = fake_server
    script.actions = [EMPTY_AT_CAP, "ok"]
    c = client(url)
    reply = c.chat([{"role": "user", "content": "hi"}], role=role, session_id="e", max_tokens=50)
    [(_, first), (_, second)] = script.requests
    assert (first["reasoning_effort"], first["max_tokens"], second["max_tokens"]) == (effort, cap, 4 * cap)
    assert reply.text == "Action: go_forward()" and reply.record.faults == ["empty_at_cap"]
    [capped] = reply.earlier
    assert c.records == reply.records == [capped, reply.record]
    assert (capped.prompt_tokens, capped.cached_tokens, capped.completion_tokens, capped.reasoning_tokens,
            capped.finish_reason, capped.faults) == (120, 0, 50, 50, "length", [])
    assert (reply.record.prompt_tokens, reply.record.cached_tokens, reply.record.completion_tokens,
            reply.record.reasoning_tokens) == (120, 96, 7, 3)
    # still empty the second time: returned as it is, finish_reason length, never read as an answer here
    script.actions, script.seen, script.requests = [EMPTY_AT_CAP, EMPTY_AT_CAP, "ok"], 0, []
    reply = client(url).chat([{"role": "user", "content": "hi"}], role=role, session_id="e", max_tokens=50)
    assert (reply.text, reply.finish_reason, reply.record.faults, script.seen) == ("", "length", ["empty_at_cap"], 2)


def test_the_embedded_server_gets_no_effort_and_no_room(fake_server):
    url, script = fake_server
    client(url, backend="embedded").chat([{"role": "user", "content": "hi"}], role="critic", session_id="e",
                                         max_tokens=50)
    [(_, body)] = script.requests
    assert "reasoning_effort" not in body and body["max_tokens"] == 50


def test_retries_give_up_at_the_limit(fake_server):
    url, script = fake_server
    script.actions = [500] * 10
    with pytest.raises(LLMFatalError, match="after 2 retries"):
        client(url, retries=2).chat([{"role": "user", "content": "hi"}], role="actor", session_id="e")
    assert script.seen == 3


@pytest.mark.parametrize("status, message", [(401, "401 unauthorized"), (404, "404 not found")])
def test_auth_and_not_found_fail_at_once(fake_server, status, message):
    url, script = fake_server
    script.actions = [status]
    with pytest.raises(LLMFatalError, match=message):
        client(url).chat([{"role": "user", "content": "hi"}], role="actor", session_id="e")
    assert script.seen == 1


def test_connection_refused_is_retried_then_fatal():
    c = client("http://127.0.0.1:9/v1", retries=1)
    with pytest.raises(LLMFatalError, match="after 1 retries"):
        c.chat([{"role": "user", "content": "hi"}], role="actor", session_id="e")


def test_an_unreported_cached_count_is_unknown_not_zero(fake_server, tmp_path):
    """vLLM without --enable-prompt-tokens-details leaves prompt_tokens_details out: the record says None
    (null in Parquet), and the KV-cache study's client fails at that first reply naming the flag. A reported
    0 stays 0; llama.cpp's own timings.cache_n counts where the usage field is missing."""
    from skillrepro.store import LLMCall, read_records, write_records
    from skillrepro.studies.kvcache.actor import CachedTokensUnreported, RequireCachedTokens

    url, script = fake_server
    usage = {k: v for k, v in OK_BODY["usage"].items() if k != "prompt_tokens_details"}
    zero = dict(OK_BODY["usage"], prompt_tokens_details={"cached_tokens": 0})
    script.actions = [raw(OK_BODY | {"usage": usage}), raw(OK_BODY | {"usage": zero}),
                      raw(OK_BODY | {"usage": usage, "timings": {"cache_n": 64}}), raw(OK_BODY | {"usage": usage})]
    c = client(url, backend="vllm")
    recs = [c.chat([{"role": "user", "content": "hi"}], role="actor", session_id="e").record for _ in range(3)]
    assert [r.cached_tokens for r in recs] == [None, 0, 64]
    back = read_records(write_records(tmp_path / "llm_calls.parquet", recs, LLMCall), LLMCall)
    assert [r.cached_tokens for r in back] == [None, 0, 64]
    with pytest.raises(CachedTokensUnreported, match="--enable-prompt-tokens-details") as e:
        RequireCachedTokens(c, "vllm").chat([{"role": "user", "content": "hi"}], role="actor", session_id="e")
    assert "vllm server at " + url in str(e.value)
