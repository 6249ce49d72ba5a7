"""Held-out evaluation (seed 002, appendix A.1): every policy played skill-free on the held-out splits, and tables 1,
2, 3 and 6 and figures 1 and 7 from those episodes and the training iterations' records."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from skillrepro.studies.scaffold.paths import DIRECT, HeldoutPolicy
from skillrepro.studies.scaffold.settings import BASELINE, Chain
from skillrepro.studies.scaffold.statistics import exact_interval, interval_label, mean_interval, pass_at_k


# ALFRED's task type (an official game's folder name starts with it) -> the benchmark's short name, which its
# generated games carry in their ids (gen:<short name>:<seed>); table 1's Pick, Look, Clean, Heat, Cool, Pick2.
ALFRED_TYPES = {"pick_and_place_simple": "pick_and_place", "look_at_obj_in_light": "look_at_obj_in_light",
                "pick_clean_then_place_in_recep": "clean", "pick_heat_then_place_in_recep": "heat",
                "pick_cool_then_place_in_recep": "cool", "pick_two_obj_and_place": "pick_two"}


def task_category(env: str, task_id: str) -> str:
    """The task category table 1 breaks success down by: ALFWorld's task type (pick, heat, ..., from the id),
    ScienceWorld's task name; "all" where a benchmark has none (BabyAI)."""
    task_id = str(task_id)
    if env == "alfworld":
        if task_id.startswith("gen:"):
            return task_id.split(":")[1]
        long_type = task_id.split("/")[1].split("-")[0] if task_id.count("/") >= 2 else ""
        return ALFRED_TYPES.get(long_type, "other")
    if env == "scienceworld":
        return task_id.rpartition(":")[0] or "all"
    return "all"


# The base model's row: the ReAct agent (the actor every policy plays with) on the untrained model, skill-free; the
# paper's ReAct row (tables 1 and 2) is the same prompt-based baseline on its base model.
BASE_METHOD = "ReAct (base model, skill-free)"
# The paper's "direct skill prompting" (table 1's "w/ Skill"): the base model played with a card in its notes.
DIRECT_METHOD = "direct skill prompting (base model, with a card)"
HELDOUT_COLUMNS = ["benchmark", "split", "category", "chain", "method", "checkpoint", "n_tasks", "n_episodes",
                   "success_pct", "ci_low_pct", "ci_high_pct"]


def heldout_variant(split: str, rollout: int) -> str:
    """Episode.variant of a held-out episode: heldout/{split}/r{rollout}."""
    return f"heldout/{split}/r{rollout}"


def parse_heldout_variant(variant: Any) -> Any:
    """(split, rollout) columns of a Series of held-out Episode.variant values."""
    parsed = variant.str.extract(r"^heldout/(?P<split>[\w-]+)/r(?P<rollout>\d+)$")
    if parsed.split.isna().any():
        raise ValueError(f"held-out episodes with an unexpected variant: {sorted(variant[parsed.split.isna()].unique())}")
    return parsed.assign(rollout=parsed.rollout.astype(int))


def _with_split(episodes: Any) -> Any:
    """Held-out episodes with their held-out split and rollout index (from Episode.variant; Episode.split is just
    "test" for every one of them)."""
    return episodes.drop(columns=["split"], errors="ignore").reset_index(drop=True).join(
        parse_heldout_variant(episodes.variant.reset_index(drop=True)))


def heldout_policies(bench: str, chains: Sequence[Chain], checkpoints: Sequence[int], direct: bool = False
                     ) -> list[HeldoutPolicy]:
    """Every policy evaluated on `bench`: the base model (llm.model, checkpoint 0 of every chain, played once),
    with `direct` the base model with a card, and each chain's checkpoints but 0."""
    return ([HeldoutPolicy(bench)] + ([HeldoutPolicy(bench, DIRECT)] if direct else [])
            + [HeldoutPolicy(bench, c.name, k) for c in chains for k in checkpoints if k > 0])


