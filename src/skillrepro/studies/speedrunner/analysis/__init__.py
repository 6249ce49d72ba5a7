"""The SpeedRunner study's analytics: this module holds the study as the config declares it (which variants
each figure compares included), the records (DuckDB SQL) and the per-seed metrics every output reads; the
tables, the paired tests and the figures are its modules `tables`, `statistics` and `figures`.

Every function reads what it is given: the analytics rule passes the exact record files of the runs the
config declares (never a glob of results/), so a variant removed from the config leaves the tables, and a
shortened run reports its new final checkpoint.

Per-seed metrics come first and are then averaged over seeds, as the paper reports them (appendix A.2): a
seed's value is its mean over the test episodes of a checkpoint; a table shows mean and sample s.d. over
seeds. The headline metric of a benchmark is success, or progression where the benchmark has no pass/fail
(Crafter); `score` below is that headline metric.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
import pyarrow as pa

from skillrepro import store
from skillrepro.benchmarks import benchmark_class
from skillrepro.config import Price
from skillrepro.studies.contract import TABLES
from skillrepro.studies.speedrunner.paths import batch_of

# Dollar cost of one LLM call from the pricing table; a model without a price costs nothing (the embedded
# and self-hosted models). check.check_config refuses an unpriced model on a billed backend.
# A call whose server did not report its cached tokens (null) is priced as if none were cached: the full
# input price, an upper bound, explicitly. A reply from the run's response cache (from_cache) is priced too:
# the tables give what a method's calls cost, not what one invocation of the pipeline paid (llm/ledger.py).
_COST = """
    ((c.prompt_tokens - coalesce(c.cached_tokens, 0)) * coalesce(p.input, 0)
     + coalesce(c.cached_tokens, 0) * coalesce(p.cached_input, p.input, 0)
     + c.completion_tokens * coalesce(p.output, 0)) / 1e6
"""

# Every actor call of an episode is charged to it; episode_id is the actor's session id. An episode's skill
# calls are the calls its actor made (top-level frames); the calls a skill makes inside it are not counted.
EPISODES_SQL = f"""
WITH cost AS (
    SELECT c.session_id, sum({_COST}) AS dollars
    FROM llm_calls c LEFT JOIN pricing p ON c.model = p.model
    WHERE c.role = 'actor'
    GROUP BY c.session_id
), skills AS (
    SELECT episode_id, count(*) AS n FROM skill_calls WHERE parent_frame_id = '' GROUP BY episode_id
)
SELECT e.run_id, split_part(e.run_id, '/', 1) AS run_benchmark, e.benchmark AS eval_benchmark,
       e.method, e.variant, e.seed, e.split, e.cycle, e.library_version, e.task_id, e.episode_id,
       e.success::DOUBLE AS success, e.progression, e.completion_tokens AS output_tokens,
       e.n_llm_calls AS llm_calls, e.prompt_tokens, e.cached_tokens, e.n_steps, e.n_invalid_actions,
       e.wall_s, e.termination, coalesce(cost.dollars, 0) AS cost, coalesce(skills.n, 0) AS skill_calls,
       e.filename AS source
FROM episodes e LEFT JOIN cost ON cost.session_id = e.episode_id LEFT JOIN skills ON skills.episode_id = e.episode_id
ORDER BY e.run_id, e.split, e.cycle, e.benchmark, e.task_id, e.episode_id
"""

CALLS_BY_FILE_SQL = f"""
SELECT c.filename, count(*) AS calls, sum(c.completion_tokens) AS output_tokens, sum({_COST}) AS dollars
FROM llm_calls c LEFT JOIN pricing p ON c.model = p.model
GROUP BY c.filename
"""

METRICS = ["score", "success", "progression", "output_tokens", "llm_calls", "skill_calls", "cached_ratio", "cost",
           "invalid_action_rate"]
RUN_KEYS = ["run_benchmark", "eval_benchmark", "method", "variant"]


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
    """What the config declares, as the figures need it, in plain values (`study_of`).

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


