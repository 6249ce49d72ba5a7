"""Metrics over the stored records (DuckDB SQL), the tables built from them, the paired tests, and the figures.

Every function reads what it is given: the analytics rule passes the exact record files of the runs the
config declares (never a glob of results/), so a variant removed from the config leaves the tables, and a
shortened run reports its new final checkpoint.

Per-seed metrics come first and are then averaged over seeds, as the paper reports them (appendix A.2): a
seed's value is its mean over the test episodes of a checkpoint; a table shows mean and sample s.d. over
seeds. The headline metric of a benchmark is success, or progression where the benchmark has no pass/fail
(Crafter); `score` below is that headline metric.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
import pyarrow as pa

from skillrepro import store
from skillrepro.benchmarks import benchmark_class
from skillrepro.skills.callgraph import graph_of
from skillrepro.store import atomic_path

# Dollar cost of one LLM call from the pricing table; a model without a price costs nothing (the embedded
# and self-hosted models). check.check_config refuses an unpriced model on a billed backend.
_COST = """
    ((c.prompt_tokens - c.cached_tokens) * coalesce(p.input, 0)
     + c.cached_tokens * coalesce(p.cached_input, p.input, 0)
     + c.completion_tokens * coalesce(p.output, 0)) / 1e6
"""

# Every actor call of an episode is charged to it; episode_id is the actor's session id.
EPISODES_SQL = f"""
WITH cost AS (
    SELECT c.session_id, sum({_COST}) AS dollars
    FROM llm_calls c LEFT JOIN pricing p ON c.model = p.model
    WHERE c.role = 'actor'
    GROUP BY c.session_id
)
SELECT e.run_id, split_part(e.run_id, '/', 1) AS run_benchmark, e.benchmark AS eval_benchmark,
       e.method, e.variant, e.seed, e.split, e.cycle, e.library_version, e.task_id, e.episode_id,
       e.success::DOUBLE AS success, e.progression, e.completion_tokens AS output_tokens,
       e.n_llm_calls AS llm_calls, e.prompt_tokens, e.cached_tokens, e.n_steps, e.n_invalid_actions,
       e.wall_s, e.termination, coalesce(cost.dollars, 0) AS cost, e.filename AS source
FROM episodes e LEFT JOIN cost ON cost.session_id = e.episode_id
ORDER BY e.run_id, e.split, e.cycle, e.benchmark, e.task_id, e.episode_id
"""

CALLS_BY_FILE_SQL = f"""
SELECT c.filename, count(*) AS calls, sum(c.completion_tokens) AS output_tokens, sum({_COST}) AS dollars
FROM llm_calls c LEFT JOIN pricing p ON c.model = p.model
GROUP BY c.filename
"""

METRICS = ["score", "success", "progression", "output_tokens", "llm_calls", "cached_ratio", "cost",
           "invalid_action_rate"]
RUN_KEYS = ["run_benchmark", "eval_benchmark", "method", "variant"]

# %Combat (figure 5's overlay): a library function is combat-aware when its source names a combat target
# or act, or when it calls (directly or through other functions) a function that does.
COMBAT = re.compile(r"zombie|skeleton|combat|attack|fight|defen[cds]", re.IGNORECASE)


# ------------------------------------------------------------------------------------------ the study
@dataclass(frozen=True)
class Pick:
    """Some variants of a study: `method`'s default-options variant ("default"), all its variants ("all"),
    or those with options ("ablations"), narrowed to the ones whose options set `options`, less those whose
    options are exactly one of `not_exactly`. No method: the study's main comparison (Study.main_on)."""

    method: str | None = None
    which: str = "all"  # "default" | "all" | "ablations"
    options: tuple[tuple[str, Any], ...] = ()
    not_exactly: tuple[tuple[tuple[str, Any], ...], ...] = ()


@dataclass(frozen=True)
class Comparison:
    """A learning-curve figure: its title, the variants it compares on a benchmark (in legend order), the
    pick that must find a variant there for the figure to be drawn on it, and what an empty figure asks for."""

    title: str
    picks: tuple[Pick, ...]
    needs: str
    drawn_when: Pick | None = None


_NO_INTERPRETER = (("interpreter", False),)

