"""The tables: the main comparison and its checkpoints, table 1 (call graphs), retention after a phase
change (section 6.4), the zombie ablation with %Combat (table 5), and truncated libraries (table 8)."""
from __future__ import annotations

import re

import pandas as pd

from skillrepro.studies.speedrunner.analysis import RUN_KEYS, Study, cross_model_groups, final, over_seeds, own, with_score
from skillrepro.skills.callgraph import graph_of

# %Combat (figure 5's overlay): a library function is combat-aware when its source names a combat target
# or act, or when it calls (directly or through other functions) a function that does.
COMBAT = re.compile(r"zombie|skeleton|combat|attack|fight|defen[cds]", re.IGNORECASE)


def main_table(per_seed: pd.DataFrame, study: Study) -> pd.DataFrame:
    """The final checkpoint of every (benchmark, method, variant) on its own test set."""
    fin = own(final(per_seed)).rename(columns={"run_benchmark": "benchmark"})
    table = over_seeds(fin, ["benchmark", "method", "variant", "library_version", "train_rollouts"])
    table.insert(3, "headline", [study.headline(b) for b in table.benchmark])
    return table.rename(columns={"llm_calls_mean": "llm_calls_per_episode",
                                 "skill_calls_mean": "skill_calls_per_episode_mean",
                                 "skill_calls_sd": "skill_calls_per_episode_sd", "cached_ratio_mean": "cached_token_ratio",
                                 "cost_mean": "cost_per_episode", "output_tokens_mean": "output_tokens_per_episode_mean",
                                 "output_tokens_sd": "output_tokens_per_episode_sd"})


def checkpoint_table(per_seed: pd.DataFrame) -> pd.DataFrame:
    return over_seeds(per_seed, [*RUN_KEYS, "library_version", "train_rollouts"])




# ------------------------------------------------------------------------------------------ tables
TABLE7_COLUMNS = ["model", "benchmark", "method", "variant", "metric", "n_seeds", "first_version", "final_version",
                  "score_first_mean", "score_first_sd", "score_final_mean", "score_final_sd", "score_change_points",
                  "output_tokens_first", "output_tokens_final", "output_tokens_change_pct", "llm_calls_first",
                  "llm_calls_final", "llm_calls_change_pct", "speedrunner", "p_score_vs_speedrunner",
                  "p_output_tokens_vs_speedrunner"]


def table7(runs: dict[str, tuple[pd.DataFrame, pd.DataFrame]], study: Study) -> pd.DataFrame:
    """Table 7 (appendix G.2): per model, benchmark and main-comparison variant, the headline metric (mean and
    s.d. over seeds), output tokens and LLM calls per episode at the first (v0) and final checkpoint on the
    run's own test set, and the two-sided paired t-test of the model's SpeedRunner against the variant at the
    final checkpoint (its stats.csv), on the headline metric and on output tokens. `runs`: model -> (its
    checkpoints.csv, its stats.csv), in the order the table lists them. Variants: this config's main
    comparison where it declares the benchmark, every variant of the run otherwise (as figures 9 and 10)."""
    rows = []
    for model, (checkpoints, stats) in runs.items():
        data = own(checkpoints)
        for bench, variants in cross_model_groups(checkpoints, study).items():
            d = data[data.run_benchmark == bench]
            ours = next((v for v in variants if (d[d.variant == v].method == "speedrunner").any()), None)
            metric = study.headline(bench) if bench in study.benchmarks else "score"
            for variant in variants:
                v = d[d.variant == variant].sort_values("library_version")
                first, last = v.iloc[0], v.iloc[-1]
                p = {}
                for m, key in ((metric, "score"), ("output_tokens", "output_tokens")):
                    hit = stats[(stats.benchmark == bench) & (stats.speedrunner == ours) & (stats.baseline == variant)
                                & (stats.metric == m)] if ours and variant != ours else stats.iloc[0:0]
                    p[key] = float(hit.p_value.iloc[0]) if len(hit) else float("nan")
                rows.append({
                    "model": model, "benchmark": bench, "method": first.method, "variant": variant, "metric": metric,
                    "n_seeds": int(last.n_seeds), "first_version": int(first.library_version),
                    "final_version": int(last.library_version),
                    "score_first_mean": first.score_mean, "score_first_sd": first.score_sd,
                    "score_final_mean": last.score_mean, "score_final_sd": last.score_sd,
                    "score_change_points": 100 * (last.score_mean - first.score_mean),
                    "output_tokens_first": first.output_tokens_mean, "output_tokens_final": last.output_tokens_mean,
                    "output_tokens_change_pct": _pct(first.output_tokens_mean, last.output_tokens_mean),
                    "llm_calls_first": first.llm_calls_mean, "llm_calls_final": last.llm_calls_mean,
                    "llm_calls_change_pct": _pct(first.llm_calls_mean, last.llm_calls_mean),
                    "speedrunner": ours or "", "p_score_vs_speedrunner": p["score"],
                    "p_output_tokens_vs_speedrunner": p["output_tokens"],
                })
    return pd.DataFrame(rows, columns=TABLE7_COLUMNS)


