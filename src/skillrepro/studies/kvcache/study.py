"""The seminar's analyses on recorded request streams (seed 001, sections 2-1..2-3).

A stream is one (format, seed) actor run: every request's prompt token ids, completion length, reply ids
and the cached tokens the server reported. From it:
- `simulate_settings`: the vLLM-faithful simulator under each (policy, capacity, lockstep concurrency N):
  the run's episodes are replayed N at a time, advancing in lockstep (step t of every episode of a group is
  one batch), groups one after another with the cache kept between them (unless flushed);
- `step_load`: the prompt+response tokens of all running episodes per step (every episode at once, as the
  seminar's 64 games), to hold against the KV capacity;
- `server_comparison`: what the simulator predicts for the server that served the run (llama.cpp's slot
  model, or vLLM's block cache at full capacity, requests in arrival order) next to what it reported.
Then `tables` (and `model_comparison` across models) pools every run's rows into the study's CSV tables: reuse,
per-step reuse, load and overload, success, the server's counts and the headline. The study's settings (the
`kvcache:` section, a job's settings) are in settings.py.

Longer than the other modules because the per-run rows above and the tables built from them are one analysis:
each table's columns are those rows' fields, and a change to one is a change to the other.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from skillrepro.progress import Progress
from skillrepro.studies.kvcache import sim
from skillrepro.studies.kvcache.actor import CachedTokensUnreported, StreamRequest, unreported_message
from skillrepro.studies.kvcache.settings import KVConfig, Setting
from skillrepro.studies.scaffold.statistics import interval_label, mean_interval


def read_stream(path: str | Path) -> list[StreamRequest]:
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    out.append(StreamRequest(**json.loads(line)))
                except (TypeError, ValueError) as e:
                    raise ValueError(f"{path}:{n}: not a request-stream line: {e}") from None
    return out


def _episodes_in_order(stream: Sequence[StreamRequest]) -> list[str]:
    seen: dict[str, None] = {}
    for r in stream:
        seen.setdefault(r.episode, None)
    return list(seen)


def lockstep_requests(stream: Sequence[StreamRequest], concurrency: int, group_size: int = 1,
                      draw_pool: int | None = None, draw_seed: int = 0) -> list[sim.Request]:
    """The run's requests rearranged for N episodes in lockstep: group g (episodes gN..gN+N-1, in order of
    their first request) runs its steps after every step of group g-1.

    What a batch repeats (each repeat a copy `<episode>#<k>` replaying the recorded episode; copies are
    identical, so they share more than independently sampled rollouts of one game would: an upper bound):
    - `group_size` G > 1: GRPO-style (SkillRL's verl trainer samples G rollouts of each game together):
      every game enters its group G times, and a group holds max(1, N // G) games (N episodes in all);
    - `draw_pool` P: each of the run's E episode slots draws its game at random (seed `draw_seed`) from a pool
      of P games with replacement, as ALFWorld's environments pick a game per environment; the d distinct
      games drawn are played by the run's first d episodes, a game drawn k times by k copies."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if group_size < 1:
        raise ValueError(f"kvcache.group_size must be >= 1, got {group_size}")
    if draw_pool is not None and draw_pool < 1:
        raise ValueError(f"kvcache.draw_pool must be >= 1, got {draw_pool}")
    if draw_pool is not None and group_size > 1:
        raise ValueError("kvcache.group_size and kvcache.draw_pool are two models of what a batch repeats; set one")
    by_ep: dict[str, list[StreamRequest]] = {}
    for r in stream:
        by_ep.setdefault(r.episode, []).append(r)
    eps = _episodes_in_order(stream)
    if draw_pool is not None:
        draws = np.random.default_rng(draw_seed).integers(0, draw_pool, size=len(eps))
        game_of: dict[int, str] = {}
        slots, copies = [], {}
        for x in draws.tolist():
            e = game_of.setdefault(x, eps[len(game_of)])
            k = copies[e] = copies.get(e, -1) + 1
            slots.append((e, f"{e}#{k}"))
        per_group = concurrency
    else:
        slots = [(e, f"{e}#{k}" if group_size > 1 else e) for e in eps for k in range(group_size)]
        per_group = max(1, concurrency // group_size) * group_size if group_size > 1 else concurrency
    out, offset = [], 0
    for g in range(0, len(slots), per_group):
        group = slots[g:g + per_group]
        longest = max(len(by_ep[e]) for e, _ in group)
        for step in range(longest):
            for e, name in group:
                if step < len(by_ep[e]):
                    req = _request(by_ep[e][step], offset + step)
                    out.append(req if name == e else dataclasses.replace(req, episode=name))
        offset += longest
    return out


def _request(r: StreamRequest, step: int) -> sim.Request:
    if not r.token_ids:
        raise ValueError(f"episode {r.episode!r} step {r.step}: no prompt token ids recorded")
    resp = np.asarray(r.response_token_ids, dtype=np.int64) if r.response_token_ids else None
    return sim.Request(r.episode, step, np.asarray(r.token_ids, dtype=np.int64), r.completion_tokens, resp,
                       stopped_at_max_tokens=r.finish_reason == "length")


@dataclass
class SimRow:
    policy: str
    capacity_tokens: int
    concurrency: int
    requests: int
    prompt_tokens: int
    cached_tokens: int
    reuse_ratio: float
    recomputed_tokens: int
    preemptions: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    preempted_queries: int = 0  # 0.33.0 counts lookups of preempted requests apart (0 under 0.11.0)
    preempted_hits: int = 0


@dataclass
class StepRow:
    policy: str
    capacity_tokens: int
    concurrency: int
    step: int  # the episode's own step
    requests: int
    prompt_tokens: int
    cached_tokens: int


def simulate_settings(stream: Sequence[StreamRequest], settings: Iterable[Setting], block_size: int = 16,
                      max_num_seqs: int = sim.DEFAULT_MAX_NUM_SEQS,
                      max_batched_tokens: int = sim.DEFAULT_MAX_BATCHED_TOKENS,
                      group_size: int = 1, draw_pool: int | None = None,
                      draw_seed: int = 0, vllm_version: str = sim.VLLM_VERSION) -> tuple[list[SimRow], list[StepRow]]:
    rows, steps = [], []
    settings = list(settings)
    # settings done of N on the console: every (policy, capacity, concurrency) replays the whole stream
    with Progress(len(settings), f"simulated settings (vLLM {vllm_version})") as progress:
        for s in settings:
            n = min(s.concurrency, len(_episodes_in_order(stream)) * group_size)
            reqs = lockstep_requests(stream, n, group_size, draw_pool, draw_seed)
            cfg = sim.CacheConfig(capacity_tokens=s.capacity_tokens, block_size=block_size, policy=s.policy,
                                  max_num_seqs=max_num_seqs, max_batched_tokens=max_batched_tokens,
                                  vllm_version=vllm_version)
            try:
                summary, results = sim.simulate(reqs, cfg)
            except ValueError as e:
                raise ValueError(f"kvcache.capacity_tokens {s.capacity_tokens}: {e}") from None
            rows.append(SimRow(s.policy, s.capacity_tokens, s.concurrency, **asdict(summary)))
            # Per episode step (not lockstep round): the seminar's "reuse per step". An episode's results come
            # in its step order, so its i-th result is its step i.
            agg: dict[int, list[int]] = {}
            counters: dict[str, int] = {}
            for res in results:
                i = counters.get(res.episode, 0)
                counters[res.episode] = i + 1
                a = agg.setdefault(i, [0, 0, 0])
                a[0] += 1
                a[1] += res.prompt_tokens
                a[2] += res.cached_tokens
            steps += [StepRow(s.policy, s.capacity_tokens, s.concurrency, k, *v) for k, v in sorted(agg.items())]
            progress.update()
    return rows, steps


def version_comparison(stream: Sequence[StreamRequest], kv: KVConfig) -> list[dict]:
    """Every simulated setting of one run under each vLLM version the simulator follows, side by side: what
    moves when a user runs `pip install vllm` (0.33.0) instead of the seminar's 0.11.0."""
    by_version = {}
    for v in sim.VLLM_VERSIONS:
        rows, _ = simulate_settings(stream, kv.settings(), kv.block_size, kv.max_num_seqs, kv.max_num_batched_tokens,
                                    kv.group_size, kv.draw_pool, kv.task_seed, v)
        by_version[v] = rows
    old, new = (by_version[v] for v in sim.VLLM_VERSIONS)
    out = []
    for a, b in zip(old, new):
        row = dict(policy=a.policy, capacity_tokens=a.capacity_tokens, concurrency=a.concurrency, requests=a.requests,
                   prompt_tokens=a.prompt_tokens)
        for key in ("reuse_ratio", "cached_tokens", "preemptions", "recomputed_tokens", "prefix_cache_queries",
                    "prefix_cache_hits"):
            row[f"{key}_0.11.0"], row[f"{key}_0.33.0"] = getattr(a, key), getattr(b, key)
        row["reuse_ratio_difference"] = b.reuse_ratio - a.reuse_ratio
        row["preemptions_difference"] = b.preemptions - a.preemptions
        out.append(row)
    return out


@dataclass
class LoadRow:
    step: int
    running: int  # episodes that sent a request at this step
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int  # what the KV cache must hold for this step: prompts + responses


def step_load(stream: Sequence[StreamRequest]) -> list[LoadRow]:
    agg: dict[int, list[int]] = {}
    for r in stream:
        a = agg.setdefault(r.step, [0, 0, 0])
        a[0] += 1
        a[1] += len(r.token_ids)
        a[2] += r.completion_tokens
    return [LoadRow(k, n, p, c, p + c) for k, (n, p, c) in sorted(agg.items())]


@dataclass
class BreakRow:
    """Where one request's prompt stops matching its episode's previous prompt (seed 001, 2-1)."""

    episode: str
    step: int
    prompt_tokens: int
    shared_tokens: int  # leading tokens equal to the previous step's prompt
    break_fraction: float  # shared_tokens / prompt_tokens
    ceiling_tokens: int  # what a cache can give: whole blocks, never the last token
    break_text: str  # the few tokens from the break on, decoded (empty without a decoder)


def break_points(stream: Sequence[StreamRequest], block_size: int = 16, decode=None) -> list[BreakRow]:
    """For every request after an episode's first: how many leading tokens it shares with the same episode's
    previous request, and the block-aligned part of that a prefix cache can serve. The seminar finds the
    original format breaking at the step number after "## Current Progress", at 0.637-0.643 of the prompt."""
    by_ep: dict[str, list[StreamRequest]] = {}
    for r in stream:
        by_ep.setdefault(r.episode, []).append(r)
    out = []
    for ep, reqs in by_ep.items():
        reqs = sorted(reqs, key=lambda r: r.step)
        for prev, cur in zip(reqs, reqs[1:]):
            n = len(cur.token_ids)
            shared = sim.common_prefix(np.asarray(prev.token_ids), np.asarray(cur.token_ids))
            ceiling = min(shared, n - 1) // block_size * block_size
            text = decode(cur.token_ids[shared:shared + 4]) if decode and shared < n else ""
            out.append(BreakRow(ep, cur.step, n, shared, shared / max(n, 1), ceiling, text))
    return out


def new_locations(steps) -> "object":
    """Per episode of a run's steps table (store.Step rows): how many distinct places its `go to` commands
    reach (seed 001, 2-2: 9.6 per episode in the original order, 3.7 with the `go to` list split off), and how
    many `go to` commands it sent."""
    rows = []
    for ep, g in steps.sort_values("step").groupby("episode_id", sort=False):
        places, gotos = set(), 0
        for action, args in zip(g.action, g.arguments):
            cmd = json.loads(args or "[]")
            cmd = str(cmd[0]) if action == "act" and cmd else ""
            if cmd.startswith("go to "):
                gotos += 1
                places.add(cmd[len("go to "):].strip())
        rows.append(dict(episode_id=ep, steps=len(g), go_to_commands=gotos, new_locations=len(places)))
    return pd.DataFrame(rows, columns=["episode_id", "steps", "go_to_commands", "new_locations"])


@dataclass
class ServerRow:
    episode: str
    step: int
    started_at: float
    prompt_tokens: int
    server_cached_tokens: int | None  # None: no server count (a replay)
    sim_llamacpp_cached_tokens: int
    sim_vllm_cached_tokens: int


def server_comparison(stream: Sequence[StreamRequest], slots: int = 1, block_size: int = 16) -> list[ServerRow]:
    """Each request in arrival order through llama.cpp's slot model (`slots` slots) and through vLLM's
    block cache with room for everything (sequential: one request at a time), next to the server's count."""
    ordered = sorted(stream, key=lambda r: r.started_at)
    reqs = [_request(r, i) for i, r in enumerate(ordered)]
    _, lcpp = sim.simulate_llamacpp(reqs, sim.LlamaCppConfig(slots=slots))
    total = sum(len(r.token_ids) + len(r.response_token_ids) + r.completion_tokens for r in ordered)
    cap = max(block_size, -(-total // block_size) * block_size)
    _, vl = sim.simulate(reqs, sim.CacheConfig(capacity_tokens=cap, block_size=block_size, schedule="sequential"))
    return [ServerRow(r.episode, r.step, r.started_at, len(r.token_ids), r.server_cached_tokens, a.cached_tokens,
                      b.cached_tokens) for r, a, b in zip(ordered, lcpp, vl)]


@dataclass
class CounterRow:
    """The server's own counters for a run (vLLM's /metrics; None elsewhere) beside the simulator's at the
    headline setting (first policy, largest capacity and concurrency)."""

    backend: str
    server_prefix_cache_queries: float | None
    server_prefix_cache_hits: float | None
    server_preemptions: float | None
    sim_policy: str
    sim_capacity_tokens: int
    sim_concurrency: int
    sim_prefix_cache_queries: int
    sim_prefix_cache_hits: int
    sim_preemptions: int


def counter_row(counters: dict, rows: Sequence[SimRow], kv: KVConfig) -> CounterRow:
    head = next(r for r in rows if r.policy == kv.policies[0] and r.capacity_tokens == max(kv.capacity_tokens)
                and r.concurrency == max(kv.concurrency))
    d = counters.get("delta") or {}
    return CounterRow(counters.get("backend", ""), d.get("prefix_cache_queries"), d.get("prefix_cache_hits"),
                      d.get("preemptions"), head.policy, head.capacity_tokens, head.concurrency,
                      head.prefix_cache_queries, head.prefix_cache_hits, head.preemptions)



# -- tables ---------------------------------------------------------------------------------------------


def arrow(df):
    return pa.Table.from_pandas(df, preserve_index=False)


def overload(load, capacities: Sequence[int]):
    """Per format and capacity: the first step at which the per-step load (prompts + responses of all
    running episodes, mean over seeds) exceeds the capacity, and the peak load (seed 001, 2-3)."""
    rows = []
    for fmt, g in load.groupby("format", sort=False):
        g = g.sort_values("step")
        peak = g.loc[g.total_tokens.idxmax()]
        for cap in capacities:
            over = g[g.total_tokens > cap]
            rows.append(dict(format=fmt, capacity_tokens=cap, first_step_over=int(over.step.iloc[0]) if len(over) else None,
                             steps_over=len(over), steps=len(g), peak_tokens=float(peak.total_tokens),
                             peak_step=int(peak.step), peak_over_capacity=float(peak.total_tokens) / cap))
    out = pd.DataFrame(rows)
    out["first_step_over"] = out.first_step_over.astype("Int64")  # empty when the load never exceeds it
    return out


# backends whose server reports each request's cached tokens (vLLM's and OpenAI's usage.prompt_tokens_details,
# llama.cpp's timings): their runs are measured; "replay" has no server and is simulated only
MEASURED_BACKENDS = ("vllm", "embedded", "openai")


def headline(reuse, server, counters, backend: str, policies: Sequence[str]):
    """The study's headline, measured first (seed 001, 2-0: reuse is what the server reports per request): per
    format, the server's cached tokens over its prompt tokens and, on vLLM, its /metrics prefix-cache hit rate;
    beside them the simulator's prediction for the same requests in arrival order (`server` table: llama.cpp's
    slot model on the embedded backend, vLLM's block cache elsewhere) and the difference, then the simulated
    lockstep setting of every policy (largest capacity and concurrency). A replay has no server: its headline
    is the simulator's, and `source` says so."""
    measured = backend in MEASURED_BACKENDS
    sim_col = "sim_llamacpp_cached_tokens" if backend == "embedded" else "sim_vllm_cached_tokens"
    g = server.groupby("format", sort=False)[["prompt_tokens", "server_cached_tokens", sim_col]].sum()
    out = pd.DataFrame({"format": g.index, "backend": backend,
                        "source": "measured: the server's cached tokens" if measured
                        else "simulated only: no server served these requests (kvcache.replay)"})
    out["prompt_tokens"] = g.prompt_tokens.values
    predicted = g[sim_col].values / g.prompt_tokens.clip(lower=1).values
    nan = float("nan")
    out["measured_reuse_ratio"] = g.server_cached_tokens.values / g.prompt_tokens.clip(lower=1).values if measured else nan
    out["predicted_reuse_ratio"] = predicted
    out["difference"] = out.measured_reuse_ratio - out.predicted_reuse_ratio
    rate = pd.Series(nan, index=g.index)
    if counters is not None and len(counters):
        c = counters.copy()
        for col in ("server_prefix_cache_queries", "server_prefix_cache_hits"):
            c[col] = pd.to_numeric(c[col], errors="coerce")
        cg = c.groupby("format", sort=False)[["server_prefix_cache_queries", "server_prefix_cache_hits"]].sum(min_count=1)
        rate = (cg.server_prefix_cache_hits / cg.server_prefix_cache_queries.where(cg.server_prefix_cache_queries > 0)
                ).reindex(g.index)
    out["server_prefix_cache_hit_rate"] = rate.values
    head = reuse[(reuse.capacity_tokens == reuse.capacity_tokens.max()) & (reuse.concurrency == reuse.concurrency.max())]
    for pol in policies:
        r = head[head.policy == pol].set_index("format").reuse_ratio
        out[f"simulated_{pol}_reuse_ratio"] = out.format.map(r).values
    out.insert(3, "reuse_ratio", out.measured_reuse_ratio if measured else out[f"simulated_{policies[0]}_reuse_ratio"])
    return out


def require_server_counts(server, backend: str) -> None:
    """A served run whose requests lack the server's cached-token count stops here, before any table or figure
    (an older stream, or one recorded by hand): unknown must not be summed as 0."""
    if backend in MEASURED_BACKENDS and server.server_cached_tokens.isna().any():
        bad = server[server.server_cached_tokens.isna()]
        runs = ", ".join(sorted({f"{f}/seed{s}" for f, s in zip(bad.format, bad.seed)}))
        raise CachedTokensUnreported(unreported_message(backend, f"that served run(s) {runs}")
                                     + f" ({len(bad)} of {len(server)} requests without a count)")


def simulated_source(vllm_version: str) -> str:
    return f"simulated: vLLM {vllm_version} scheduler, lockstep"


def measured_source(backend: str) -> str:
    return f"measured: the {backend} server's cached tokens"


def measured_steps(server, backend: str):
    """Reuse per episode step from the server's per-request counts (every run of a format pooled): the
    seminar's per-step reuse as the server reported it, in the steps table's columns (policy "server"), with
    the simulator's prediction for the same requests (the server table's: llama.cpp slots on the embedded
    backend, vLLM blocks elsewhere) and the difference."""
    sim_col = "sim_llamacpp_cached_tokens" if backend == "embedded" else "sim_vllm_cached_tokens"
    st = server.groupby(["format", "step"], sort=False).agg(
        requests=("prompt_tokens", "size"), prompt_tokens=("prompt_tokens", "sum"),
        cached_tokens=("server_cached_tokens", "sum"), sim=(sim_col, "sum")).reset_index().sort_values(
        ["format", "step"], kind="stable")
    st.insert(1, "policy", "server")
    st.insert(2, "capacity_tokens", None)
    st.insert(3, "concurrency", None)
    st["reuse_ratio"] = st.cached_tokens / st.prompt_tokens.clip(lower=1)
    st["simulated_same_requests_reuse_ratio"] = st.pop("sim") / st.prompt_tokens.clip(lower=1)
    st["measured_minus_simulated"] = st.reuse_ratio - st.simulated_same_requests_reuse_ratio
    st["source"] = measured_source(backend)
    return st


def success_differences(episodes, reference: str | None = None):
    """Per format, its success minus the reference format's (default: the first format run, `kvcache.formats[0]`)
    over the episodes both played (the same game and seed), with a 95 % Student t interval over those pairs
    (`scaffold.statistics.mean_interval`, whose coverage on differences of binary outcomes is tested; NaN below
    4 pairs, and where every pair differs alike, since an interval of no width claims more than the data hold)."""
    ep = episodes.rename(columns={"variant": "format"})
    wide = ep.assign(success=ep.success.astype(float)).pivot_table(
        index=["seed", "task_id"], columns="format", values="success", aggfunc="mean", sort=False)
    reference = reference or str(ep.format.iloc[0])
    rows = {}
    for fmt in wide.columns:
        pair = wide[[fmt, reference]].dropna()
        diff = (pair[fmt] - pair[reference]).to_numpy()
        lo = hi = float("nan")
        label = interval_label(len(diff), "t").replace("queries", "pairs")
        if fmt == reference:
            label = "reference format"
        elif len(diff) > 1 and np.ptp(diff) == 0:
            label = f"no interval: all {len(diff)} pairs differ by the same"
        else:
            lo, hi = mean_interval(diff, interval="t")
        rows[fmt] = {"reference_format": reference, "paired_episodes": len(diff),
                     "success_difference": float(diff.mean()) if len(diff) else float("nan"),
                     "difference_ci_low": lo, "difference_ci_high": hi, "difference_interval": label}
    return pd.DataFrame.from_dict(rows, orient="index")


def tables(*, summary, steps, load, server, episodes, backend: str, capacities: Sequence[int] = (),
           counters=None, policies: Sequence[str] = ("retain", "flush"), vllm_version: str = sim.VLLM_VERSION,
           reference_format: str | None = None) -> dict:
    """The study's CSV tables (pandas DataFrames) from every run's simulation outputs and episodes. On a served
    run, what the server reports comes first: per-step reuse (`steps`, policy "server") and prefix misses
    (`server`) from its counts, beside the simulator's; each row's `source` says which."""
    require_server_counts(server, backend)
    measured = backend in MEASURED_BACKENDS
    setting = ["format", "policy", "capacity_tokens", "concurrency"]
    s = summary.assign(run_reuse=summary.cached_tokens / summary.prompt_tokens.clip(lower=1),
                       prefix_miss=summary.prompt_tokens - summary.cached_tokens)
    reuse = s.groupby(setting, sort=False).agg(
        seeds=("seed", "nunique"), requests=("requests", "sum"), prompt_tokens=("prompt_tokens", "sum"),
        cached_tokens=("cached_tokens", "sum"), reuse_ratio_sd=("run_reuse", "std"),
        recomputed_tokens_per_run=("recomputed_tokens", "mean"), prefix_miss_tokens_per_run=("prefix_miss", "mean"),
        preemptions_per_run=("preemptions", "mean"), preemptions_max=("preemptions", "max")).reset_index()
    reuse.insert(len(setting) + 4, "reuse_ratio", reuse.cached_tokens / reuse.prompt_tokens.clip(lower=1))
    reuse["reuse_ratio_sd"] = reuse.reuse_ratio_sd.fillna(0.0)
    # recomputed = prompt tokens missed at a request's first scheduling + what preemption made it compute again
    reuse.insert(reuse.columns.get_loc("prefix_miss_tokens_per_run") + 1, "preemption_recompute_tokens_per_run",
                 reuse.recomputed_tokens_per_run - reuse.prefix_miss_tokens_per_run)
    reuse["source"] = simulated_source(vllm_version)

    st = steps.groupby(setting + ["step"], sort=False)[["requests", "prompt_tokens", "cached_tokens"]].sum().reset_index()
    st["reuse_ratio"] = st.cached_tokens / st.prompt_tokens.clip(lower=1)
    st["source"] = simulated_source(vllm_version)
    if measured:  # the server's per-step reuse first, the simulated settings after
        st = pd.concat([measured_steps(server, backend), st], ignore_index=True)

    ld = load.groupby(["format", "step"], sort=False).agg(
        seeds=("seed", "nunique"), running=("running", "mean"), prompt_tokens=("prompt_tokens", "mean"),
        completion_tokens=("completion_tokens", "mean"), total_tokens=("total_tokens", "mean"),
        total_tokens_max=("total_tokens", "max")).reset_index()

    ep = episodes.rename(columns={"variant": "format"})
    per_seed = ep.groupby(["format", "seed"], sort=False).agg(
        episodes=("success", "size"), success_rate=("success", "mean"), steps_mean=("n_steps", "mean")).reset_index()
    per_format = per_seed.groupby("format", sort=False).success_rate.agg(["mean", "std"]).fillna(0.0)
    success = per_seed.join(per_format.rename(columns={"mean": "success_mean", "std": "success_sd"}), on="format")
    success = success.join(success_differences(ep, reference_format), on="format")

    sim_col = "sim_llamacpp_cached_tokens" if backend == "embedded" else "sim_vllm_cached_tokens"
    sv = server.assign(match=server.server_cached_tokens == server[sim_col])
    srv = sv.groupby(["format", "seed"], sort=False).agg(
        requests=("prompt_tokens", "size"), prompt_tokens=("prompt_tokens", "sum"),
        server_cached_tokens=("server_cached_tokens", "sum"),
        sim_llamacpp_cached_tokens=("sim_llamacpp_cached_tokens", "sum"),
        sim_vllm_cached_tokens=("sim_vllm_cached_tokens", "sum"), requests_matching=("match", "sum")).reset_index()
    srv.insert(2, "backend", backend)
    srv["server_reuse_ratio"] = srv.server_cached_tokens / srv.prompt_tokens.clip(lower=1)
    srv["sim_reuse_ratio"] = srv[sim_col] / srv.prompt_tokens.clip(lower=1)
    # the prompt tokens the server computed because its cache missed them (measured prefix misses)
    srv["server_prefix_miss_tokens"] = srv.prompt_tokens - srv.server_cached_tokens
    srv["sim_prefix_miss_tokens"] = srv.prompt_tokens - srv[sim_col]
    if not measured:  # no server: its columns are unknown, not 0
        srv[["server_cached_tokens", "server_reuse_ratio", "server_prefix_miss_tokens"]] = float("nan")
        srv["requests_matching"] = float("nan")
    srv["source"] = (f"{measured_source(backend)}; sim: {'llama.cpp slots' if backend == 'embedded' else 'vLLM blocks'}"
                     " in arrival order" if measured else "simulated only: no server (kvcache.replay)")
    out = {"reuse": reuse, "steps": st, "load": ld, "success": success, "server": srv,
           "overload": overload(ld, capacities)}
    if counters is not None:
        c = counters.copy()
        for col in ("server_prefix_cache_queries", "server_prefix_cache_hits", "server_preemptions"):
            c[col] = pd.to_numeric(c[col], errors="coerce")  # empty where the backend has no counters
        c["server_prefix_cache_hit_rate"] = c.server_prefix_cache_hits / c.server_prefix_cache_queries.where(
            c.server_prefix_cache_queries > 0)
        c["sim_prefix_cache_hit_rate"] = c.sim_prefix_cache_hits / c.sim_prefix_cache_queries.clip(lower=1)
        out["counters"] = c
    out["headline"] = headline(reuse, server, counters, backend, policies)
    return out


def model_comparison(reuse, success, overload, kv: KVConfig, headline=None):
    """One row per (model, format) from the models' tables (each with its `model` column): first, on a served
    run, the reuse each model's server measured (`headline`), the simulator's prediction for the same requests
    and their difference; then reuse with the cache retained and flushed at the headline setting (largest
    capacity and concurrency, simulated), preemptions and the first step over capacity at the smallest
    capacity, and success (seed 001, 2-3 compares models). `source` says which numbers are measured."""
    cap, small, n = max(kv.capacity_tokens), min(kv.capacity_tokens), max(kv.concurrency)
    keys = ["model", "format"]
    head = reuse[(reuse.capacity_tokens == cap) & (reuse.concurrency == n)]
    out = head.pivot_table(index=keys, columns="policy", values="reuse_ratio", sort=False)
    out.columns = [f"reuse_ratio_{p}" for p in out.columns]
    if headline is not None:
        h = headline.set_index(keys)
        out.insert(0, "backend", h.backend.reindex(out.index))
        out.insert(1, "measured_reuse_ratio", h.measured_reuse_ratio.reindex(out.index))
        out.insert(2, "simulated_same_requests_reuse_ratio", h.predicted_reuse_ratio.reindex(out.index))
        out.insert(3, "measured_minus_simulated", out.measured_reuse_ratio - out.simulated_same_requests_reuse_ratio)
        out.insert(0, "source", [f"measured on the {b} server; reuse_ratio_<policy>, preemptions, recompute: "
                                 f"simulated (vLLM {kv.vllm_version})" if pd.notna(m) else
                                 f"simulated only (vLLM {kv.vllm_version}): no server"
                                 for b, m in zip(out.backend, out.measured_reuse_ratio)])
    per_req = head.groupby(keys, sort=False).agg(requests=("requests", "max"), prompt_tokens=("prompt_tokens", "max"))
    out = out.join(per_req.assign(prompt_tokens_per_request=per_req.prompt_tokens / per_req.requests.clip(lower=1))
                   [["requests", "prompt_tokens_per_request"]])
    tight = reuse[(reuse.capacity_tokens == small) & (reuse.concurrency == n) & (reuse.policy == kv.policies[0])]
    split = [c for c in ("prefix_miss_tokens_per_run", "preemption_recompute_tokens_per_run") if c in tight]
    out = out.join(tight.set_index(keys)[["preemptions_per_run", "recomputed_tokens_per_run", *split]]
                   .add_suffix(f"_at_{small}"))
    over = overload[overload.capacity_tokens == small].set_index(keys)[["first_step_over", "peak_tokens"]]
    out = out.join(over.rename(columns={"first_step_over": f"first_step_over_{small}"}))
    succ = success.groupby(keys, sort=False)[["success_mean", "success_sd"]].first()
    return out.join(succ).reset_index()