# Which variants each learning-curve figure compares: the one place that says it (the paper's figures).
COMPARISONS = {
    "fig2": Comparison("Figure 2: main comparison (success or progression, and output tokens, over training)",
                       (Pick(),), needs="any run"),
    # where an ablation beyond figure 7's interpreter one runs (BabyAI in the paper)
    "fig4": Comparison("Figure 4: SpeedRunner ablations", (Pick("speedrunner"),),
                       needs="SpeedRunner variants with options (configs/paper.yaml)",
                       drawn_when=Pick("speedrunner", "ablations", not_exactly=(_NO_INTERPRETER,))),
    "fig7": Comparison("Figure 7: the inducer without its code interpreter",
                       (Pick("speedrunner", "default"), Pick("speedrunner", options=_NO_INTERPRETER)),
                       needs="a SpeedRunner variant with interpreter: false (configs/paper.yaml)",
                       drawn_when=Pick("speedrunner", options=_NO_INTERPRETER)),
    "fig12": Comparison("Figure 12: ASI, ASI-replay and SpeedRunner",
                        (Pick("asi", "default"), Pick("asi_replay"), Pick("speedrunner", "default")),
                        needs="an asi_replay variant beside asi and speedrunner (configs/paper.yaml)",
                        drawn_when=Pick("asi_replay")),
}


@dataclass(frozen=True)
class Study:
    """What the config declares, as the figures need it: plain values, so rules can pass them as params.

    variants: variant -> {"method": name, "options": {...}, "benchmarks": [...] or None}
    benchmarks: instance -> {"env": ..., "options": {...}, "after": instance or None, "headline": column}
    """

    variants: dict[str, dict[str, Any]]
    benchmarks: dict[str, dict[str, Any]]
    sleep_every: int = 1
    train_rollouts: int = 0
    config_name: str = "config.yaml"

    def headline(self, bench: str) -> str:
        """The Episode column reported for `bench`: success, or progression where there is no pass/fail."""
        return self.benchmarks[bench]["headline"]

    def offset(self, bench: str) -> int:
        """Training rollouts before this benchmark's phase began (0 unless it continues another run)."""
        after = self.benchmarks[bench].get("after")
        return 0 if not after else self.offset(after) + self.train_rollouts

    def runs_on(self, variant: str, bench: str) -> bool:
        only = self.variants[variant].get("benchmarks")
        return only is None or bench in only

    def method(self, variant: str) -> str:
        return self.variants[variant]["method"]

    def is_default(self, variant: str) -> bool:
        return not self.variants[variant].get("options")

    def main_on(self, bench: str) -> list[str]:
        """The comparison of figures 2, 3, 5 and 11 on `bench`: per method, its default-options variant, or
        every variant of a method that runs on `bench` only with options (say, ASI tuned for Crafter).
        The other variants are ablations."""
        on = [v for v in self.variants if self.runs_on(v, bench)]
        has_default = {self.method(v) for v in on if self.is_default(v)}
        return [v for v in on if self.is_default(v) or self.method(v) not in has_default]

    def reference(self, method: str) -> str | None:
        """The default-options variant of `method`, if configured."""
        return next((v for v in self.variants if self.method(v) == method and self.is_default(v)), None)

    def groups(self, figure: str) -> dict[str, list[str]]:
        """Benchmark -> the variants learning-curve figure `figure` compares (COMPARISONS declares them);
        a benchmark where the figure has nothing to show is left out."""
        if figure not in COMPARISONS:
            raise ValueError(f"unknown figure {figure!r}; declared: {', '.join(COMPARISONS)}")
        comparison = COMPARISONS[figure]
        out = {}
        for b in self.benchmarks:
            if comparison.drawn_when is not None and not self.pick(comparison.drawn_when, b):
                continue
            chosen = list(dict.fromkeys(v for p in comparison.picks for v in self.pick(p, b)))
            if chosen:
                out[b] = chosen
        return out

    def pick(self, p: "Pick", bench: str) -> list[str]:
        """The variants on `bench` that `p` names, in config order."""
        if p.method is None:
            return self.main_on(bench)
        if p.which == "default":
            ref = self.reference(p.method)
            return [ref] if ref is not None and self.runs_on(ref, bench) else []
        out = [v for v in self.variants if self.runs_on(v, bench) and self.method(v) == p.method]
        if p.which == "ablations":
            out = [v for v in out if not self.is_default(v)]
        options = lambda v: self.variants[v]["options"]  # noqa: E731
        if p.options:  # the variants whose options set these values (False is not 0)
            out = [v for v in out if all(k in options(v) and type(options(v)[k]) is type(x) and options(v)[k] == x
                                         for k, x in p.options)]
        return [v for v in out if options(v) not in [dict(e) for e in p.not_exactly]]

    def zombie_levels(self) -> dict[str, float]:
        """Crafter instances (not continued phases) -> their zombie frequency (D.6; default 1.0)."""
        return {b: float(d.get("options", {}).get("zombie_frequency", 1.0)) for b, d in self.benchmarks.items()
                if d["env"] == "crafter" and not d.get("after")}

    def phases(self) -> list[tuple[str, str]]:
        """(earlier, later) pairs of the distribution-shift chains: later trains on with earlier's library."""
        return [(d["after"], b) for b, d in self.benchmarks.items() if d.get("after")]


