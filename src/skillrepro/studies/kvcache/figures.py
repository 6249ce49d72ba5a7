"""The seminar's figures (seed 001, 2-1..2-3) from the study's tables; each function writes one PNG.

`FIGURES` maps an output name of the `kvcache_figures` rule to its function(tables, kv, path), where
`tables` holds the CSVs as DataFrames (headline, reuse, prefix, steps, load, success, server, overload).
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _save(fig, path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _largest(reuse, kv):
    """The rows of the largest capacity and concurrency: the headline setting."""
    return reuse[(reuse.capacity_tokens == max(kv.capacity_tokens)) & (reuse.concurrency == max(kv.concurrency))]


def _grouped_bars(ax, labels, series: dict, ylabel: str) -> None:
    n = max(len(series), 1)
    width = 0.8 / n
    for i, (name, values) in enumerate(series.items()):
        ax.bar([x + (i - (n - 1) / 2) * width for x in range(len(labels))], values, width, label=name)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)


def reuse(tables, kv, path) -> None:
    """Reuse ratio per format (2-1), measured first: on a served run the server's reuse, the simulator's
    prediction for the same requests beside it, then every simulated policy; a replay's bars are all simulated
    and the title says so."""
    h = tables["headline"]
    fmts = list(h.format)
    series = {}
    measured = h.measured_reuse_ratio.notna().any()
    if measured:
        series["measured (server)"] = list(h.measured_reuse_ratio)
        series["simulated, same requests"] = list(h.predicted_reuse_ratio)
    for p in kv.policies:
        series[f"simulated {p}, {max(kv.concurrency)} in lockstep"] = list(h[f"simulated_{p}_reuse_ratio"])
    fig, ax = plt.subplots(figsize=(8, 4))
    _grouped_bars(ax, fmts, series, "reuse ratio (cached / prompt tokens)")
    ax.set_ylim(0, 1)
    where = "measured by the server, simulator beside" if measured else "SIMULATED ONLY (replay, no server)"
    ax.set_title(f"Prefix-cache reuse: {where}; capacity {max(kv.capacity_tokens):,} tokens", fontsize=10)
    _save(fig, path)


def prefix(tables, kv, path) -> None:
    """Shared prefix of two episodes' prompts, same vs different category (2-2)."""
    t = tables["prefix"]
    fmts = list(dict.fromkeys(t.format))
    fig, ax = plt.subplots(figsize=(8, 4))
    _grouped_bars(ax, fmts, {rel: [t[(t.format == f) & (t.relation == rel)].shared_tokens_mean.sum() for f in fmts]
                             for rel in ("same_category", "different_category")}, "shared prefix (tokens)")
    ax.set_title(f"Tokens two episodes' step-{kv.prefix_step} prompts share from the start")
    _save(fig, path)


