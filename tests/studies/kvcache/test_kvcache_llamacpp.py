"""Integration: the llama.cpp mode of the simulator against the cached tokens the embedded server reports.

An ALFWorld-shaped episode (synthetic observations) is sent to the real llama.cpp server step by step, with
the chat template applied by the server (/apply-template) and the prompt token ids from /tokenize, exactly
as the server itself tokenises the prompt; the server's `timings.cache_n` is then compared with
`simulate_llamacpp` on the recorded (prompt ids, reply ids) stream.
"""
from __future__ import annotations

import json
import urllib.request

import pytest

from skillrepro.studies.kvcache import formats as F
from skillrepro.studies.kvcache.sim import Request, simulate_llamacpp
from skillrepro.studies.kvcache.tokenizers import ServerTokenizer, get_tokenizer

pytestmark = pytest.mark.integration

ACTS = ["go to cabinet 1", "go to countertop 1", "go to sinkbasin 1", "inventory", "look"]
TASK = "put a clean cloth in cabinet."
OBS = ["You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, "
       "and a sinkbasin 1.\n\nYour task is to: " + TASK,
       "You arrive at cabinet 1. The cabinet 1 is closed.",
       "You arrive at countertop 1. On the countertop 1, you see a cloth 2.",
       "You pick up the cloth 2 from the countertop 1."]


def post(base: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)


def record_episode(base: str, fmt: str) -> tuple[list[Request], list[int]]:
    bank = F.load_bank()
    tok = get_tokenizer(f"server:{base}")
    history: list[F.Turn] = []
    reqs, reported = [], []
    for step, obs in enumerate(OBS):
        msgs = F.build_messages(fmt, bank, TASK, None, history, obs, ACTS)
        prompt = post(base, "/apply-template", {"messages": msgs})["prompt"]
        r = post(base, "/completion", {"prompt": prompt, "n_predict": 8, "cache_prompt": True, "id_slot": 0,
                                       "return_tokens": True, "temperature": 0, "seed": 1})
        ids = post(base, "/tokenize", {"content": prompt, "add_special": True, "parse_special": True})["tokens"]
        assert len(ids) == r["timings"]["prompt_n"] + r["timings"]["cache_n"]  # same tokens as the server's
        assert ids[1:] == tok.encode(prompt) or ids == tok.encode(prompt)  # the tokenizer class agrees (BOS aside)
        reqs.append(Request("e0", step, ids, response_token_ids=r["tokens"]))
        reported.append(r["timings"]["cache_n"])
        history.append(F.Turn(obs, ACTS[step % len(ACTS)], ACTS, r["content"]))
    return reqs, reported


@pytest.mark.parametrize("fmt", ["skillrl", "evoskill"])
def test_llamacpp_mode_matches_server_cache(llm_url, fmt):
    base = llm_url.removesuffix("/v1")
    reqs, reported = record_episode(base, fmt)
    _, sim = simulate_llamacpp(reqs)
    # Step 0 may also reuse whatever slot 0 held before this episode (another test's prompt shares the
    # chat template's first tokens); from step 1 on the slot holds only this episode.
    assert sim[0].cached_tokens == 0 and reported[0] < 20
    assert [r.cached_tokens for r in sim[1:]] == reported[1:]
    assert max(reported[1:]) > 100  # the recorded episode really exercised reuse


def test_server_tokenizer_needs_a_url(monkeypatch):
    monkeypatch.delenv("SKILLREPRO_LLM_URL", raising=False)
    with pytest.raises(ValueError, match="SKILLREPRO_LLM_URL"):
        get_tokenizer("server")
    assert isinstance(get_tokenizer("server:http://127.0.0.1:9/v1"), ServerTokenizer)