def study_params(config: dict[str, Any], config_name: str) -> dict[str, Any]:
    """The Study as the plain dict rules pass (Snakemake fingerprints plain values only)."""
    return {
        "variants": {v: {"method": m["method"], "options": dict(m.get("options") or {}),
                         "benchmarks": m.get("benchmarks")} for v, m in config["methods"].items()},
        "benchmarks": {b: {"env": d["env"], "options": dict(d.get("options") or {}), "after": d.get("after"),
                           "headline": _headline(d["env"])} for b, d in config["benchmarks"].items()},
        "sleep_every": config["protocol"]["sleep_every"],
        "train_rollouts": config["protocol"]["train_rollouts"],
        "config_name": config_name,
    }


def _headline(env: str) -> str:
    """The Episode column the benchmark's tables and figures report (Benchmark.headline)."""
    return benchmark_class(env).headline


# ------------------------------------------------------------------------------------------ records
def _pricing_table(pricing: dict[str, dict[str, float]]) -> pa.Table:
    rows = [{"model": m, "input": p["input"], "cached_input": p.get("cached_input"), "output": p["output"]}
            for m, p in pricing.items()]
    schema = pa.schema([("model", pa.string()), ("input", pa.float64()), ("cached_input", pa.float64()),
                        ("output", pa.float64())])
    return pa.Table.from_pylist(rows, schema=schema)


def connect(files: dict[str, Iterable[str | Path]], pricing: dict[str, Any]):
    """DuckDB views over exactly `files` (table name -> Parquet files), plus the pricing table."""
    con = store.views({name: [str(f) for f in fs] for name, fs in files.items()})
    con.register("pricing", _pricing_table(pricing))
    return con


def episodes(episode_files: Iterable[str | Path], call_files: Iterable[str | Path], pricing: dict[str, Any]) -> pd.DataFrame:
    """One row per episode of the given files, with the dollar cost of its actor calls."""
    con = connect({"episodes": episode_files, "llm_calls": call_files}, pricing)
    return con.execute(EPISODES_SQL).df()


_BATCH_PATH = re.compile(r"runs/(?P<run>[^/]+/[^/]+/seed\d+)/(?:train/batch(?P<batch>\d+)|induce/v(?P<v>\d+))/llm_calls\.parquet$")


def batch_calls(call_files: Iterable[str | Path], pricing: dict[str, Any]) -> pd.DataFrame:
    """Every call of the given training batches (train/batch{k}: the actor's, and a curriculum's) and sleep
    phases (induce/v{k}: the inducer's, and replayed episodes'), totalled per file: one row per (run, cycle,
    phase). Sleep phase v{k} follows training batch k-1, so it is charged to cycle k-1."""
    files = [str(f) for f in call_files]
    cols = ["run_id", "cycle", "phase", "calls", "output_tokens", "dollars"]
    matches = [_BATCH_PATH.search(f) for f in files]
    for f, m in zip(files, matches):
        if not m:
            raise ValueError(f"{f}: neither a training batch's nor a sleep phase's calls "
                             f"(…/runs/BENCH/VARIANT/seedN/train/batchK/ or induce/vK/llm_calls.parquet)")
    by_file = {}
    if files:
        by_file = {r[0]: r[1:] for r in connect({"llm_calls": files}, pricing).execute(CALLS_BY_FILE_SQL).fetchall()}
    rows = []
    for f, m in zip(files, matches):
        calls, out, dollars = by_file.get(f, (0, 0, 0.0))
        cycle, phase = (int(m["batch"]), "train") if m["batch"] is not None else (int(m["v"]) - 1, "sleep")
        rows.append([m["run"], cycle, phase, calls, out or 0, dollars or 0.0])
    return pd.DataFrame(rows, columns=cols).astype({"cycle": int, "calls": int, "output_tokens": int, "dollars": float})