def table1(callgraph: pd.DataFrame) -> pd.DataFrame:
    """Call-graph max depth and density of the final libraries: mean and s.d. over seeds."""
    keys = ["benchmark", "method", "variant"]
    if callgraph.empty:
        return pd.DataFrame(columns=[*keys, "version", "n_seeds", "size_mean", "size_sd", "max_depth_mean",
                                     "max_depth_sd", "density_mean", "density_sd"])
    last = callgraph.groupby([*keys, "seed"])["version"].transform("max")
    fin = callgraph[callgraph.version == last]
    g = fin.groupby([*keys, "version"], sort=True)
    out = g.agg(n_seeds=("seed", "nunique"))
    for m in ("size", "max_depth", "density"):
        out[f"{m}_mean"], out[f"{m}_sd"] = g[m].mean(), g[m].std(ddof=1)
    return out.reset_index()


def retention(per_seed: pd.DataFrame, study: Study) -> pd.DataFrame:
    """Section 6.4: for each phase pair (earlier A, later B) and variant, the change in A's headline metric
    (points) and cost between the end of A's training and the re-evaluation on A after B's training.
    Cost is dollars per episode and, for self-hosted models that cost nothing, output tokens per episode."""
    rows = []
    fin = final(per_seed)
    for a, b in study.phases():
        before = fin[(fin.run_benchmark == a) & (fin.eval_benchmark == a)]
        after = fin[(fin.run_benchmark == b) & (fin.eval_benchmark == a)]
        for variant in sorted(set(before.variant) & set(after.variant)):
            x = before[before.variant == variant].set_index("seed")
            y = after[after.variant == variant].set_index("seed")
            seeds = x.index.intersection(y.index)
            x, y = x.loc[seeds], y.loc[seeds]
            rows.append({
                "trained_first": a, "trained_second": b, "method": study.method(variant), "variant": variant,
                "n_seeds": len(seeds), "metric": study.headline(a),
                "before": x.score.mean(), "after": y.score.mean(),
                "change_points": 100 * (y.score.mean() - x.score.mean()),
                "cost_before": x.cost.mean(), "cost_after": y.cost.mean(),
                "cost_change_pct": _pct(x.cost.mean(), y.cost.mean()),
                "output_tokens_before": x.output_tokens.mean(), "output_tokens_after": y.output_tokens.mean(),
                "output_tokens_change_pct": _pct(x.output_tokens.mean(), y.output_tokens.mean()),
            })
    return pd.DataFrame(rows, columns=["trained_first", "trained_second", "method", "variant", "n_seeds", "metric",
                                       "before", "after", "change_points", "cost_before", "cost_after",
                                       "cost_change_pct", "output_tokens_before", "output_tokens_after",
                                       "output_tokens_change_pct"])


def _pct(before: float, after: float) -> float:
    return 100 * (after - before) / before if before else float("nan")


def combat_share(library) -> float:
    """%Combat of one library: the share of its functions that are combat-aware (see COMBAT)."""
    if not library.functions:
        return 0.0
    g = graph_of(library)
    aware = {f.name for f in library.functions if COMBAT.search(f.source)}
    changed = True
    while changed:  # callers of combat-aware functions are combat-aware
        new = {a for a, b in g.edges if b in aware} - aware
        aware |= new
        changed = bool(new)
    return len(aware) / len(library.functions)


