"""The seminar's figures (seed 001, 2-1..2-3) from the study's tables; each function writes one PNG.

`FIGURES` maps an output name of the `kvcache_figures` rule to its function(tables, kv, path), where
`tables` holds the CSVs as DataFrames (headline, reuse, prefix, steps, load, success, server, overload,
counters). On a served run each figure the seminar measured shows the server's numbers first and the
simulator's beside them, labelled; its title names the source.
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


def _served(tables) -> str | None:
    """The backend whose server measured this model's runs, or None for a replay (simulated only)."""
    h = tables["headline"]
    return str(h.backend.iloc[0]) if len(h) and h.measured_reuse_ratio.notna().any() else None


def reuse_steps(tables, kv, path) -> None:
    """Reuse ratio per episode step (2-3): on a served run the server's counts (solid), the simulator's
    headline setting beside (dashed, same colour); a replay's lines are the simulator's and the title says so."""
    t = tables["steps"]
    sim = t[(t.policy == kv.policies[0]) & (t.capacity_tokens == max(kv.capacity_tokens))
            & (t.concurrency == max(kv.concurrency))]
    served = _served(tables)
    measured = t[t.policy == "server"] if served else t.iloc[:0]
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, (f, g) in enumerate(sim.groupby("format", sort=False)):
        m = measured[measured.format == f]
        if len(m):
            ax.plot(m.step, m.reuse_ratio, marker=".", color=f"C{i}", label=f"{f}: measured ({served})")
        ax.plot(g.step, g.reuse_ratio, marker=".", color=f"C{i}", linestyle="--" if len(m) else "-",
                label=f"{f}: simulated")
    ax.set_ylim(0, 1)
    ax.set_xlabel("step")
    ax.set_ylabel("reuse ratio")
    ax.legend(fontsize=7)
    sim_name = f"simulated vLLM {kv.vllm_version}, {kv.policies[0]}, {max(kv.concurrency)} in lockstep"
    ax.set_title(f"Reuse per step: measured by the {served} server, {sim_name} dashed" if served
                 else f"Reuse per step: SIMULATED ONLY ({sim_name}; replay, no server)", fontsize=9)
    _save(fig, path)


def _settings(kv):
    return [(c, n) for c in kv.capacity_tokens for n in kv.concurrency]