# ------------------------------------------------------------------------------------------ metrics
def with_score(eps: pd.DataFrame, study: Study) -> pd.DataFrame:
    eps = eps.copy()
    eps["score"] = [row.progression if study.headline(row.eval_benchmark) == "progression" else row.success
                    for row in eps.itertuples()] if len(eps) else pd.Series(dtype=float)
    return eps


def checkpoint_metrics(test: pd.DataFrame, study: Study) -> pd.DataFrame:
    """One row per (run benchmark, eval benchmark, variant, seed, library version) over its test episodes."""
    if test.empty:
        return pd.DataFrame(columns=[*RUN_KEYS, "seed", "library_version", "train_rollouts", "n_episodes", *METRICS])
    test = with_score(test, study)
    g = test.groupby([*RUN_KEYS, "seed", "library_version"], sort=True)
    out = g.agg(n_episodes=("episode_id", "count"), score=("score", "mean"), success=("success", "mean"),
                progression=("progression", "mean"), output_tokens=("output_tokens", "mean"),
                llm_calls=("llm_calls", "mean"), cost=("cost", "mean"), wall_s=("wall_s", "mean"))
    sums = g[["cached_tokens", "prompt_tokens", "n_invalid_actions", "n_steps"]].sum()
    out["cached_ratio"] = sums.cached_tokens / sums.prompt_tokens.where(sums.prompt_tokens > 0)
    out["invalid_action_rate"] = sums.n_invalid_actions / sums.n_steps.where(sums.n_steps > 0)
    out = out.reset_index()
    out.insert(out.columns.get_loc("library_version") + 1, "train_rollouts",
               [study.offset(b) + v * study.sleep_every for b, v in zip(out.run_benchmark, out.library_version)])
    return out


def training_cost(train: pd.DataFrame, calls: pd.DataFrame, study: Study) -> pd.DataFrame:
    """Dollars and output tokens per training episode of every cycle, counting every call: the batch's own
    (actor, curriculum) plus the sleep phase that follows it, spread over the batch's episodes (figure 3)."""
    cols = ["run_benchmark", "method", "variant", "seed", "cycle", "train_rollouts", "n_episodes", "actor_cost",
            "sleep_cost", "cost", "actor_output_tokens", "sleep_output_tokens"]
    if train.empty:
        return pd.DataFrame(columns=cols)
    out = train.groupby(["run_id", "run_benchmark", "method", "variant", "seed", "cycle"], sort=True).agg(
        n_episodes=("episode_id", "count")).reset_index()
    for phase in ("train", "sleep"):
        totals = calls[calls.phase == phase][["run_id", "cycle", "dollars", "output_tokens"]]
        out = out.merge(totals.rename(columns={"dollars": f"{phase}_dollars", "output_tokens": f"{phase}_tokens"}),
                        on=["run_id", "cycle"], how="left").fillna({f"{phase}_dollars": 0.0, f"{phase}_tokens": 0})
    out["actor_cost"] = out.train_dollars / out.n_episodes
    out["sleep_cost"] = out.sleep_dollars / out.n_episodes
    out["cost"] = out.actor_cost + out.sleep_cost
    out["actor_output_tokens"] = out.train_tokens / out.n_episodes
    out["sleep_output_tokens"] = out.sleep_tokens / out.n_episodes
    out["train_rollouts"] = [study.offset(b) + (c + 1) * study.sleep_every for b, c in zip(out.run_benchmark, out.cycle)]
    return out[cols]


def over_seeds(per_seed: pd.DataFrame, keys: list[str], metrics: list[str] = METRICS) -> pd.DataFrame:
    """Mean and sample s.d. over seeds of every metric (s.d. is empty with a single seed)."""
    if per_seed.empty:
        return pd.DataFrame(columns=[*keys, "n_seeds", "n_episodes"] + [f"{m}_{s}" for m in metrics for s in ("mean", "sd")])
    g = per_seed.groupby(keys, sort=True)
    out = g.agg(n_seeds=("seed", "nunique"), n_episodes=("n_episodes", "sum"))
    for m in metrics:
        out[f"{m}_mean"] = g[m].mean()
        out[f"{m}_sd"] = g[m].std(ddof=1)
    return out.reset_index()


