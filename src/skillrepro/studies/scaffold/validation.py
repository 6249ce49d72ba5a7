"""The validation experiment (seed 002, section 5.4, figure 5), the exploration view (figure 6) and the pilot
diagnostics (section 3, figures 2-3), from the downstream rollouts that evaluate every candidate."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import pandas as pd

from skillrepro.studies.scaffold.statistics import interval_label, mean_interval


RULES = ("skill_free", "random_injection", "forced_top1", "gated_top1")


def decision_rules(utils: "Any", evals: "Any", threshold: float = 0.0) -> "Any":
    """Success rate of the four decision rules on the same query-candidate sets.

    `utils`: one row per (benchmark, variant, task_id, candidate) with utility, eligible.
    `evals`: downstream evaluation success rates per (benchmark, variant, task_id, candidate), candidate -1 =
    skill-free. Random injection is its expectation: the mean over a query's eligible candidates.
    Queries without any evaluated eligible candidate are left out of every rule so all rules share one set.
    """
    rows = []
    keys = ["benchmark", "variant", "task_id"]
    merged = utils[utils.eligible].merge(evals, on=keys + ["candidate"], how="inner")
    base = evals[evals.candidate == -1].set_index(keys)["success_rate"]
    for (b, v, t), g in merged.groupby(keys):
        if (b, v, t) not in base.index:
            continue
        free = float(base.loc[(b, v, t)])
        top = g.sort_values(["utility", "candidate"], ascending=[False, True]).iloc[0]
        rows.append({"benchmark": b, "variant": v, "task_id": t,
                     "skill_free": free,
                     "random_injection": float(g.success_rate.mean()),
                     "forced_top1": float(top.success_rate),
                     "gated_top1": float(top.success_rate) if top.utility > threshold else free})
    per_query = pd.DataFrame(rows, columns=keys + list(RULES))
    out = []
    for (b, v), g in per_query.groupby(["benchmark", "variant"]):
        for r in RULES:
            out.append({"benchmark": b, "variant": v, "rule": r, "success_rate": float(g[r].mean()),
                        "n_queries": len(g)})
    return pd.DataFrame(out, columns=["benchmark", "variant", "rule", "success_rate", "n_queries"])


def utility_quintiles(utils: "Any", evals: "Any", n_bins: int = 5) -> "Any":
    """Mean measured gain over skill-free execution per utility quintile of the query-candidate pairs.

    Bins are equal-count by rank (so ties in utility never leave a bin empty); with fewer pairs than bins,
    there are as many bins as pairs."""
    keys = ["benchmark", "variant", "task_id"]
    base = evals[evals.candidate == -1][keys + ["success_rate"]].rename(columns={"success_rate": "free"})
    pairs = utils[utils.eligible].merge(evals, on=keys + ["candidate"]).merge(base, on=keys)
    pairs["gain"] = pairs.success_rate - pairs.free
    out = []
    for (b, v), g in pairs.groupby(["benchmark", "variant"]):
        g = g.sort_values(["utility", "task_id", "candidate"]).reset_index(drop=True)
        k = min(n_bins, len(g))
        g["quintile"] = [1 + (i * k) // len(g) for i in range(len(g))]
        for q, h in g.groupby("quintile"):
            out.append({"benchmark": b, "variant": v, "quintile": int(q), "n_pairs": len(h),
                        "utility_min": float(h.utility.min()), "utility_max": float(h.utility.max()),
                        "utility_mean": float(h.utility.mean()), "mean_gain": float(h.gain.mean())})
    return pd.DataFrame(out, columns=["benchmark", "variant", "quintile", "n_pairs", "utility_min", "utility_max",
                                      "utility_mean", "mean_gain"])


def exploration_view(selections: "Any", post: "Any") -> "Any":
    """Figure 6: Scout vs Post-Scout success and injection rate per Scout-group kind.

    `selections`: SelectionRecord rows. `post`: Post-Scout episodes with benchmark, variant, task_id, success."""
    keys = ["benchmark", "variant", "task_id"]
    p = post.groupby(keys).success.mean().rename("post_success").reset_index()
    s = selections.assign(scout_success=selections.n_success / selections.n_scouts,
                          injected=selections.selected >= 0).merge(p, on=keys, how="left")
    out = []
    for (b, v, k), g in s.groupby(["benchmark", "variant", "kind"]):
        out.append({"benchmark": b, "variant": v, "group": k, "n_queries": len(g),
                    "scout_success": float(g.scout_success.mean()),
                    "post_scout_success": float(g.post_success.mean()),
                    "injection_rate": float(g.injected.mean())})
    return pd.DataFrame(out, columns=["benchmark", "variant", "group", "n_queries", "scout_success",
                                      "post_scout_success", "injection_rate"])


def rollout_outcomes(free: Any, cand: Any, variants: Sequence[str]) -> Any:
    """One row per downstream rollout: benchmark, variant, task_id, candidate (-1: skill-free), k (the
    rollout's index within its condition), success. `free`/`cand` are evaluation episodes with a `k` column."""
    cols = ["benchmark", "variant", "task_id", "candidate", "k", "success"]
    rows = [free.assign(variant=v, candidate=-1)[cols] for v in variants]
    if len(cand):
        parsed = cand.variant.str.extract(r"^(?P<v>[\w-]+)/eval/c(?P<c>\d+)$")
        rows.append(cand.assign(variant=parsed.v, candidate=parsed.c.astype(int))[cols])
    out = pd.concat(rows, ignore_index=True)
    return out.assign(success=out.success.astype(float)).sort_values(cols[:5], ignore_index=True)


def pilot_rollout_estimates(outcomes: Any, ks: Sequence[int] | None = None) -> Any:
    """Figure 2: rollout-based utility U_DR (eq. 4) at budget K per condition. Sign disagreement: two
    estimates from disjoint rollouts (indices 0..K-1 and K..2K-1) both non-zero with opposite signs, over
    all candidate-query pairs. Non-tied: a query's candidates do not all get the same estimate (first K
    rollouts). Cost: (M+1)K extra rollouts per query, against none for the likelihood utility."""
    keys = ["benchmark", "variant", "task_id"]
    n_roll = int(outcomes.groupby(keys + ["candidate"]).k.nunique().min()) if len(outcomes) else 0
    # the configured K (ScaffoldConfig.figure2_ks: K <= n_eval, checked at config time); an empty list: no rows.
    # Sign disagreement (2(a)) only where 2K rollouts are there: NaN, with n_pairs_split 0, elsewhere
    ks = [k for k in ([1, 2, 4, 8, 16] if ks is None else ks) if k <= n_roll]
    rows = []
    for (b, v), g in outcomes.groupby(["benchmark", "variant"]):
        for K in ks:
            def est(lo: int, hi: int) -> Any:
                m = g[(g.k >= lo) & (g.k < hi)].groupby(keys + ["candidate"]).success.mean().unstack("candidate")
                return m.drop(columns=-1).sub(m[-1], axis=0)  # U_DR per query x candidate

            first = est(0, K)
            n_m = first.notna().sum(axis=1)
            tied = first.nunique(axis=1) <= 1
            dis, pairs = math.nan, 0
            if 2 * K <= n_roll:
                second = est(K, 2 * K)
                both = first.notna() & second.notna()
                pairs = int(both.values.sum())
                opposite = (first * second < 0) & both
                dis = float(opposite.values.sum()) / pairs if pairs else math.nan
            rows.append({"benchmark": b, "variant": v, "K": K, "n_queries": len(first), "n_pairs_split": pairs,
                         "sign_disagreement": dis, "non_tied_fraction": float((~tied).mean()),
                         "extra_rollouts_per_query": float(((n_m + 1) * K).mean())})
    return pd.DataFrame(rows, columns=["benchmark", "variant", "K", "n_queries", "n_pairs_split", "sign_disagreement",
                                       "non_tied_fraction", "extra_rollouts_per_query"])


COMPETENCE_COLUMNS = ["benchmark", "variant", "probe_successes", "n_probes", "n_queries", "mean_effect",
                      "mean_effect_ci_low", "mean_effect_ci_high", "interval", "best_effect", "best_effect_null_mean",
                      "best_effect_null_low", "best_effect_null_high", "one_card_effect_80", "queries_with_mixed_signs"]
EFFECTS = tuple(round(0.1 * i, 1) for i in range(1, 11))  # the one-card effects `detectable_effect` tries


def split_probes(free: Any, n_eval: int) -> tuple[Any, Any]:
    """(baseline, probes) of the skill-free evaluation rollouts: rollouts k < n_eval are the skill-free baseline
    every candidate is compared with, k >= n_eval the competence probes of figure 3(b) (evaluation-only, never
    part of the baseline)."""
    return free[free.k < n_eval], free[free.k >= n_eval]


def pilot_competence(outcomes: Any, probes: Any, n_probes: int = 4, n_boot: int = 2000, seed: int = 0,
                     interval: str = "expanded") -> Any:
    """Figure 3: per query, candidate effects U_DR (each candidate's success rate minus the skill-free
    baseline's, `outcomes` as from `rollout_outcomes`) against skill-free competence: the number of
    successful probes among `n_probes` independent skill-free probe rollouts of the same policy (`probes`:
    benchmark, task_id, k, success; section 3: "four independent skill-free probe rollouts", never part
    of the baseline, which would tie a query's competence level to its baseline and bias every effect).
    Reports per competence level the mean effect with a 95 % query-level interval (`competence_levels`), the best
    effect with its permutation null band, and how many queries hold both a positive and a negative candidate
    (figure 3a). Queries with fewer than `n_probes` probes are left out."""
    keys = ["benchmark", "variant", "task_id"]
    free = outcomes[outcomes.candidate == -1]
    same = free[["benchmark", "task_id", "k"]].drop_duplicates().merge(probes[["benchmark", "task_id", "k"]])
    if len(same):
        raise ValueError(f"probe rollouts {same.head(3).values.tolist()} are also skill-free baseline rollouts: "
                         "competence probes must be independent of the baseline")
    p = probes.sort_values("k").groupby(["benchmark", "task_id"]).head(n_probes)
    p = p.groupby(["benchmark", "task_id"]).success.agg(["sum", "size"]).reset_index()
    p = p[p["size"] >= n_probes].rename(columns={"sum": "probe_successes"})
    base = free.groupby(keys).success.mean().rename("free").reset_index()
    cand = outcomes[outcomes.candidate >= 0].groupby(keys + ["candidate"]).success.mean().reset_index()
    per = (cand.merge(base, on=keys).merge(p[["benchmark", "task_id", "probe_successes"]], on=["benchmark", "task_id"])
           .pivot_table(index=keys + ["free", "probe_successes"], columns="candidate", values="success")
           .reset_index())
    rows = []
    for (b, v), g in per.groupby(["benchmark", "variant"]):
        cands = g.drop(columns=keys + ["free", "probe_successes"]).to_numpy(float)
        n_rollouts = int(outcomes[outcomes.candidate == -1].groupby(keys).k.nunique().min())
        for r in competence_levels(g.probe_successes.to_numpy(int), g.free.to_numpy(float), cands, n_boot, seed,
                                   interval, n_rollouts=n_rollouts):
            rows.append({"benchmark": b, "variant": v, "n_probes": n_probes, **r})
    return pd.DataFrame(rows, columns=COMPETENCE_COLUMNS)


def competence_levels(probe_successes: Any, free_rate: Any, cand_rate: Any, n_boot: int = 2000, seed: int = 0,
                      interval: str = "expanded", n_perm: int = 2000, n_rollouts: int | None = None) -> list[dict[str, Any]]:
    """Figure 3(b) from per-query arrays: probe successes (Q,), skill-free baseline success rate (Q,) and
    candidate success rates (Q, M; NaN where a candidate was not evaluated). One row per competence level: the mean
    effect with a 95 % interval over the level's queries (`mean_interval`; NaN below its minimum n, and `interval`
    says so), the mean best effect, and `best_effect_null_*`, where the best effect lies when skills do nothing
    (`best_effect_null`): the best of M noisy effects is positive on null data, so only a best effect above the
    band's top says a candidate beats chance. With `n_rollouts` (rollouts per condition), `one_card_effect_80`:
    the smallest effect of one card of M the band finds in 80 % of such levels (`detectable_effect`)."""
    levels = np.asarray(probe_successes, int)
    free = np.asarray(free_rate, float)
    cand = np.asarray(cand_rate, float)
    effects = cand - free[:, None]
    has = ~np.isnan(effects).all(axis=1)
    rows = []
    for level in sorted(set(levels[has].tolist())):
        at = has & (levels == level)
        e = effects[at]
        mean = np.nanmean(e, axis=1)
        lo, hi = mean_interval(mean, n_boot, seed, interval)
        null = best_effect_null(free[at], cand[at], n_perm, seed)
        rows.append({"probe_successes": int(level), "n_queries": len(e), "mean_effect": float(mean.mean()),
                     "mean_effect_ci_low": lo, "mean_effect_ci_high": hi, "interval": interval_label(len(e), interval),
                     "best_effect": float(np.nanmax(e, axis=1).mean()), "best_effect_null_mean": float(null.mean()),
                     "best_effect_null_low": float(np.percentile(null, 2.5)),
                     "best_effect_null_high": float(np.percentile(null, 97.5)),
                     "one_card_effect_80": (detectable_effect(free[at], cand.shape[1], n_rollouts, seed=seed)
                                            if n_rollouts else float("nan")),
                     "queries_with_mixed_signs": int(((e > 0).any(axis=1) & (e < 0).any(axis=1)).sum())})
    return rows


def one_card_power(base_rate: Any, m: int, k: int, effect: float, sims: int = 200, seed: int = 0,
                   n_perm: int = 400) -> float:
    """How often figure 3(b)'s band finds one helpful card: the fraction of `sims` simulated levels (one query per
    entry of `base_rate`, its skill-free success probability; `k` rollouts per condition; `m` candidates, one of
    them `effect` better, the others no different) whose mean best effect lies above the null band's top."""
    rng = np.random.default_rng(seed)
    p = np.clip(np.asarray(base_rate, float), 0.0, 1.0)
    lift = np.zeros(m)
    lift[0] = effect
    found = 0
    for s in range(sims):
        free = rng.binomial(k, p) / k
        cand = rng.binomial(k, np.clip(p[:, None] + lift, 0, 1), (len(p), m)) / k
        null = best_effect_null(free, cand, n_perm, seed + s)
        found += (cand - free[:, None]).max(axis=1).mean() > np.percentile(null, 97.5)
    return found / sims


def detectable_effect(base_rate: Any, m: int, k: int, power: float = 0.8, seed: int = 0) -> float:
    """The smallest effect of `EFFECTS` that one card of `m` needs for the band to find it in `power` of levels
    like this one (`one_card_power`, the level's observed skill-free rates as its queries' probabilities); NaN if
    none does (an effect can only lift a query to success rate 1)."""
    for effect in EFFECTS:
        if one_card_power(base_rate, m, k, effect, sims=100, seed=seed, n_perm=200) >= power:
            return effect
    return float("nan")


def best_effect_null(free_rate: Any, cand_rate: Any, n_perm: int = 2000, seed: int = 0) -> Any:
    """The mean best effect of these queries under permutation of their conditions' labels (n_perm values).

    Per query the skill-free baseline and its evaluated candidates (equal rollouts each) are exchangeable when no
    card changes success: each permutation makes a uniformly drawn one of them the baseline and the others the
    candidates, and takes the best effect over those. On null data the observed mean best effect is one more draw
    of this distribution (its 2.5-97.5 % percentiles hold it about 95 % of the time); a card that helps puts the
    observed value above it."""
    c = np.column_stack([np.asarray(free_rate, float), np.asarray(cand_rate, float)])
    valid = ~np.isnan(c)
    order = np.argsort(~valid, axis=1, kind="stable")  # evaluated conditions first
    packed = np.take_along_axis(c, order, axis=1)
    v = valid.sum(axis=1)  # conditions per query (>= 2 where a candidate was evaluated)
    filled = np.where(np.arange(c.shape[1]) < v[:, None], packed, -np.inf)
    arg1 = filled.argmax(axis=1)
    top1 = filled.max(axis=1)
    top2 = np.where(np.arange(c.shape[1]) == arg1[:, None], -np.inf, filled).max(axis=1)
    rng = np.random.default_rng(seed)
    b = (rng.random((n_perm, len(c))) * v).astype(int)  # the permuted baseline, one per query and permutation
    base = np.take_along_axis(packed, b.T, axis=1).T
    best = np.where(b == arg1, top2, top1) - base
    return best.mean(axis=1)


def eval_table(free: Any, cand: Any, variants: Sequence[str]) -> Any:
    """Downstream success rates per (benchmark, variant, task_id, candidate) from evaluation episodes.

    `free`: skill-free evaluation episodes (shared by the variants, candidate -1); `cand`: candidate
    episodes whose Episode.variant is '{variant}/eval/c{j}'."""
    cols = ["benchmark", "variant", "task_id", "candidate", "success_rate", "n_rollouts"]
    rows = []
    for (b, t), g in free.groupby(["benchmark", "task_id"]):
        for v in variants:
            rows.append({"benchmark": b, "variant": v, "task_id": t, "candidate": -1,
                         "success_rate": float(g.success.mean()), "n_rollouts": len(g)})
    if len(cand):
        parsed = cand.variant.str.extract(r"^(?P<v>[\w-]+)/eval/c(?P<c>\d+)$")
        if parsed.v.isna().any():
            raise ValueError(f"evaluation episodes with an unexpected variant: {sorted(cand.variant[parsed.v.isna()].unique())}")
        cand = cand.assign(v=parsed.v, c=parsed.c.astype(int))
        for (b, v, t, c), g in cand.groupby(["benchmark", "v", "task_id", "c"]):
            rows.append({"benchmark": b, "variant": v, "task_id": t, "candidate": int(c),
                         "success_rate": float(g.success.mean()), "n_rollouts": len(g)})
    return pd.DataFrame(rows, columns=cols)
