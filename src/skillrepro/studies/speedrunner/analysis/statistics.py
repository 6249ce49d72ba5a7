"""Paired tests of each variant against its baseline at the final checkpoint (stats.csv)."""
from __future__ import annotations

import pandas as pd
from scipy import stats

from skillrepro.studies.speedrunner.analysis import Study, with_score

# ------------------------------------------------------------------------------------------ stats
def paired_tests(test: pd.DataFrame, study: Study) -> pd.DataFrame:
    """Two-sided paired t-tests of every SpeedRunner variant against every baseline variant, at the final
    checkpoint, on the headline metric and output tokens. Pairs are episodes on the same test task (the
    same task seed) in the same training seed; only benchmarks both variants ran on."""
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