def zombie_table(per_seed: pd.DataFrame, combat: pd.DataFrame, study: Study) -> pd.DataFrame:
    """Figure 5: final progression per zombie level and variant, relative to ReAct at the same level
    (difference in points, per seed then averaged), with the final libraries' %Combat."""
    levels = study.zombie_levels()
    react = study.reference("react")
    fin = own(final(per_seed))
    fin = fin[fin.run_benchmark.isin(levels)]
    rows = []
    for bench, d in fin.groupby("run_benchmark", sort=True):
        base = d[d.variant == react].set_index("seed").score if react else pd.Series(dtype=float)
        for variant, v in d[d.variant.isin(study.main_on(bench))].groupby("variant", sort=True):
            s = v.set_index("seed").score
            rel = (s - base.reindex(s.index)) * 100
            c = combat[(combat.benchmark == bench) & (combat.variant == variant)].combat_share
            rows.append({"benchmark": bench, "zombie_frequency": levels[bench], "method": study.method(variant),
                         "variant": variant, "n_seeds": s.size, "progression_mean": s.mean(),
                         "vs_react_points_mean": rel.mean(), "vs_react_points_sd": rel.std(ddof=1),
                         "combat_share_mean": c.mean() if len(c) else float("nan")})
    return pd.DataFrame(rows, columns=["benchmark", "zombie_frequency", "method", "variant", "n_seeds",
                                       "progression_mean", "vs_react_points_mean", "vs_react_points_sd",
                                       "combat_share_mean"]).sort_values(["zombie_frequency", "variant"])


def truncate(library, n: int):
    """Appendix F: the library with only its last `n` visible skills left visible (in induction order);
    every other function stays in the namespace, callable from visible ones, but is not shown."""
    from dataclasses import replace

    shown = [f.name for f in library.public()][-n:] if n > 0 else []
    return replace(library, functions=tuple(replace(f, public=f.name in shown) for f in library.functions),
                   meta={**library.meta, "truncated_to": len(shown), "visible_before": len(library.public())})


def table8(trunc: pd.DataFrame, per_seed: pd.DataFrame, study: Study) -> pd.DataFrame:
    """Table 8: mean headline metric of a final library re-evaluated with only the last N skills shown, then
    the full library re-evaluated the same way (N "all": every visible skill, under the same options), and
    N=0: the library-free v0 checkpoint of the same run (the paper's reference point), or the re-evaluation
    showing no skill where one was made because v0 already shows skills (a fixed library)."""
    cols = ["benchmark", "variant", "seed", "n_requested", "n_shown", "n_episodes", "metric", "score", "output_tokens"]
    no_skills = "0 (no skills)"
    rows = []
    # the truncations by N, then the full library, then N=0
    def order(n) -> tuple[int, int]:
        return {"all": (1, 0), "0": (2, 0)}.get(str(n)) or (0, int(n))

    for r in sorted(trunc.itertuples(), key=lambda r: (r.run_benchmark, r.variant, r.seed, order(r.n_requested))):
        label = {"all": "all (final)", "0": no_skills}.get(str(r.n_requested), r.n_requested)
        rows.append({"benchmark": r.run_benchmark, "variant": r.variant, "seed": r.seed, "n_requested": label,
                     "n_shown": r.n_shown, "n_episodes": r.n_episodes, "metric": study.headline(r.run_benchmark),
                     "score": r.score, "output_tokens": r.output_tokens})
    own_ = own(per_seed)
    evaluated_at_0 = {(r["benchmark"], r["variant"], r["seed"]) for r in rows if r["n_requested"] == no_skills}
    for (bench, variant, seed) in sorted({(r["benchmark"], r["variant"], r["seed"]) for r in rows} - evaluated_at_0):
        run = own_[(own_.run_benchmark == bench) & (own_.variant == variant) & (own_.seed == seed)]
        ck = run[run.library_version == 0]
        if len(ck):
            c = ck.iloc[0]
            rows.append({"benchmark": bench, "variant": variant, "seed": seed, "n_requested": no_skills,
                         "n_shown": 0, "n_episodes": c.n_episodes, "metric": study.headline(bench),
                         "score": c.score, "output_tokens": c.output_tokens})
    return pd.DataFrame(rows, columns=cols)


def truncation_metrics(eps: pd.DataFrame, shown: dict[str, tuple[int, int]], study: Study) -> pd.DataFrame:
    """Per truncated evaluation (file -> (N requested, N shown)): mean headline metric and output tokens."""
    rows = []
    eps = with_score(eps, study)
    for path, (req, n) in shown.items():
        d = eps[eps.source == path]
        if d.empty:
            continue
        rows.append({"run_benchmark": d.run_benchmark.iloc[0], "variant": d.variant.iloc[0], "seed": d.seed.iloc[0],
                     "n_requested": req, "n_shown": n, "n_episodes": len(d), "score": d.score.mean(),
                     "output_tokens": d.output_tokens.mean()})
    return pd.DataFrame(rows, columns=["run_benchmark", "variant", "seed", "n_requested", "n_shown", "n_episodes",
                                       "score", "output_tokens"])