def study_of(loop: Any, config_name: str) -> Study:
    """The Study of the loop's typed settings (studies.speedrunner.settings.SpeedRunnerSettings, as a job of kind
    `tables` gets them from start_job) and of the config file's name (its rule's `config_name` param)."""
    return Study(
        variants={v: {"method": m.method, "options": dict(m.options),
                      "benchmarks": None if m.benchmarks is None else list(m.benchmarks)} for v, m in loop.methods.items()},
        benchmarks={b: {"env": d.env, "options": dict(d.options), "after": d.after, "headline": _headline(d.env)}
                    for b, d in loop.benchmarks.items()},
        sleep_every=loop.protocol.sleep_every, train_rollouts=loop.protocol.train_rollouts, config_name=config_name)


# ------------------------------------------------------------------------------------------ other models' runs
def cross_model_tables(label: str, own_model: str, cross_model: dict[str, str], what: str) -> str:
    """The results/tables folder of model `label`'s finished run, for `what` (a figure or table of appendix
    G.2): this run's own when its model is `label`, else the folder of its main.csv in analysis.cross_model
    (which must hold checkpoints.csv and stats.csv). A ValueError says which run is missing and how to make it."""
    if label == own_model:
        return TABLES
    if label not in cross_model:
        raise ValueError(
            f"{what} shows the runs of {label}, but this config's model is {own_model} and analysis.cross_model "
            f"lists {', '.join(cross_model) or 'no run'}: run the main comparison with {label} in its own "
            f"directory (configs/cross-model-{label}.yaml, if the project has that preset) and list its "
            f"results/tables/main.csv under analysis.cross_model.{label}")
    folder = Path(cross_model[label]).parent
    for name in ("main.csv", "checkpoints.csv", "stats.csv"):
        if not (folder / name).is_file():
            raise ValueError(f"{what}: analysis.cross_model.{label} names {cross_model[label]}, but {folder / name} "
                             f"does not exist: finish that run (its target `all`) first")
    return str(folder)


def cross_model_groups(checkpoints: pd.DataFrame, study: Study) -> dict[str, list[str]]:
    """Benchmark -> the variants another model's run shows in its curves (figures 9, 10): this config's main
    comparison where this config declares the benchmark, every variant the run has where it does not."""
    data = own(checkpoints)
    order = [*study.benchmarks, *sorted(set(data.run_benchmark) - set(study.benchmarks))]
    out = {}
    for b in order:
        have = list(dict.fromkeys(data[data.run_benchmark == b].variant))
        chosen = [v for v in study.main_on(b) if v in have] if b in study.benchmarks else have
        if chosen:
            out[b] = chosen
    return out


def cross_model_labels(own_model: str, cross_model: dict[str, str]) -> list[str]:
    """Every model whose runs this config can show: its own first, then analysis.cross_model's in order."""
    return list(dict.fromkeys([own_model, *cross_model]))


def _headline(env: str) -> str:
    """The Episode column the benchmark's tables and figures report (Benchmark.headline)."""
    return benchmark_class(env).headline


# ------------------------------------------------------------------------------------------ records
def _pricing_table(prices: dict[str, Price]) -> pa.Table:
    rows = [{"model": m, "input": p.input, "cached_input": p.cached_input, "output": p.output}
            for m, p in prices.items()]
    schema = pa.schema([("model", pa.string()), ("input", pa.float64()), ("cached_input", pa.float64()),
                        ("output", pa.float64())])
    return pa.Table.from_pylist(rows, schema=schema)


def connect(files: dict[str, Iterable[str | Path]], prices: dict[str, Price]):
    """DuckDB views over exactly `files` (table name -> Parquet files), plus the pricing table."""
    con = store.views({name: [str(f) for f in fs] for name, fs in files.items()})
    con.register("pricing", _pricing_table(prices))
    return con


def episodes(episode_files: Iterable[str | Path], call_files: Iterable[str | Path],
             skill_call_files: Iterable[str | Path], prices: dict[str, Price]) -> pd.DataFrame:
    """One row per episode of the given files, with the dollar cost of its actor calls and the number of
    skill calls its actor made."""
    con = connect({"episodes": episode_files, "llm_calls": call_files, "skill_calls": skill_call_files}, prices)
    return con.execute(EPISODES_SQL).df()