def heldout_table(episodes: Any, env_of: dict[str, str], chains: Sequence[Chain]) -> Any:
    """Success per benchmark x split x category x policy, long form. `episodes`: held-out Episode rows with
    `chain` ("" for the base model) and `checkpoint`. Category `all` pools a split's episodes, split `all` a
    benchmark's held-out episodes (the paper's ScienceWorld Avg. is the pooled 230 + 155 episodes: 77.1 from
    96.2 and 48.8). The base model's row stands for checkpoint 0 of every chain.

    ci_low_pct / ci_high_pct: the exact (Clopper-Pearson) 95 % interval over the row's n_tasks tasks, each task
    counting its success rate (`success_interval`)."""
    e = _with_split(episodes)
    e = e.assign(category=[task_category(env_of[b], t) for b, t in zip(e.benchmark, e.task_id)],
                 success=e.success.astype(float))
    label = {c.name: c.method for c in chains} | {DIRECT: DIRECT_METHOD}
    rows = []

    def add(g: Any, b: str, split: str, cat: str) -> None:
        for (chain, k), h in g.groupby(["chain", "checkpoint"]):
            lo, hi = success_interval(h)
            rows.append({"benchmark": b, "split": split, "category": cat, "chain": chain,
                         "method": label.get(chain, BASE_METHOD), "checkpoint": int(k),
                         "n_tasks": h.task_id.nunique(), "n_episodes": len(h), "success_pct": 100 * h.success.mean(),
                         "ci_low_pct": 100 * lo, "ci_high_pct": 100 * hi})

    for b, g in e.groupby("benchmark"):
        add(g, b, "all", "all")
        for split, h in g.groupby("split"):
            add(h, b, split, "all")
            if h.category.nunique() > 1:
                for cat, c in h.groupby("category"):
                    add(c, b, split, cat)
    return pd.DataFrame(rows, columns=HELDOUT_COLUMNS)


def success_interval(episodes: Any) -> tuple[float, float]:
    """A 95 % interval (fractions) for the success of one policy's held-out episodes: the exact Clopper-Pearson
    interval of k = the sum of the tasks' success rates in n = their number. With one rollout per task that is the
    binomial interval of the episodes; with several, rollouts of one task are not independent, and counting each
    task once as a trial with its mean success is conservative (a task mean varies no more than one Bernoulli
    trial of the same mean)."""
    rate = episodes.groupby(["split", "task_id"] if "split" in episodes else "task_id").success.mean()
    return exact_interval(float(rate.sum()), len(rate))


def final_rows(table: Any) -> Any:
    """The rows of each chain's last evaluated checkpoint, and the base model's."""
    last = table.groupby("chain").checkpoint.transform("max")
    return table[table.checkpoint == last]


def table_by_category(table: Any) -> Any:
    """Tables 1 (WebShop, ALFWorld): success per task category and overall, one row per benchmark x split x
    method at the final checkpoints; category columns are the benchmark's own (NaN elsewhere)."""
    t = final_rows(table[table.split != "all"])
    wide = t.pivot_table(index=["benchmark", "split", "method", "checkpoint"], columns="category",
                         values="success_pct").reset_index()
    cats = sorted(c for c in wide.columns if c not in ("benchmark", "split", "method", "checkpoint", "all"))
    avg = t[t.category == "all"].set_index(["benchmark", "split", "method"])
    key = list(zip(wide.benchmark, wide.split, wide.method))
    for col, src in (("n_tasks", "n_tasks"), ("avg_ci_low", "ci_low_pct"), ("avg_ci_high", "ci_high_pct")):
        wide[col] = [avg[src].get(k) for k in key]
    wide = wide.rename(columns={"all": "avg"})
    return wide[["benchmark", "split", "method", "checkpoint", "n_tasks"] + cats + ["avg", "avg_ci_low", "avg_ci_high"]]


def table_by_split(table: Any) -> Any:
    """Table 2 (ScienceWorld ID / OOD): success per held-out split and pooled (avg, with its exact 95 % interval over
    the pooled n_tasks), final checkpoints."""
    t = final_rows(table[table.category == "all"])
    wide = t.pivot_table(index=["benchmark", "method", "checkpoint"], columns="split", values="success_pct").reset_index()
    splits = sorted(c for c in wide.columns if c not in ("benchmark", "method", "checkpoint", "all"))
    pooled = t[t.split == "all"].set_index(["benchmark", "method"])
    key = list(zip(wide.benchmark, wide.method))
    for col, src in (("n_tasks", "n_tasks"), ("avg_ci_low", "ci_low_pct"), ("avg_ci_high", "ci_high_pct")):
        wide[col] = [pooled[src].get(k) for k in key]
    return wide.rename(columns={"all": "avg"})[["benchmark", "method", "checkpoint", "n_tasks"] + splits +
                                               ["avg", "avg_ci_low", "avg_ci_high"]]


VARIANT_COLUMNS = ["benchmark", "chain", "method", "utility_variant", "selection", "gate", "generator_learning",
                   "inject", "checkpoint", "n_tasks", "n_episodes", "success_pct", "ci_low_pct", "ci_high_pct",
                   "vs_base_pp", "vs_base_ci_low", "vs_base_ci_high", "vs_grpo_pp", "vs_grpo_ci_low", "vs_grpo_ci_high",
                   "paired_interval"]


