"""Metrics over the stored records (DuckDB SQL), the tables built from them, and the figures.

Per-seed metrics are computed first and then averaged over seeds, as the papers report them: a seed's
value is its mean over the test episodes of a checkpoint; a table shows mean and sample s.d. over seeds.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

# Dollar cost of one LLM call from the pricing table; a model without a price costs nothing (the embedded
# and self-hosted models). config.check_config refuses an unpriced model on a billed backend.
_COST = """
    ((c.prompt_tokens - c.cached_tokens) * coalesce(p.input, 0)
     + c.cached_tokens * coalesce(p.cached_input, p.input, 0)
     + c.completion_tokens * coalesce(p.output, 0)) / 1e6
"""

CHECKPOINT_SQL = f"""
WITH cost AS (
    SELECT c.session_id, sum({_COST}) AS dollars
    FROM llm_calls c LEFT JOIN pricing p ON c.model = p.model
    WHERE c.role = 'actor'
    GROUP BY c.session_id
)
SELECT e.benchmark, e.method, e.variant, e.seed, e.library_version,
       e.library_version * $sleep_every AS train_rollouts,
       count(*) AS n_episodes,
       avg(e.success::DOUBLE) AS success,
       avg(e.progression) AS progression,
       avg(e.completion_tokens) AS output_tokens,
       avg(e.n_llm_calls) AS llm_calls,
       sum(e.cached_tokens)::DOUBLE / nullif(sum(e.prompt_tokens), 0) AS cached_ratio,
       avg(coalesce(cost.dollars, 0)) AS cost,
       sum(e.n_invalid_actions)::DOUBLE / nullif(sum(e.n_steps), 0) AS invalid_action_rate,
       avg(e.wall_s) AS wall_s
FROM episodes e LEFT JOIN cost ON cost.session_id = e.episode_id
WHERE e.split = 'test'
GROUP BY ALL
ORDER BY ALL
"""

TRAINING_SQL = """
SELECT benchmark, method, variant, seed, cycle, task_id, success, progression, completion_tokens,
       n_llm_calls, prompt_tokens, cached_tokens, termination, wall_s, episode_id
FROM episodes WHERE split = 'train'
ORDER BY benchmark, variant, seed, cycle, episode_id
"""

METRICS = ["success", "progression", "output_tokens", "llm_calls", "cached_ratio", "cost", "invalid_action_rate"]


def _pricing_table(pricing: dict[str, dict[str, float]]) -> pa.Table:
    rows = [{"model": m, "input": p["input"], "cached_input": p.get("cached_input"), "output": p["output"]}
            for m, p in pricing.items()]
    schema = pa.schema([("model", pa.string()), ("input", pa.float64()), ("cached_input", pa.float64()),
                        ("output", pa.float64())])
    return pa.Table.from_pylist(rows, schema=schema)


def checkpoint_metrics(con, pricing: dict[str, Any], sleep_every: int) -> pd.DataFrame:
    """One row per (benchmark, method, variant, seed, library version) over that checkpoint's test episodes."""
    con.register("pricing", _pricing_table(pricing))
    return con.execute(CHECKPOINT_SQL, {"sleep_every": sleep_every}).df()


def training_episodes(con) -> pd.DataFrame:
    return con.execute(TRAINING_SQL).df()


def over_seeds(per_seed: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Mean and sample s.d. over seeds of every metric (s.d. is empty with a single seed)."""
    g = per_seed.groupby(keys, sort=True)
    out = g.agg(n_seeds=("seed", "nunique"), n_episodes=("n_episodes", "sum"))
    for m in METRICS:
        out[f"{m}_mean"] = g[m].mean()
        out[f"{m}_sd"] = g[m].std(ddof=1)
    return out.reset_index()


def main_table(per_seed: pd.DataFrame) -> pd.DataFrame:
    """The final checkpoint of every (benchmark, method, variant)."""
    keys = ["benchmark", "method", "variant"]
    final = per_seed[per_seed["library_version"] == per_seed.groupby(keys)["library_version"].transform("max")]
    table = over_seeds(final, keys + ["library_version", "train_rollouts"])
    return table.rename(columns={"llm_calls_mean": "llm_calls_per_episode", "cached_ratio_mean": "cached_token_ratio",
                                 "cost_mean": "cost_per_episode", "output_tokens_mean": "output_tokens_per_episode_mean",
                                 "output_tokens_sd": "output_tokens_per_episode_sd"})


def checkpoint_table(per_seed: pd.DataFrame) -> pd.DataFrame:
    return over_seeds(per_seed, ["benchmark", "method", "variant", "library_version", "train_rollouts"])


def plot_learning_curves(checkpoints: pd.DataFrame, out: str | Path) -> None:
    """Success and output tokens per episode against training rollouts, mean ± s.d. over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    benches = sorted(checkpoints["benchmark"].unique())
    fig, axes = plt.subplots(len(benches), 2, figsize=(10, 3.6 * len(benches)), squeeze=False)
    for row, bench in zip(axes, benches):
        data = checkpoints[checkpoints["benchmark"] == bench]
        for variant, d in data.groupby("variant"):
            d = d.sort_values("train_rollouts")
            for ax, metric in zip(row, ["success", "output_tokens"]):
                mean, sd = d[f"{metric}_mean"], d[f"{metric}_sd"].fillna(0)
                ax.plot(d["train_rollouts"], mean, marker="o", label=variant)
                ax.fill_between(d["train_rollouts"], mean - sd, mean + sd, alpha=0.2)
        row[0].set(title=f"{bench}: test success", xlabel="training rollouts", ylabel="success rate", ylim=(-0.05, 1.05))
        row[1].set(title=f"{bench}: output tokens per episode", xlabel="training rollouts", ylabel="tokens")
        row[0].legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
