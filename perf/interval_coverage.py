"""Coverage by n of the intervals SkillScaffold's tables print (skillrepro.studies.scaffold.statistics), on simulated
data whose true mean is known: the control behind statistics.MIN_N (no interval is printed below it).

    python perf/interval_coverage.py [--runs 2000] [--n-boot 2000] [--ns 2 3 4 5 6 8 10 12 16 20 30] [--all-n]

Mean intervals (table 4's recovery, figure 3(b)'s mean effect): `expanded`, `percentile` and `t` on
  normal       N(0, 1) values (true mean 0);
  rate-diff    per query later-minus-early success over 4 rollouts each, p ~ U(0.05, 0.7) (table 4's shape): null
               (true mean 0) and a planted +0.3 (true mean 0.3);
  effect-2     figure 3(b)'s per-query mean effect, 4 candidates and a baseline of 2 rollouts each, p ~ U(0.05, 0.95),
               null (true 0).
--all-n computes every interval at each n, ignoring MIN_N (the "before" column); without it a NaN below MIN_N
counts as not printed. Proportions (held-out success): `exact_interval` (Clopper-Pearson) beside Wilson's on
Bernoulli(p) data. Each coverage is over --runs independent samples (standard error about 0.005 at 2000).
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np

from skillrepro.studies.scaffold import statistics as st


def samples(kind: str, rng: np.random.Generator, runs: int, n: int) -> tuple[np.ndarray, float]:
    if kind == "normal":
        return rng.normal(size=(runs, n)), 0.0
    if kind.startswith("rate-diff"):
        shift = 0.3 if kind.endswith("+0.3") else 0.0
        p = rng.uniform(0.05, 0.7, (runs, n))
        return (rng.binomial(4, p + shift) - rng.binomial(4, p)) / 4, shift
    if kind == "effect-2":
        p = rng.uniform(0.05, 0.95, (runs, n))
        cand = rng.binomial(2, p[..., None], (runs, n, 4)) / 2
        return cand.mean(-1) - rng.binomial(2, p) / 2, 0.0
    raise ValueError(kind)


def mean_coverage(kind: str, interval: str, n: int, runs: int, n_boot: int, all_n: bool, seed: int) -> float:
    rng = np.random.default_rng(seed)
    x, truth = samples(kind, rng, runs, n)
    saved = dict(st.MIN_N)
    if all_n:
        st.MIN_N.update({k: 2 for k in st.MIN_N})
    try:
        lo, hi = st.mean_interval(x, n_boot=n_boot, seed=seed, interval=interval)
    finally:
        st.MIN_N.update(saved)
    if np.isnan(lo).all():
        return math.nan
    return float(np.mean((lo <= truth + 1e-12) & (truth - 1e-12 <= hi)))


def wilson(k: np.ndarray, n: int, z: float = 1.959964) -> tuple[np.ndarray, np.ndarray]:
    p = k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return c - h, c + h


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--ns", type=int, nargs="+", default=[2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 30])
    ap.add_argument("--all-n", action="store_true", help="ignore MIN_N: coverage of every interval at every n")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t0 = time.time()
    print(f"95 % intervals for a mean, coverage of the true mean over {a.runs} samples per cell "
          f"({'every n' if a.all_n else 'printed n only: - = not printed'}; MIN_N {st.MIN_N})")
    print(f"{'data':<14}{'interval':<11}" + "".join(f"{n:>7}" for n in a.ns))
    for kind in ("normal", "rate-diff", "rate-diff+0.3", "effect-2"):
        for interval in st.INTERVALS:
            cov = [mean_coverage(kind, interval, n, a.runs, a.n_boot, a.all_n, a.seed + n) for n in a.ns]
            print(f"{kind:<14}{interval:<11}" + "".join("      -" if math.isnan(c) else f"{c:7.3f}" for c in cov))
    print("\n95 % intervals for a proportion (held-out success), coverage of p over every k (exact binomial weights)")
    print(f"{'n':>5}{'p':>6}{'exact':>8}{'wilson':>8}")
    from scipy.stats import binom
    for n in (4, 10, 20, 50, 134):
        for p in (0.02, 0.1, 0.3, 0.5):
            k = np.arange(n + 1)
            w = binom.pmf(k, n, p)
            lo, hi = st.exact_interval(k, np.full(n + 1, n))
            wl, wh = wilson(k, n)
            print(f"{n:>5}{p:>6}{w[(lo <= p) & (p <= hi)].sum():8.3f}{w[(wl <= p) & (p <= wh)].sum():8.3f}")
    print(f"({time.time() - t0:.1f} s)")


if __name__ == "__main__":
    main()