def table_variants(table: Any, chains: Sequence[Chain], episodes: Any = None) -> Any:
    """Table 3's metric: each trained chain's pooled held-out success at its last checkpoint, per benchmark,
    beside the chain's settings (which ablation it is), with its exact 95 % interval. With `episodes` (the held-out
    episodes `heldout_table` read): the paired difference from the base model and from plain GRPO's last
    checkpoint over the tasks both played (`paired_difference`)."""
    import math

    t = final_rows(table[(table.split == "all") & (table.chain != "") & (table.chain != DIRECT)])
    last = dict(zip(zip(t.benchmark, t.chain), t.checkpoint))
    by = {c.name: c for c in chains}
    rows = []
    for r in t.itertuples():
        row = {"benchmark": r.benchmark, "chain": r.chain, "method": r.method, "utility_variant": by[r.chain].of or "",
               "selection": by[r.chain].selection if by[r.chain].of else "", "gate": by[r.chain].gate,
               "generator_learning": by[r.chain].generator_learning, "inject": by[r.chain].inject,
               "checkpoint": r.checkpoint, "n_tasks": r.n_tasks, "n_episodes": r.n_episodes,
               "success_pct": r.success_pct, "ci_low_pct": r.ci_low_pct, "ci_high_pct": r.ci_high_pct}
        labels = []
        for name, other in (("base", ("", 0)), ("grpo", (BASELINE, last.get((r.benchmark, BASELINE))))):
            d = (paired_difference(episodes, r.benchmark, (r.chain, r.checkpoint), other)
                 if episodes is not None and other[1] is not None and other[0] != r.chain else None)
            mean, lo, hi, label = d if d else (math.nan, math.nan, math.nan, "")
            row.update({f"vs_{name}_pp": mean, f"vs_{name}_ci_low": lo, f"vs_{name}_ci_high": hi})
            labels += [f"vs {name}: {label}"] if label else []
        rows.append({**row, "paired_interval": "; ".join(labels)})
    return pd.DataFrame(rows, columns=VARIANT_COLUMNS)


def paired_difference(episodes: Any, benchmark: str, policy: tuple[str, int], other: tuple[str, int],
                      interval: str = "t") -> tuple[float, float, float, str] | None:
    """Held-out success of `policy` minus `other` ((chain, checkpoint); ("", 0) is the base model) in points over
    the tasks both played, each task's success rate differenced (paired), with a 95 % interval over those tasks
    (`mean_interval`, Student t by default: NaN below its minimum n) and its label. None where no task is shared."""
    e = _with_split(episodes[episodes.benchmark == benchmark])
    e = e.assign(success=e.success.astype(float))

    def rates(chain: str, k: int) -> Any:
        return e[(e.chain == chain) & (e.checkpoint == k)].groupby(["split", "task_id"]).success.mean()

    a, b = rates(*policy), rates(*other)
    both = a.index.intersection(b.index)
    if not len(both):
        return None
    diff = 100 * (a.loc[both] - b.loc[both]).to_numpy()
    if len(diff) > 1 and np.ptp(diff) == 0:
        # every task differs alike (both chains fail every task, say): the interval would have no width, a 95 %
        # claim the data cannot support, so none is printed
        return float(diff[0]), float("nan"), float("nan"), f"no interval: all {len(diff)} tasks differ by the same"
    lo, hi = mean_interval(diff, interval=interval)
    return float(np.mean(diff)), lo, hi, interval_label(len(diff), interval).replace("queries", "tasks")


def table_pass_at_k(episodes: Any, ks: Sequence[int] = (1, 4, 8)) -> Any:
    """Table 6: Pass@k (%) per benchmark x split x policy, the mean over tasks of `pass_at_k` from the task's
    held-out rollouts, for every k up to the rollouts per task; split `macro` averages the splits (the paper's
    tau2 Average columns are macro averages over its domains). ci_low_pct / ci_high_pct: the exact 95 % interval
    of `success_interval` over the tasks (a task's Pass@k lies in [0, 1], so counting it as one trial is
    conservative); none for `macro`."""
    e = _with_split(episodes)
    per = e.groupby(["benchmark", "split", "chain", "method", "checkpoint", "task_id"]).success.agg(["size", "sum"])
    rows = []
    for (b, split, chain, method, ckpt), g in per.groupby(level=[0, 1, 2, 3, 4]):
        for k in ks:
            if k <= g["size"].min():
                total = float(sum(pass_at_k(n, c, k) for n, c in zip(g["size"], g["sum"])))
                lo, hi = exact_interval(total, len(g))
                rows.append({"benchmark": b, "split": split, "chain": chain, "method": method, "checkpoint": int(ckpt),
                             "k": k, "n_tasks": len(g), "pass_at_k_pct": 100 * total / len(g),
                             "ci_low_pct": 100 * lo, "ci_high_pct": 100 * hi})
    out = pd.DataFrame(rows, columns=["benchmark", "split", "chain", "method", "checkpoint", "k", "n_tasks", "pass_at_k_pct",
                                      "ci_low_pct", "ci_high_pct"])
    macro = (out.groupby(["benchmark", "chain", "method", "checkpoint", "k"])
             .agg(n_tasks=("n_tasks", "sum"), pass_at_k_pct=("pass_at_k_pct", "mean")).reset_index().assign(split="macro"))
    return pd.concat([out, macro.reindex(columns=out.columns)], ignore_index=True)