def load(tables, kv, path) -> None:
    """Prompt+response tokens of all running episodes per step against the KV capacity (2-3)."""
    t = tables["load"]
    fig, ax = plt.subplots(figsize=(8, 4))
    over = tables["overload"].dropna(subset=["first_step_over"])
    for i, (f, g) in enumerate(t.groupby("format", sort=False)):
        ax.plot(g.step, g.total_tokens, marker=".", label=f, color=f"C{i}")
        for step in over[over.format == f].first_step_over:  # the first step each capacity is exceeded
            ax.plot(step, g[g.step == step].total_tokens.iloc[0], "x", markersize=10, color=f"C{i}")
    for c in kv.capacity_tokens:
        ax.axhline(c, color="red", linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel("tokens of running episodes")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    ax.set_title("Per-step KV demand (all episodes at once) vs capacity (red); x: first step over it")
    _save(fig, path)


def reuse_steps(tables, kv, path) -> None:
    """Reuse ratio per step, retain (2-3)."""
    t = tables["steps"]
    t = t[(t.policy == kv.policies[0]) & (t.capacity_tokens == max(kv.capacity_tokens))
          & (t.concurrency == max(kv.concurrency))]
    fig, ax = plt.subplots(figsize=(8, 4))
    for f, g in t.groupby("format", sort=False):
        ax.plot(g.step, g.reuse_ratio, marker=".", label=f)
    ax.set_ylim(0, 1)
    ax.set_xlabel("step")
    ax.set_ylabel("reuse ratio")
    ax.legend(fontsize=7)
    ax.set_title(f"Reuse per step ({kv.policies[0]})")
    _save(fig, path)


def _per_setting(tables, kv, path, column: str, ylabel: str, title: str) -> None:
    t = tables["reuse"]
    t = t[t.policy == kv.policies[0]]
    fmts = list(dict.fromkeys(t.format))
    series = {f"cap {c:,} x{n}": [t[(t.format == f) & (t.capacity_tokens == c) & (t.concurrency == n)][column].sum()
                                  for f in fmts]
              for c in kv.capacity_tokens for n in kv.concurrency}
    fig, ax = plt.subplots(figsize=(8, 4))
    _grouped_bars(ax, fmts, series, ylabel)
    ax.set_title(title)
    _save(fig, path)


def recomputed(tables, kv, path) -> None:
    _per_setting(tables, kv, path, "recomputed_tokens_per_run", "recomputed tokens per run",
                 f"Prompt tokens computed per run ({kv.policies[0]})")


def preemptions(tables, kv, path) -> None:
    _per_setting(tables, kv, path, "preemptions_per_run", "preemptions per run", f"Preemptions ({kv.policies[0]})")


def success(tables, kv, path) -> None:
    """Success per format: each seed (open circles) and their mean (filled)."""
    t = tables["success"]
    fmts = list(dict.fromkeys(t.format))
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, f in enumerate(fmts):
        g = t[t.format == f]
        ax.scatter([g.success_rate.values * 100], [[i] * len(g)], facecolors="none", edgecolors="C0")
        ax.errorbar(g.success_mean.iloc[0] * 100, i, xerr=g.success_sd.iloc[0] * 100, fmt="o", color="C0")
    ax.set_yticks(range(len(fmts)))
    ax.set_yticklabels(fmts, fontsize=8)
    ax.set_xlim(-5, 105)
    ax.set_xlabel("success (%)")
    ax.set_title("Success per format over seeds")
    _save(fig, path)


def server(tables, kv, path) -> None:
    """Simulated vs server-reported cached tokens, per format (summed over seeds)."""
    t = tables["server"].groupby("format", sort=False)[
        ["server_cached_tokens", "sim_llamacpp_cached_tokens", "sim_vllm_cached_tokens"]].sum()
    fig, ax = plt.subplots(figsize=(8, 4))
    _grouped_bars(ax, list(t.index), {"server": t.server_cached_tokens, "sim: llama.cpp slots": t.sim_llamacpp_cached_tokens,
                                      "sim: vLLM blocks": t.sim_vllm_cached_tokens}, "cached tokens")
    ax.set_title("Cached tokens: server-reported vs simulated")
    _save(fig, path)


FIGURES = {"reuse": reuse, "prefix": prefix, "load": load, "reuse_steps": reuse_steps, "recomputed": recomputed,
           "preemptions": preemptions, "success": success, "server": server}


def models(table, kv, path) -> None:
    """Per format, each model's reuse (cache retained, headline setting) and success (seed 001, 2-3)."""
    fmts = list(dict.fromkeys(table.format))
    names = list(dict.fromkeys(table.model))
    col = f"reuse_ratio_{kv.policies[0]}"
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))

    def series(column):
        return {m: [table[(table.model == m) & (table.format == f)][column].sum() for f in fmts] for m in names}

    _grouped_bars(a, fmts, series(col), f"reuse ratio ({kv.policies[0]})")
    a.set_ylim(0, 1)
    a.set_title(f"Reuse per model, capacity {max(kv.capacity_tokens):,} tokens")
    _grouped_bars(b, fmts, series("success_mean"), "success (mean over seeds)")
    b.set_ylim(0, 1)
    b.set_title("Success per model")
    _save(fig, path)


def blend(table, summary, path) -> None:
    """Non-prefix reuse (2-4): K rel per chunk and context, K rel per layer, samples whose action moved."""
    chunks = list(dict.fromkeys(summary.chunk))
    contexts = [c for c in dict.fromkeys(summary.context) if c != "noise"]  # noise: the numerical floor

    def cell(column):
        s = summary.set_index(["chunk", "context"])[column]
        return {c: [float(s.get((ch, c), 0.0)) for ch in chunks] for c in contexts}

    fig, (a, b, c) = plt.subplots(1, 3, figsize=(15, 4))
    _grouped_bars(a, chunks, cell("k_rel_median"), "K rel (median over samples)")
    a.set_title("Reused K vs recomputed K")
    for ctx, g in table[table.context != "noise"].groupby("context", sort=False):
        layers = [list(map(float, x.split(","))) for x in g.k_rel_layers]
        b.plot(range(len(layers[0])), [sum(col) / len(col) for col in zip(*layers)], marker=".", label=ctx)
    b.set_xlabel("layer")
    b.set_ylabel("K rel (mean over chunks and samples)")
    b.legend(fontsize=8)
    b.set_title("K rel per layer")
    _grouped_bars(c, chunks, cell("large_shifts"), f"samples with |shift| > {summary.threshold.iloc[0]} nats")
    c.set_title("Action log-prob moved a lot")
    _save(fig, path)