def recomputed(tables, kv, path) -> None:
    """Prompt tokens computed per run, split into prefix misses (the cache had them not) and recompute after
    preemption: the server's measured misses first on a served run, then each simulated setting stacked."""
    t = tables["reuse"]
    t = t[t.policy == kv.policies[0]]
    fmts = list(dict.fromkeys(t.format))
    served = _served(tables)
    bars = []  # (label, misses per format, preemption recompute per format or None)
    if served:
        srv = tables["server"].groupby("format", sort=False).server_prefix_miss_tokens.mean()
        bars.append((f"measured ({served}): prefix misses", [float(srv.get(f, 0.0)) for f in fmts], None))
    for c, n in _settings(kv):
        row = [t[(t.format == f) & (t.capacity_tokens == c) & (t.concurrency == n)] for f in fmts]
        bars.append((f"sim cap {c:,} x{n}", [float(r.prefix_miss_tokens_per_run.sum()) for r in row],
                     [float(r.preemption_recompute_tokens_per_run.sum()) for r in row]))
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / max(len(bars), 1)
    for i, (label, miss, pre) in enumerate(bars):
        xs = [x + (i - (len(bars) - 1) / 2) * width for x in range(len(fmts))]
        ax.bar(xs, miss, width, label=label, color=f"C{i}")
        if pre is not None and any(pre):
            ax.bar(xs, pre, width, bottom=miss, color=f"C{i}", hatch="//", edgecolor="white",
                   label=f"{label}: after preemption")
    ax.set_xticks(range(len(fmts)))
    ax.set_xticklabels(fmts, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("prompt tokens computed per run")
    top = max([m + (p or 0) for _, miss, pre in bars for m, p in zip(miss, pre or [0] * len(miss))] or [1])
    ax.set_ylim(0, top * 1.35)  # room for the legend above the bars
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    where = f"measured by the {served} server beside" if served else "SIMULATED ONLY (replay, no server):"
    ax.set_title(f"Recomputed tokens per run, {where} vLLM {kv.vllm_version} simulated ({kv.policies[0]})\n"
                 "solid: prefix misses; hatched: recompute after preemption", fontsize=9)
    _save(fig, path)


def preemptions(tables, kv, path) -> None:
    """Preemptions per run: vLLM's own counter (its /metrics, per run) first where the server has one, then
    each simulated setting. llama.cpp has no such counter: its slots never preempt (a request waits)."""
    t = tables["reuse"]
    t = t[t.policy == kv.policies[0]]
    fmts = list(dict.fromkeys(t.format))
    series = {}
    served = _served(tables)
    c = tables.get("counters")
    if c is not None and len(c) and c.server_preemptions.notna().any():
        per = c.groupby("format", sort=False).server_preemptions.mean()
        series[f"measured ({served}, /metrics)"] = [float(per.get(f, float("nan"))) for f in fmts]
    for cap, n in _settings(kv):
        series[f"sim cap {cap:,} x{n}"] = [
            t[(t.format == f) & (t.capacity_tokens == cap) & (t.concurrency == n)].preemptions_per_run.sum() for f in fmts]
    fig, ax = plt.subplots(figsize=(8, 4))
    _grouped_bars(ax, fmts, series, "preemptions per run")
    peak = max([v for vals in series.values() for v in vals if v == v] or [0])
    ax.set_ylim(0, max(peak, 1) * 1.3)  # none at all reads as a floor at 0, not an axis around it
    if series and next(iter(series)).startswith("measured"):
        where = f"measured by the {served} server beside"
    elif served:
        where = f"the {served} server counts none (llama.cpp slots never preempt):"
    else:
        where = "SIMULATED ONLY (replay, no server):"
    ax.set_title(f"Preemptions, {where}\nvLLM {kv.vllm_version} simulated ({kv.policies[0]})", fontsize=9)
    _save(fig, path)


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
    """Simulated vs server-reported cached tokens, per format (summed over seeds); no server bar in a replay."""
    t = tables["server"].groupby("format", sort=False)[
        ["server_cached_tokens", "sim_llamacpp_cached_tokens", "sim_vllm_cached_tokens"]].sum(min_count=1)
    served = _served(tables)
    series = {f"measured ({served})": t.server_cached_tokens} if served else {}
    series |= {"sim: llama.cpp slots": t.sim_llamacpp_cached_tokens, "sim: vLLM blocks": t.sim_vllm_cached_tokens}
    fig, ax = plt.subplots(figsize=(8, 4))
    _grouped_bars(ax, list(t.index), series, "cached tokens")
    ax.set_title(f"Cached tokens: measured by the {served} server vs simulated, requests in arrival order" if served
                 else "Cached tokens: SIMULATED ONLY (replay, no server), requests in arrival order", fontsize=9)
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

    measured = "measured_reuse_ratio" in table and table.measured_reuse_ratio.notna().any()
    if measured:  # each model's server first, the simulator's headline setting beside
        reuse = {f"{m}: measured": v for m, v in series("measured_reuse_ratio").items()}
        reuse |= {f"{m}: simulated": v for m, v in series(col).items()}
    else:
        reuse = series(col)
    _grouped_bars(a, fmts, reuse, f"reuse ratio ({'measured, ' if measured else ''}{kv.policies[0]} simulated)")
    a.set_ylim(0, 1)
    a.set_title(f"Reuse per model: measured by each server, simulated vLLM {kv.vllm_version} beside" if measured
                else f"Reuse per model: SIMULATED ONLY (vLLM {kv.vllm_version}, capacity "
                     f"{max(kv.capacity_tokens):,} tokens)", fontsize=9)
    _grouped_bars(b, fmts, series("success_mean"), "success (mean over seeds)")
    b.set_ylim(0, 1)
    b.set_title("Success per model")
    _save(fig, path)


# segment -> (group, colour) for the prompt-example figure: skills blue, history orange (seminar 2-3's colours)
_SEGMENT_GROUPS = {"general": "skills", "category": "skills", "mistakes": "skills", "documents": "skills",
                   "core_document": "skills", "skill_list": "skills",
                   "task": "task", "observation": "observation and actions", "actions": "observation and actions"}
_GROUP_COLOURS = {"skills": "tab:blue", "history": "tab:orange", "task": "tab:green",
                  "observation and actions": "tab:purple", "frame: system, instruction, headers, chat markers": "lightgrey"}


def segments(table, step: int, tokenizer: str, path) -> None:
    """The seminar's prompt example (2-3): one request per format, the same game at the same step, each a bar
    of its segments in prompt order (left: the prompt's start), sized in tokens; skills blue, history orange."""
    fmts = list(dict.fromkeys(table.format))
    game = table.episode.iloc[0]
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(fmts) + 1.6))
    seen = set()
    for y, f in enumerate(fmts):
        g = table[(table.format == f) & (table.episode == game)].sort_values("order")
        left = 0
        for name, tokens in zip(g.segment, g.tokens):
            group = "history" if name.startswith("history") else _SEGMENT_GROUPS.get(name, "frame: system, instruction, headers, chat markers")
            ax.barh(y, tokens, left=left, color=_GROUP_COLOURS[group], edgecolor="white", linewidth=0.5,
                    label=None if group in seen else group)
            seen.add(group)
            left += tokens
        skills = int(g[g.segment.map(lambda n: _SEGMENT_GROUPS.get(n) == "skills")].tokens.sum())
        ax.text(left, y, f"  {left:,} tokens ({skills:,} skills)", va="center", fontsize=8)
    ax.set_yticks(range(len(fmts)))
    ax.set_yticklabels(fmts, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"prompt tokens ({tokenizer}), from the prompt's start")
    ax.set_xlim(0, ax.get_xlim()[1] * 1.25)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=5, frameon=False)
    ax.set_title(f"One request per format: game {game}, step {step} (segments in prompt order; no model or cache)",
                 fontsize=9)
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
