"""The estimators SkillScaffold's tables share: an interval for a mean over queries that is printed only where it
covers about 95 %, an exact interval for a proportion, a permutation null for a best-of-M effect, and the unbiased
Pass@k."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from skillrepro.config import ConfigError


INTERVALS = ("expanded", "percentile", "t")
# The fewest values each interval is printed for (below: NaN and `interval_label`'s "too few queries"). Measured by
# perf/interval_coverage.py (4,000 samples a cell) and held by tests/studies/scaffold/test_scaffold_intervals.py (coverage >= 0.90 at
# every printed n, on normal data and on per-query differences of success rates): a bootstrap interval lies inside
# the data's range, so at n values it covers at most 1 - 2^(1 - n) (0.50, 0.75, 0.88, 0.94 at n = 2..5);
# `expanded` covers 0.87-0.98 at n = 4, 0.92-0.95 at 5 and 0.93-0.95 from 6; `percentile` 0.86-0.91 at 8, 0.89-0.94
# at 12-20 and 0.93-0.95 at 30; `t` 0.91-0.97 at n = 3 (ties of discrete values) and 0.95-0.98 from 4.
MIN_N = {"expanded": 6, "percentile": 30, "t": 4}
NAMES = {"expanded": "expanded-percentile bootstrap", "percentile": "percentile bootstrap", "t": "Student t"}


def interval_label(n: int, interval: str, level: float = 0.95) -> str:
    """What a table prints beside an interval over `n` values: its method, or why there is none."""
    if n < MIN_N[interval]:
        return f"too few queries for a {100 * level:.0f} % interval (n = {n} < {MIN_N[interval]}, {interval})"
    return f"{100 * level:.0f} % {NAMES[interval]}, n = {n}"


def mean_interval(x: Any, n_boot: int = 10000, seed: int = 0, interval: str = "expanded",
                  level: float = 0.95) -> tuple[Any, Any]:
    """A `level` interval for the mean of `x`'s last axis (its values: the queries), NaN below MIN_N[interval].

    x: shape (n,) gives two floats; shape (..., n) gives two arrays (independent samples at once: the coverage
    test). percentile: the query-level bootstrap (the paper's "query-level bootstrap") read at alpha / 2, too
    narrow for few queries (about 93 % coverage at 16, 90 % at 8-10). expanded: the same bootstrap distribution
    read at widened percentiles, alpha' / 2 = Phi(-sqrt(n / (n - 1)) t_{n-1}(1 - alpha / 2)) (Hesterberg 2015,
    "What teachers should know about the bootstrap"). t: mean +- t_{n-1} s / sqrt(n), exact for normal data at
    any n >= 2. Every sample of a call shares one set of bootstrap draws (the seed)."""
    # lazy: start-up cost: scipy.special adds ~160 ms (50 %) to `import skillrepro.check` (the study's settings)
    from scipy.special import stdtrit  # Student t quantile (scipy.stats takes a second to import)

    if interval not in INTERVALS:
        raise ConfigError(f"config key scaffold.bootstrap_interval: {interval!r}; allowed: {', '.join(INTERVALS)}")
    x = np.asarray(x, float)
    n = x.shape[-1]
    tail = (1 - level) / 2
    if n < max(2, MIN_N[interval]):  # one query says nothing about the spread; a few cannot hold 95 %
        nan = np.full(x.shape[:-1], math.nan)
        return (math.nan, math.nan) if x.ndim == 1 else (nan, nan.copy())
    if interval == "t":
        half = float(stdtrit(n - 1, 1 - tail)) * x.std(axis=-1, ddof=1) / math.sqrt(n)
        lo, hi = x.mean(axis=-1) - half, x.mean(axis=-1) + half
    else:
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, n, size=(n_boot, n))
        # how often each value is drawn per resample: the resample means are one matrix product for all samples
        counts = np.bincount((idx + n * np.arange(n_boot)[:, None]).ravel(), minlength=n_boot * n).reshape(n_boot, n)
        boots = x @ counts.T / n
        if interval == "expanded":
            z = math.sqrt(n / (n - 1)) * float(stdtrit(n - 1, 1 - tail))
            tail = 0.5 * math.erfc(z / math.sqrt(2))  # Phi(-z)
        lo, hi = np.percentile(boots, [100 * tail, 100 * (1 - tail)], axis=-1)
    return (float(lo), float(hi)) if x.ndim == 1 else (lo, hi)


def exact_interval(k: Any, n: Any, level: float = 0.95) -> tuple[Any, Any]:
    """The Clopper-Pearson interval for a proportion from k successes in n trials (arrays or scalars): it covers
    at least `level` at every n and p (conservative), where Wilson's dips below 0.90 near p = 0 or 1 at small n."""
    # lazy: start-up cost, as in mean_interval
    from scipy.special import betaincinv

    k, n = np.asarray(k, float), np.asarray(n, float)
    tail = (1 - level) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = np.where(k > 0, betaincinv(k, n - k + 1, tail), 0.0)
        hi = np.where(k < n, betaincinv(k + 1, n - k, 1 - tail), 1.0)
    bad = n < 1
    lo, hi = np.where(bad, np.nan, lo), np.where(bad, np.nan, hi)
    return (float(lo), float(hi)) if lo.ndim == 0 else (lo, hi)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased Pass@k estimate from n rollouts of which c succeeded: 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} from {n} rollouts")
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)
