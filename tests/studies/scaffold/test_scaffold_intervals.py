"""Every interval SkillScaffold's tables label 95 % covers about 95 % at the n it is printed for (vectorised, a few
seconds; perf/interval_coverage.py prints the full grid), none is printed below statistics.MIN_N, the exact
interval of a proportion holds 95 % at every n and p, and figure 3(b)'s null band of the best effect holds the
best effect on null data and not a planted one."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from skillrepro.config import SCHEMAS
from skillrepro.studies.scaffold import statistics as st
from skillrepro.studies.scaffold.validation import competence_levels

RUNS = 600


def _data(kind, rng, n):
    """(RUNS, n) samples with a known mean: normal values, or per-query differences of success over 4 rollouts
    each (p ~ U(0.05, 0.7)) with a planted +0.3 (table 4's shape; ties of discrete values)."""
    if kind == "normal":
        return rng.normal(size=(RUNS, n)), 0.0
    p = rng.uniform(0.05, 0.7, (RUNS, n))
    return (rng.binomial(4, p + 0.3) - rng.binomial(4, p)) / 4, 0.3


def _coverage(kind, interval, n, seed):
    x, truth = _data(kind, np.random.default_rng(seed), n)
    lo, hi = st.mean_interval(x, n_boot=500, seed=seed, interval=interval)
    return float(np.mean((lo <= truth + 1e-12) & (truth - 1e-12 <= hi)))


@pytest.mark.parametrize("interval", st.INTERVALS)
@pytest.mark.parametrize("kind", ["normal", "rate-diff"])
def test_mean_interval_covers_95_percent_at_every_printed_n(kind, interval):
    ns = sorted({st.MIN_N[interval], st.MIN_N[interval] + 1, st.MIN_N[interval] + 3, 30})
    cover = {n: _coverage(kind, interval, n, seed=n) for n in ns}
    print(f"{kind} {interval}: coverage by n {cover}")
    assert all(0.90 <= c <= 0.99 for c in cover.values()), cover


@pytest.mark.parametrize("interval", st.INTERVALS)
def test_no_interval_below_its_minimum_n(interval):
    x = np.random.default_rng(0).normal(size=(3, st.MIN_N[interval] - 1))
    lo, hi = st.mean_interval(x, interval=interval)
    assert np.isnan(lo).all() and np.isnan(hi).all()
    assert all(math.isnan(v) for v in st.mean_interval(x[0], interval=interval))
    assert "too few queries" in st.interval_label(x.shape[1], interval)
    assert st.interval_label(st.MIN_N[interval], interval).startswith("95 %")


def test_expanded_bootstrap_under_covers_below_its_minimum(monkeypatch):
    """The control can fail: printed at n = 3 the expanded bootstrap covers about 0.74 (it lies inside the data's
    range: at most 1 - 2^(1 - n))."""
    monkeypatch.setitem(st.MIN_N, "expanded", 2)
    assert _coverage("normal", "expanded", 3, seed=3) < 0.80


def test_one_sample_gives_the_same_interval_as_a_batch():
    x = np.random.default_rng(1).normal(size=(4, 12))
    lo, hi = st.mean_interval(x, n_boot=1000, seed=5)
    assert st.mean_interval(x[2], n_boot=1000, seed=5) == pytest.approx((lo[2], hi[2]))
    tlo, thi = st.mean_interval(x[2], interval="t")
    assert (tlo + thi) / 2 == pytest.approx(x[2].mean()) and thi - tlo == pytest.approx(
        2 * 2.200985 * x[2].std(ddof=1) / math.sqrt(12), rel=1e-5)  # t_{11}(0.975)


@pytest.mark.parametrize("n", [4, 10, 50, 134])
def test_exact_interval_of_a_proportion_covers_95_percent_at_every_p(n):
    k = np.arange(n + 1)
    lo, hi = st.exact_interval(k, n)
    for p in np.linspace(0.01, 0.99, 25):
        assert binom.pmf(k, n, p)[(lo <= p) & (p <= hi)].sum() >= 0.95 - 1e-9
    assert st.exact_interval(0, 10) == pytest.approx((0.0, 1 - 0.025 ** 0.1))
    assert st.exact_interval(10, 10)[1] == 1.0 and all(math.isnan(v) for v in st.exact_interval(0, 0))


# ----------------------------------------------------------------------------------------------------
# Figure 3(b)'s best effect and its permutation null band


def _levels(seed, effect=0.0, q=60, m=4, k=8):
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.05, 0.75, q)
    free = rng.binomial(k, p) / k
    cand = rng.binomial(k, np.clip(p[:, None] + effect, 0, 1), (q, m)) / k
    return competence_levels(rng.binomial(4, p), free, cand, n_boot=200, seed=seed, n_perm=1000)