def training_curve(scouts: Any, smoothing: float = 0.6) -> Any:
    """Figure 7's training success-rate curves: per chain and iteration, the success rate of the iteration's
    skill-free Scouts (the one training rollout every chain, plain GRPO included, plays the same way), raw and
    smoothed by an exponential moving average (`smoothing`: the weight of the past). `scouts`: Scout episodes
    with benchmark, chain, iteration, success."""
    rows = []
    for (b, chain), g in scouts.groupby(["benchmark", "chain"]):
        ema = None
        for j, h in g.groupby("iteration"):
            raw = float(h.success.astype(float).mean())
            ema = raw if ema is None else smoothing * ema + (1 - smoothing) * raw
            rows.append({"benchmark": b, "chain": chain, "iteration": int(j), "n_episodes": len(h),
                         "success_pct": 100 * raw, "smoothed_pct": 100 * ema})
    return pd.DataFrame(rows, columns=["benchmark", "chain", "iteration", "n_episodes", "success_pct", "smoothed_pct"])


def injection_rates(selections: Any) -> Any:
    """Figure 1's "injecting skills for only a small fraction of training queries": per benchmark and chain, the
    share of training queries (all iterations) whose Post-Scouts got a skill. `selections`: SelectionRecord rows
    with `chain`."""
    cols = ["benchmark", "chain", "n_queries", "injection_pct"]
    if not len(selections):
        return pd.DataFrame(columns=cols)
    g = selections.assign(injected=selections.selected >= 0).groupby(["benchmark", "chain"]).injected
    return pd.DataFrame({"n_queries": g.size(), "injection_pct": 100 * g.mean()}).reset_index()[cols]


EXPLORATION_COLUMNS = ["benchmark", "chain", "iteration", "group", "n_queries", "scout_success",
                       "post_scout_success", "injection_rate", "positive_rate"]
GROUPS = ("all_failure", "mixed", "all_success")


def training_exploration(selections: Any, post: Any, threshold: float = 0.0) -> Any:
    """Figures 6 and 8-12 measured during training: per benchmark, chain and training iteration, and per Scout-group
    kind of the iteration's queries (all_failure, mixed, all_success; `all` pools them), the Scouts' and the
    Post-Scouts' success, the share of queries whose Post-Scouts got a skill (figures 6 and 8) and the share with a
    positive-utility candidate, whose best eligible utility is above `threshold` (figures 9-12's lower row).

    `selections`: SelectionRecord rows with `chain`, `iteration` and `inject` (false where a chain's Post-Scouts stay
    skill-free); `post`: Post-Scout episodes with benchmark, chain, iteration, task_id, success."""
    if not len(selections):
        return pd.DataFrame(columns=EXPLORATION_COLUMNS)
    keys = ["benchmark", "chain", "iteration", "task_id"]
    p = post.assign(success=post.success.astype(float)).groupby(keys).success.mean().rename("post_success")
    s = selections.assign(scout_success=selections.n_success / selections.n_scouts,
                          injected=(selections.selected >= 0) & selections.inject.astype(bool),
                          positive=selections.best_utility > threshold).merge(p.reset_index(), on=keys, how="left")
    rows = []
    for (b, chain, j), g in s.groupby(["benchmark", "chain", "iteration"]):
        for group, h in [("all", g)] + [(k, g[g.kind == k]) for k in GROUPS]:
            if len(h):
                rows.append({"benchmark": b, "chain": chain, "iteration": int(j), "group": group, "n_queries": len(h),
                             "scout_success": float(h.scout_success.mean()),
                             "post_scout_success": float(h.post_success.mean()),
                             "injection_rate": float(h.injected.mean()), "positive_rate": float(h.positive.mean())})
    return pd.DataFrame(rows, columns=EXPLORATION_COLUMNS)