def batch_calls(call_files: Iterable[str | Path], prices: dict[str, Price]) -> pd.DataFrame:
    """Every call of the given training batches (train/batch{k}: the actor's, and a curriculum's) and sleep
    phases (induce/v{k}: the inducer's, and replayed episodes'), totalled per file: one row per (run, cycle,
    phase). Sleep phase v{k} follows training batch k-1, so it is charged to cycle k-1."""
    files = [str(f) for f in call_files]
    cols = ["run_id", "cycle", "phase", "calls", "output_tokens", "dollars"]
    batches = [batch_of(f) for f in files]
    by_file = {}
    if files:
        by_file = {r[0]: r[1:] for r in connect({"llm_calls": files}, prices).execute(CALLS_BY_FILE_SQL).fetchall()}
    rows = []
    for f, (run, cycle, phase) in zip(files, batches):
        calls, out, dollars = by_file.get(f, (0, 0, 0.0))
        rows.append([run, cycle, phase, calls, out or 0, dollars or 0.0])
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
                llm_calls=("llm_calls", "mean"), skill_calls=("skill_calls", "mean"), cost=("cost", "mean"),
                wall_s=("wall_s", "mean"))
    sums = g[["cached_tokens", "prompt_tokens", "n_invalid_actions", "n_steps"]].sum()
    # unknown (NaN) where any episode's server did not report cached tokens, never a partial sum read as 0
    known = test.cached_tokens.notna().groupby([test[k] for k in [*RUN_KEYS, "seed", "library_version"]]).all()
    out["cached_ratio"] = (sums.cached_tokens / sums.prompt_tokens.where(sums.prompt_tokens > 0)).where(known)
    out["invalid_action_rate"] = sums.n_invalid_actions / sums.n_steps.where(sums.n_steps > 0)
    out = out.reset_index()
    out.insert(out.columns.get_loc("library_version") + 1, "train_rollouts",
               [study.offset(b) + v * study.sleep_every for b, v in zip(out.run_benchmark, out.library_version)])
    return out


# How an episode can end (agent.Actor.run), in the terminations table's column order; the flagged ones are not an
# end the benchmark gives, so a score they carry says nothing of the method.
TERMINATIONS = ("success", "env_done", "budget", "wall_clock", "context")
FLAGGED = {"context": "the prompt outgrew the model's context window (benchmark history_window bounds it)"}


def termination_counts(test: pd.DataFrame, train: pd.DataFrame) -> pd.DataFrame:
    """Episodes by how they ended, per (run benchmark, eval benchmark, method, variant), split and library
    version (a test checkpoint, or the library a training batch played), summed over seeds; `flag` names
    every episode that ended other than by the benchmark's own ends (FLAGGED), empty when none did."""
    keys = [*RUN_KEYS, "split", "library_version"]
    both = pd.concat([f.assign(split=name) for name, f in (("test", test), ("train", train)) if not f.empty])
    if both.empty:
        return pd.DataFrame(columns=[*keys, "episodes", *TERMINATIONS, "flag"])
    unknown = set(both.termination) - set(TERMINATIONS)
    if unknown:  # a new end the table would drop silently
        raise ValueError(f"episodes ended by {sorted(unknown)}, which the terminations table does not know")
    out = (both.groupby([*keys, "termination"]).size().unstack("termination", fill_value=0)
           .reindex(columns=list(TERMINATIONS), fill_value=0).reset_index())
    out.insert(len(keys), "episodes", out[list(TERMINATIONS)].sum(axis=1))
    out["flag"] = ["; ".join(f"{row[t]} of {row.episodes} episodes ended by {t}: {why}"
                             for t, why in FLAGGED.items() if row[t]) for _, row in out.iterrows()]
    out.columns.name = None
    return out.sort_values(keys, key=lambda c: c.map({"test": 0, "train": 1}) if c.name == "split" else c,
                           ignore_index=True)


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