def test_best_effect_null_band_holds_null_data_and_not_a_planted_effect():
    null = [r for s in range(60) for r in _levels(s) if r["n_queries"] >= 3]
    best = np.array([r["best_effect"] for r in null])
    inside = np.mean([r["best_effect_null_low"] <= r["best_effect"] <= r["best_effect_null_high"] for r in null])
    print(f"null: mean best effect {best.mean():+.3f} (positive: the max of 4 noisy effects), inside the band "
          f"{inside:.3f} of {len(null)} levels")
    assert best.mean() > 0.05  # the bias the band is there to show
    assert 0.90 <= inside <= 0.99
    planted = [r for s in range(20) for r in _levels(100 + s, effect=0.25) if r["n_queries"] >= 3]
    assert np.mean([r["best_effect"] > r["best_effect_null_high"] for r in planted]) > 0.9


def test_the_schema_offers_exactly_the_intervals():
    import yaml

    schema = yaml.safe_load((SCHEMAS / "scaffold.schema.yaml").read_text())
    assert schema["properties"]["scaffold"]["properties"]["bootstrap_interval"]["enum"] == list(st.INTERVALS)


def test_figure3b_draws_levels_with_their_null_band_and_an_empty_table(tmp_path):
    import pandas as pd

    from skillrepro.studies.scaffold.figures import competence_figure
    from skillrepro.studies.scaffold.validation import COMPETENCE_COLUMNS

    t = pd.DataFrame([{"benchmark": "b", "variant": "grp", "n_probes": 4, **r} for r in _levels(0, q=25)])
    assert t.interval.str.contains("too few queries").any() and t.mean_effect_ci_low.notna().any()
    competence_figure(t[COMPETENCE_COLUMNS], tmp_path / "f.png")
    competence_figure(pd.DataFrame(columns=COMPETENCE_COLUMNS), tmp_path / "empty.png")
    assert (tmp_path / "f.png").stat().st_size > 10_000 and (tmp_path / "empty.png").stat().st_size > 1000


def test_one_helpful_card_of_four_is_seen_only_when_large_and_the_level_says_so():
    """The band's power when one card of four helps and the others do nothing (8 rollouts a condition). A level
    holds a fifth of the queries: 12 of the laptop-scale 60, 26 of the paper preset's 128. On null data the band
    fires about 2.5 % of the time; a +0.25 card is found in few 12-query levels and in a third of 26-query ones.
    `one_card_effect_80` gives the effect a level of its size and rates finds 80 % of the time (none at 12
    queries: the permuted baseline is often the good card itself)."""
    from skillrepro.studies.scaffold.validation import detectable_effect, one_card_power

    rng = np.random.default_rng(7)
    p12, p26, p60 = (rng.uniform(0.05, 0.75, n) for n in (12, 26, 60))
    null = one_card_power(p26, 4, 8, 0.0, sims=400)
    at12, at26 = one_card_power(p12, 4, 8, 0.25), one_card_power(p26, 4, 8, 0.25)
    print(f"one card of 4 at +0.25, 8 rollouts a condition: found in {at12:.2f} of 12-query levels, {at26:.2f} of "
          f"26-query levels; null {null:.3f}")
    assert null <= 0.06
    assert at12 < 0.25 and 0.2 < at26 < 0.6
    assert math.isnan(detectable_effect(p12, 4, 8)) and detectable_effect(p60, 4, 8) < detectable_effect(p26, 4, 8)
    row = competence_levels(np.full(26, 2), p26, p26[:, None] + np.zeros((26, 4)), n_boot=100, n_perm=200,
                            n_rollouts=8)[0]
    assert row["one_card_effect_80"] == detectable_effect(p26, 4, 8)
