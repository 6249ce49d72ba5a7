"""Internalization (seed 002, table 4, appendix A.5): the cohort of training queries that skill-assisted exploration
helped, chosen on one set of rollouts, and its skill-free recovery measured on fresh, independent ones."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from skillrepro.studies.scaffold.statistics import interval_label, mean_interval


def benefit_cohort(selections: Any, post: Any) -> list[str]:
    """One iteration's cohort: queries whose selected skill was injected and whose Post-Scouts succeeded more
    often than their Scouts ("training queries that benefit from skill-assisted exploration"). Frozen
    before any later evaluation. `selections`: SelectionRecord rows; `post`: Post-Scout episodes.

    Chosen on these Scouts and Post-Scouts, so neither may serve as the cohort's early skill-free success:
    a query enters partly because its Scouts did worse than usual (regression to the mean). The early
    success comes from fresh rollouts (`internalization`'s `early`)."""
    p = post.groupby("task_id").success.mean()
    s = selections[selections.task_id.isin(p.index)]
    keep = benefits(s.n_success.to_numpy(), s.n_scouts.to_numpy(), p.loc[s.task_id].to_numpy(),
                    s.selected.to_numpy() >= 0)
    return sorted(str(t) for t in s.task_id[keep])


def benefits(n_success: Any, n_scouts: Any, post_rate: Any, injected: Any) -> Any:
    """Cohort membership per query (arrays): a skill was injected and the Post-Scouts' success rate beats the
    Scouts' n_success / n_scouts."""
    return np.asarray(injected, bool) & (np.asarray(post_rate, float) > np.asarray(n_success) / np.asarray(n_scouts))


def chain_cohort(iterations: dict[int, tuple[Any, Any]]) -> list[tuple[int, str]]:
    """The cohort of several early iterations (one query batch each): (iteration, task_id) members, each
    `benefit_cohort` of its iteration's (selections, post). A query drawn in two iterations is two members."""
    return [(j, t) for j in sorted(iterations) for t in benefit_cohort(*iterations[j])]


@dataclass(frozen=True)
class Recovery:
    n_queries: int
    recovery_pp: float  # later-minus-early skill-free success, percentage points
    ci_low: float  # NaN below statistics.MIN_N queries
    ci_high: float
    interval: str = ""  # what the interval is, or why there is none (statistics.interval_label)


def internalization(early: Any, later: Any, cohort: Sequence[Any], n_boot: int = 10000, seed: int = 0,
                    chosen_on: Sequence[str] = (), interval: str = "expanded") -> Recovery:
    """Later-minus-early skill-free success on the fixed cohort with a 95 % query-level interval (`recovery`).

    `early`: fresh skill-free rollouts (task_id, success, episode_id) of each cohort query by the checkpoint
    whose rollouts chose it, independent of those; `later`: skill-free rollouts by a later checkpoint.
    `cohort`: task ids, or (iteration, task_id) members (`chain_cohort`), `early` then has an `iteration`
    column. `chosen_on`: episode ids of the rollouts that chose the cohort; an early rollout among them is
    refused (it would make recovery positive on data with no learning at all)."""
    if len(chosen_on) and "episode_id" in early:
        reused = sorted(set(early.episode_id) & set(chosen_on))
        if reused:
            raise ValueError(f"early rollouts {reused[:3]} also chose the cohort: the early skill-free success must "
                             "come from fresh rollouts")
    multi = bool(cohort) and isinstance(cohort[0], tuple)
    e = early.groupby(["iteration", "task_id"] if multi else "task_id").success.mean()
    lt = later.groupby("task_id").success.mean()
    task = (lambda c: c[1]) if multi else (lambda c: c)
    missing = [c for c in cohort if c not in e.index or task(c) not in lt.index]
    if missing:
        raise ValueError(f"cohort queries without skill-free evaluations at both checkpoints: {missing[:5]}")
    if not cohort:
        return Recovery(0, math.nan, math.nan, math.nan, interval_label(0, interval))
    return recovery(np.array([lt[task(c)] - e[c] for c in cohort], dtype=float), n_boot, seed, interval)


def later_difference(later: Any, other: Any, cohort: Sequence[Any], n_boot: int = 10000, seed: int = 0,
                     interval: str = "expanded") -> Recovery:
    """Table 4's control: per cohort query, `later`'s skill-free success minus `other`'s (plain GRPO's checkpoint of
    the same index on the same queries), in points, with the interval of `recovery`. The early success is common to
    both and cancels. A query drawn in two cohort iterations counts twice, as in `internalization`."""
    a, b = later.groupby("task_id").success.mean(), other.groupby("task_id").success.mean()
    tasks = [c[1] if isinstance(c, tuple) else c for c in cohort]
    missing = [t for t in tasks if t not in a.index or t not in b.index]
    if missing:
        raise ValueError(f"cohort queries without skill-free evaluations by both policies: {missing[:5]}")
    return recovery(np.array([a[t] - b[t] for t in tasks], dtype=float), n_boot, seed, interval)


def recovery(diff: Any, n_boot: int = 10000, seed: int = 0, interval: str = "expanded") -> Recovery:
    """Mean of per-query later-minus-early success rates (fractions), in points, with a 95 % interval over queries
    (`mean_interval`: NaN, and `interval` says so, where there are too few queries for it to cover 95 %)."""
    diff = np.asarray(diff, float) * 100
    if not len(diff):
        return Recovery(0, math.nan, math.nan, math.nan, interval_label(0, interval))
    lo, hi = mean_interval(diff, n_boot, seed, interval)
    return Recovery(len(diff), float(diff.mean()), lo, hi, interval_label(len(diff), interval))