def own(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Checkpoints on the run's own test set (not the extra test sets of a distribution shift)."""
    return per_seed[per_seed.run_benchmark == per_seed.eval_benchmark]


def final(per_seed: pd.DataFrame) -> pd.DataFrame:
    """The final checkpoint of every run group."""
    keys = [*RUN_KEYS, "seed"]
    if per_seed.empty:
        return per_seed
    return per_seed[per_seed.library_version == per_seed.groupby(keys)["library_version"].transform("max")]


def main_table(per_seed: pd.DataFrame, study: Study) -> pd.DataFrame:
    """The final checkpoint of every (benchmark, method, variant) on its own test set."""
    fin = own(final(per_seed)).rename(columns={"run_benchmark": "benchmark"})
    table = over_seeds(fin, ["benchmark", "method", "variant", "library_version", "train_rollouts"])
    table.insert(3, "headline", [study.headline(b) for b in table.benchmark])
    return table.rename(columns={"llm_calls_mean": "llm_calls_per_episode", "cached_ratio_mean": "cached_token_ratio",
                                 "cost_mean": "cost_per_episode", "output_tokens_mean": "output_tokens_per_episode_mean",
                                 "output_tokens_sd": "output_tokens_per_episode_sd"})


def checkpoint_table(per_seed: pd.DataFrame) -> pd.DataFrame:
    return over_seeds(per_seed, [*RUN_KEYS, "library_version", "train_rollouts"])


# ------------------------------------------------------------------------------------------ stats
def paired_tests(test: pd.DataFrame, study: Study) -> pd.DataFrame:
    """Two-sided paired t-tests of every SpeedRunner variant against every baseline variant, at the final
    checkpoint, on the headline metric and output tokens. Pairs are episodes on the same test task (the
    same task seed) in the same training seed; only benchmarks both variants ran on."""
    from scipy import stats

    cols = ["benchmark", "speedrunner", "baseline", "metric", "n", "mean_speedrunner", "mean_baseline",
            "mean_difference", "statistic", "p_value"]
    test = with_score(test, study)
    test = test[test.run_benchmark == test.eval_benchmark]
    if test.empty:
        return pd.DataFrame(columns=cols)
    last = test.groupby(["run_id"])["library_version"].transform("max")
    fin = test[test.library_version == last]
    rows = []
    for bench, d in fin.groupby("run_benchmark", sort=True):
        ours = sorted(v for v in d.variant.unique() if study.method(v) == "speedrunner")
        others = sorted(v for v in d.variant.unique() if study.method(v) != "speedrunner")
        for sr in ours:
            for base in others:
                a = d[d.variant == sr].groupby(["seed", "task_id"])
                b = d[d.variant == base].groupby(["seed", "task_id"])
                for metric in ("score", "output_tokens"):
                    pair = pd.concat([a[metric].mean().rename("a"), b[metric].mean().rename("b")], axis=1, join="inner")
                    n = len(pair)
                    stat, p = (float("nan"), float("nan"))
                    if n >= 2 and (pair.a - pair.b).std(ddof=1) > 0:
                        res = stats.ttest_rel(pair.a, pair.b)
                        stat, p = float(res.statistic), float(res.pvalue)
                    rows.append({"benchmark": bench, "speedrunner": sr, "baseline": base,
                                 "metric": study.headline(bench) if metric == "score" else metric, "n": n,
                                 "mean_speedrunner": pair.a.mean(), "mean_baseline": pair.b.mean(),
                                 "mean_difference": (pair.a - pair.b).mean(), "statistic": stat, "p_value": p})
    return pd.DataFrame(rows, columns=cols)


# ------------------------------------------------------------------------------------------ tables
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
    """Table 8: mean headline metric of a final library re-evaluated with only the last N skills shown,
    bracketed by N=0 (the library-free v0 checkpoint) and the full library (the final checkpoint)."""
    cols = ["benchmark", "variant", "seed", "n_requested", "n_shown", "n_episodes", "metric", "score", "output_tokens"]
    rows = []
    for r in trunc.itertuples():
        rows.append({"benchmark": r.run_benchmark, "variant": r.variant, "seed": r.seed, "n_requested": r.n_requested,
                     "n_shown": r.n_shown, "n_episodes": r.n_episodes, "metric": study.headline(r.run_benchmark),
                     "score": r.score, "output_tokens": r.output_tokens})
    own_ = own(per_seed)
    for (bench, variant, seed) in sorted({(r["benchmark"], r["variant"], r["seed"]) for r in rows}):
        run = own_[(own_.run_benchmark == bench) & (own_.variant == variant) & (own_.seed == seed)]
        for label, ck in (("0 (no skills)", run[run.library_version == 0]),
                          ("all (final)", run[run.library_version == run.library_version.max()])):
            if len(ck):
                c = ck.iloc[0]
                rows.append({"benchmark": bench, "variant": variant, "seed": seed, "n_requested": label,
                             "n_shown": label, "n_episodes": c.n_episodes, "metric": study.headline(bench),
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


# ------------------------------------------------------------------------------------------ figures
def _save(fig, out: str | Path) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    with atomic_path(out) as tmp:  # a half-drawn figure never stands as the output; the umask's mode
        fig.savefig(tmp, dpi=120, format=Path(out).suffix.lstrip(".") or "png")
    plt.close(fig)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def empty_figure(out: str | Path, title: str, needs: str, config_name: str) -> None:
    """The figure's empty state: which runs it needs and which config produces them."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 2.6))
    ax.axis("off")
    ax.text(0.5, 0.5, f"{title}\n\nNo runs for this figure in {config_name}.\nIt needs {needs}.",
            ha="center", va="center", wrap=True, fontsize=10)
    _save(fig, out)


# One look per line of a panel: hollow markers of different shapes, line styles and widths (the first line
# widest), so a line drawn exactly over another still shows, and the legend tells them apart in grey print.
_MARKERS = "os^Dv<>P"
_LINES = ("-", "--", "-.", ":")


def _band(ax, d: pd.DataFrame, x: str, metric: str, label: str, i: int = 0, **kw) -> None:
    d = d.sort_values(x)
    mean, sd = d[f"{metric}_mean"].astype(float), d[f"{metric}_sd"].astype(float).fillna(0)
    kw.setdefault("ls", _LINES[i % len(_LINES)])
    # clip_on=False: a value on the axis's edge (a rate of 0 or 1) is drawn over the frame, not hidden by it
    ax.plot(d[x], mean, marker=_MARKERS[i % len(_MARKERS)], markerfacecolor="none", markersize=7 + 2 * (i % 3),
            lw=max(2.4 - 0.5 * i, 1.0), label=label, clip_on=False, zorder=3 + i, **kw)
    ax.fill_between(d[x], mean - sd, mean + sd, alpha=0.15, color=ax.lines[-1].get_color())


def _counts_axis(ax, axis: str = "x") -> None:
    """Whole-number ticks on an axis that counts something (training rollouts)."""
    from matplotlib.ticker import MaxNLocator

    (ax.xaxis if axis == "x" else ax.yaxis).set_major_locator(MaxNLocator(integer=True))


def _rate_axis(ax) -> None:
    """A success rate or progression: 0 to 1, nothing below 0."""
    ax.set_ylim(0, 1.05)


def _from_zero(ax) -> None:
    """Tokens and dollars: never below 0 (a band's lower edge is mean - s.d.)."""
    ax.set_ylim(bottom=0)


def curves(checkpoints: pd.DataFrame, groups: dict[str, list[str]], study: Study, out: str | Path,
           title: str, needs: str) -> None:
    """Figures 2, 4, 7, 12: per benchmark (a row), headline metric and output tokens per episode against
    training rollouts, one line per variant, mean ± 1 s.d. over seeds. `groups`: benchmark -> variants."""
    data = own(checkpoints)
    groups = {b: vs for b, vs in groups.items() if not data[(data.run_benchmark == b) & data.variant.isin(vs)].empty}
    if not groups:
        return empty_figure(out, title, needs, study.config_name)
    plt = _plt()
    fig, axes = plt.subplots(len(groups), 2, figsize=(10, 3.4 * len(groups)), squeeze=False)
    for row, (bench, variants) in zip(axes, groups.items()):
        for i, variant in enumerate(variants):
            d = data[(data.run_benchmark == bench) & (data.variant == variant)]
            if not d.empty:
                for ax, metric in zip(row, ["score", "output_tokens"]):
                    _band(ax, d, "train_rollouts", metric, variant, i)
        head = study.headline(bench)
        row[0].set(title=f"{bench}: test {head}", xlabel="training rollouts", ylabel=head)
        row[1].set(title=f"{bench}: output tokens per episode", xlabel="training rollouts", ylabel="tokens")
        _rate_axis(row[0])
        _from_zero(row[1])
        for ax in row:
            _counts_axis(ax)
        row[0].legend(fontsize=8)
    fig.suptitle(title)
    _save(fig, out)


def comparison_figure(checkpoints: pd.DataFrame, figure: str, study: Study, out: str | Path) -> None:
    """Learning-curve figure `figure` as COMPARISONS declares it (its variants, title and empty-state note)."""
    c = COMPARISONS[figure]
    curves(checkpoints, study.groups(figure), study, out, title=c.title, needs=c.needs)


def cost_curves(training: pd.DataFrame, study: Study, out: str | Path, model: str | None = None) -> None:
    """Figure 3: dollars per training episode (the batch's calls + the sleep phase after it) over training,
    mean ± 1 s.d. over seeds; thin dotted, the batch's own share. Every cost $0 (a model without a price,
    `model`) is said on the image."""
    title = "Figure 3: dollar cost per episode over training"
    main = {b: study.main_on(b) for b in study.benchmarks}
    training = training[[v in main.get(b, ()) for b, v in zip(training.run_benchmark, training.variant)]]
    if training.empty:
        return empty_figure(out, title, "training batches of the main methods", study.config_name)
    per = over_seeds(training, ["run_benchmark", "variant", "train_rollouts"], ["cost", "actor_cost"])
    benches = sorted(per.run_benchmark.unique())
    plt = _plt()
    fig, axes = plt.subplots(1, len(benches), figsize=(5 * len(benches), 3.6), squeeze=False)
    unpriced = bool((per.cost_mean.fillna(0) == 0).all())
    for ax, bench in zip(axes[0], benches):
        for i, variant in enumerate(main[bench]):
            d = per[(per.run_benchmark == bench) & (per.variant == variant)]
            if not d.empty:
                _band(ax, d, "train_rollouts", "cost", variant, i)
                ax.plot(d.sort_values("train_rollouts").train_rollouts, d.sort_values("train_rollouts").actor_cost_mean,
                        ls=":", lw=1, color=ax.lines[-1].get_color(), clip_on=False, zorder=2)
        ax.set(title=f"{bench}: $ per episode (thin dotted: without sleep)", xlabel="training rollouts", ylabel="dollars")
        _counts_axis(ax)
        if unpriced:
            ax.set_ylim(0, 1)
            ax.text(0.5, 0.55, f"All costs are $0: {f'model {model}' if model else 'the model'} has no price\n"
                    "in the config's `pricing` (an embedded or self-hosted model)", transform=ax.transAxes,
                    ha="center", va="center", fontsize=9, bbox=dict(boxstyle="round", fc="lightyellow", ec="grey"))
        else:
            _from_zero(ax)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    _save(fig, out)


def zombie_figure(zombies: pd.DataFrame, study: Study, out: str | Path) -> None:
    """Figure 5: bars = final progression minus ReAct's at each zombie level (points); dotted lines (right
    axis) = %Combat of the final libraries."""
    title = "Figure 5: robustness to zombie frequency, relative to ReAct"
    d = zombies[zombies.method != "react"]
    if d.empty or zombies.zombie_frequency.nunique() < 1 or study.reference("react") is None:
        return empty_figure(out, title, "Crafter instances at several zombie_frequency levels with ReAct and "
                            "other methods (configs/paper.yaml: crafter, crafter_zombie0x, crafter_zombie2x)",
                            study.config_name)
    plt = _plt()
    import numpy as np

    levels = sorted(d.zombie_frequency.unique())
    variants = sorted(d.variant.unique())
    fig, ax = plt.subplots(figsize=(7, 4))
    twin = ax.twinx()
    width = 0.8 / len(variants)
    for i, variant in enumerate(variants):
        v = d[d.variant == variant].set_index("zombie_frequency").reindex(levels)
        xs = np.arange(len(levels)) + (i - (len(variants) - 1) / 2) * width
        bars = ax.bar(xs, v.vs_react_points_mean, width, yerr=v.vs_react_points_sd.fillna(0), label=variant, capsize=3)
        twin.plot(np.arange(len(levels)), 100 * v.combat_share_mean, ls=":", lw=2, marker="s", markeredgecolor="black",
                  color=bars.patches[0].get_facecolor())
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(levels)), [f"{f:g}x" for f in levels])
    ax.set(xlabel="zombie frequency", ylabel="progression vs ReAct (points)", title=title)
    twin.set(ylabel="%Combat of the final library (dotted)", ylim=(0, 100))
    twin.set_zorder(ax.get_zorder() + 1)  # the overlay above the bars
    twin.patch.set_visible(False)
    ax.legend(fontsize=8)
    _save(fig, out)


def shift_figure(checkpoints: pd.DataFrame, retained: pd.DataFrame, study: Study, out: str | Path) -> None:
    """Figure 6: both test sets' headline metric and output tokens over the whole chain of training
    (phase one, then phase two from phase one's last library), one line per variant and test set."""
    title = "Figure 6: distribution shift and retention"
    phases = study.phases()
    if not phases or checkpoints.empty:
        return empty_figure(out, title, "a benchmark with `after:` (configs/shift.yaml)", study.config_name)
    plt = _plt()
    fig, axes = plt.subplots(len(phases), 2, figsize=(11, 3.8 * len(phases)), squeeze=False)
    for row, (a, b) in zip(axes, phases):
        chain = checkpoints[checkpoints.run_benchmark.isin([a, b])]
        for i, ((variant, test_set), d) in enumerate(chain.groupby(["variant", "eval_benchmark"], sort=True)):
            for ax, metric in zip(row, ["score", "output_tokens"]):
                _band(ax, d, "train_rollouts", metric, f"{variant} on {test_set}", i,
                      ls="-" if test_set == a else "--")
        for ax in row:
            ax.axvline(study.offset(b), color="grey", lw=0.8)
            _counts_axis(ax)
        _rate_axis(row[0])
        _from_zero(row[1])
        kept = retained[(retained.trained_first == a) & (retained.trained_second == b)]
        summary = "\n".join(f"{r.variant}: {r.change_points:+.1f} points, tokens {r.output_tokens_change_pct:+.1f}%"
                            for r in kept.itertuples())
        if summary:
            row[0].text(0.01, 0.98, f"{a} after {b}:\n{summary}", transform=row[0].transAxes, va="top", fontsize=7)
        row[0].set(title=f"{a} then {b}: test {study.headline(a)}", xlabel="training rollouts")
        row[1].set(title="output tokens per episode", xlabel="training rollouts")
        row[0].legend(fontsize=7)
    fig.suptitle(title)
    _save(fig, out)


def plane_figure(mains: dict[str, pd.DataFrame], study: Study, out: str | Path) -> None:
    """Figure 11: the performance-efficiency plane at the final checkpoint: output tokens per episode (x)
    against the headline metric (y), one panel per benchmark, one marker per model, one colour per method."""
    title = "Figure 11: performance-efficiency plane (final checkpoint)"
    frames = [m.assign(model=label) for label, m in mains.items() if not m.empty]
    if not frames:
        return empty_figure(out, title, "finished main tables", study.config_name)
    data = pd.concat(frames)
    data = data[[b not in study.benchmarks or v in study.main_on(b) for b, v in zip(data.benchmark, data.variant)]]
    benches = sorted(data.benchmark.unique())
    plt = _plt()
    fig, axes = plt.subplots(1, len(benches), figsize=(5 * len(benches), 4), squeeze=False)
    markers = dict(zip(mains, "osD^v<>p*"))
    for ax, bench in zip(axes[0], benches):
        d = data[data.benchmark == bench]
        colours: dict[str, Any] = {}
        for r in d.itertuples():
            c = colours.setdefault(r.variant, f"C{len(colours)}")
            n = len(ax.lines)  # hollow markers, each later one smaller: points at the same place all show
            ax.errorbar(r.output_tokens_per_episode_mean, r.score_mean, xerr=_nz(r.output_tokens_per_episode_sd),
                        yerr=_nz(r.score_sd), marker=markers[r.model], color=c, ls="none", markerfacecolor="none",
                        markersize=max(11 - 2 * n, 4), markeredgewidth=1.5, clip_on=False,
                        label=f"{r.variant} ({r.model})")
        ax.set(title=bench, xlabel="output tokens per episode", ylabel=study.headline(bench) if bench in study.benchmarks else "score")
        _rate_axis(ax)
        ax.set_xlim(left=0)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    _save(fig, out)


def _nz(x: float) -> float:
    return 0.0 if pd.isna(x) else float(x)
