"""What a SpeedRunner-study config will cost before it runs: a projection of its DAG's LLM calls from a calibration.

A calibration is made from a finished run's records (`skillrepro cost calibrate RESULTS`): for each benchmark
env, method, role and unit (a training episode, a test episode, a sleep phase) the calls, input, cached and output
tokens per unit, as the mean over every unit and as the 10th and 90th percentiles over the record folders (a
training batch, an evaluation, a sleep phase: each folder's total divided by its units), with the call budget an
episode had; a projection at another budget says so and is not scaled. The projection
(`skillrepro cost estimate`, and one line in the dry run of a priced preset) counts a config's units (per run:
`train_rollouts` training episodes, `n_test` test episodes at every checkpoint on each test set, a sleep phase
per cycle for a method that learns) and multiplies: the mean gives the figure, the percentiles the range.

A row of the config with no calibration for its env and method is projected from the methods calibrated on its env,
role by role, and says so in its `from` column; one with none on its env is listed with no figure, never as 0.
Appendix F's truncated-library evaluations are not counted. The shipped calibration (resources/cost_calibration.csv) comes from the default
laptop run (config.yaml: small CPU models on BabyAI); a projection for another model is only as good as the
calibration it is given: calibrate on a small run of that model first.
"""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Any

import pandas as pd

from skillrepro import config as cfg
from skillrepro.benchmarks import benchmark_class
from skillrepro.methods import get_method
from skillrepro.store import views
from skillrepro.studies.speedrunner.paths import folder_of
from skillrepro.studies.speedrunner.settings import inducer_limits, methods, protocol

SHIPPED = files("skillrepro") / "resources" / "cost_calibration.csv"
TOKENS = ["calls", "prompt", "cached", "output"]  # per unit
KEY = ["env", "method", "role", "unit"]


def calibrate(results: Path, config: dict[str, Any]) -> pd.DataFrame:
    """The calibration of the records under `results` (a results folder), made under `config` (checked), which
    says each benchmark instance's env."""
    envs = {b.name: b.env for b in cfg.benchmarks(config)}
    budgets = {b.name: _budget(b) for b in cfg.benchmarks(config)}
    found = {t: sorted(str(p) for p in Path(results).rglob(f"{t}.parquet") if _in_run(p)) for t in ("llm_calls", "episodes")}
    if not found["llm_calls"]:
        raise FileNotFoundError(f"no llm_calls.parquet of a run folder under {results}: nothing to calibrate from")
    con = views(found)
    calls = con.execute("SELECT filename, role, count(*) calls, sum(prompt_tokens) prompt, "
                        "sum(coalesce(cached_tokens, 0)) cached, sum(completion_tokens) output "
                        "FROM llm_calls GROUP BY ALL").df()
    episodes = dict(con.execute("SELECT regexp_replace(filename, 'episodes.parquet$', ''), count(*) "
                                "FROM episodes GROUP BY ALL").fetchall())
    methods = dict(con.execute("SELECT run_id, any_value(method) FROM episodes GROUP BY ALL").fetchall())
    rows = []
    for r in calls.itertuples():
        run, unit = folder_of(r.filename)
        bench = run.split("/")[0]
        units = 1 if unit == "sleep" else episodes.get(r.filename.removesuffix("llm_calls.parquet"), 0)
        if units and bench in envs and run in methods:
            rows.append({"env": envs[bench], "method": methods[run], "role": r.role, "unit": unit, "units": units,
                         "call_budget": budgets[bench], **{t: getattr(r, t) for t in TOKENS}})
    folders = pd.DataFrame(rows)
    if folders.empty:
        raise ValueError(f"the records under {results} name no benchmark of the config ({', '.join(envs)})")
    out = folders.groupby(KEY).agg(units=("units", "sum"), call_budget=("call_budget", "max"),
                                   **{t: (t, "sum") for t in TOKENS}).reset_index()
    for t in TOKENS:
        out[t] = out[t] / out["units"]
        per = folders.assign(v=folders[t] / folders["units"]).groupby(KEY)["v"]
        out[f"{t}_lo"], out[f"{t}_hi"] = per.quantile(0.1).values, per.quantile(0.9).values
    return out


def _budget(bench) -> int:
    """The actor calls an episode of `bench` may make (its llm_call_budget, else the benchmark's own)."""
    return bench.llm_call_budget or benchmark_class(bench.env).llm_call_budget


def _in_run(path: Path) -> bool:
    try:
        folder_of(str(path))
        return True
    except ValueError:
        return False


def units(config: dict[str, Any]) -> pd.DataFrame:
    """One row per (run, unit) of the config's SpeedRunner DAG: env, variant, method, seed, unit, n."""
    proto = protocol(config)
    benches = {b.name: b for b in cfg.benchmarks(config)}
    rows = []
    for b in benches.values():
        for m in methods(config):
            if not m.runs_on(b.name):
                continue
            for seed in proto.seeds:
                test_sets = 1 + len(b.evaluate_on)
                counts = {"train": proto.train_rollouts, "test": proto.n_test * len(proto.checkpoints) * test_sets,
                          "sleep": proto.n_cycles if get_method(m.method).sleeps else 0}
                rows += [{"bench": b.name, "env": b.env, "variant": m.variant, "method": m.method, "seed": seed,
                          "call_budget": _budget(b), "unit": u, "n": n} for u, n in counts.items() if n]
    return pd.DataFrame(rows)


def project(config: dict[str, Any], calibration: pd.DataFrame) -> pd.DataFrame:
    """Per variant and role: calls, input, cached and output tokens, dollars with its range, and the calibration
    rows the figures come from; a (variant, unit) with no calibration is a row with no figures."""
    llm = cfg.llm_config(config)
    sleep_model = inducer_limits(config).sleep_llm(llm).model
    priced = cfg.prices(config)
    free = cfg.Price(0.0, 0.0)  # a model the pricing table does not name costs nothing
    need = units(config).groupby(["env", "variant", "method", "unit", "call_budget"], as_index=False)["n"].sum()
    counted, missing = [], []
    for r in need.itertuples():
        found = _matches(calibration, r.env, r.method, r.unit, r.call_budget)
        if not found:
            missing.append({"variant": r.variant, "role": f"({r.unit})",
                            "from": f"no calibration for {r.method} {r.unit} units on {r.env}: not counted"})
        price = priced.get(sleep_model if r.unit == "sleep" else llm.model, free)
        for role, source, cal in found:
            row = {"variant": r.variant, "role": role, "from": source, **{t: r.n * cal[t] for t in TOKENS}}
            for band in ("", "_lo", "_hi"):
                row[f"dollars{band}"] = price.cost(*(r.n * cal[f"{t}{band}"] for t in ("prompt", "cached", "output")))
            counted.append(row)
    sums = [*TOKENS, "dollars", "dollars_lo", "dollars_hi"]
    table = (pd.DataFrame(counted).groupby(["variant", "role"], as_index=False)
             .agg(**{c: (c, "sum") for c in sums}, **{"from": ("from", lambda s: "; ".join(sorted(set(s))))})
             if counted else pd.DataFrame(columns=["variant", "role", *sums, "from"]))
    return pd.concat([table, pd.DataFrame(missing, columns=["variant", "role", "from"])], ignore_index=True)


def _matches(calibration: pd.DataFrame, env: str, method: str, unit: str,
             call_budget: int) -> list[tuple[str, str, pd.Series]]:
    """The calibration rows for (env, method, unit), role by role: exact, else each role of the calibrated methods
    on this env (for a method never calibrated). Never another env's: episodes differ by orders of magnitude
    between benchmarks (BabyAI's 30 calls, Crafter's 2,000)."""
    on_unit = calibration[(calibration["unit"] == unit) & (calibration["env"] == env)]
    for chosen, say in ((on_unit[on_unit.method == method], f"{method} on {env}"),
                        (on_unit, f"every calibrated method on {env}")):
        if not chosen.empty:
            # several envs or methods: their mean per role
            per_role = chosen.groupby("role").mean(numeric_only=True)
            # not scaled: an episode's calls and its growing prompts do not follow its budget in any one way
            at = sorted(set(chosen["call_budget"]))
            if at != [call_budget]:
                say += f", calibrated at {'/'.join(map(str, at))} calls an episode (this config: {call_budget})"
            return [(role, say, row) for role, row in per_role.iterrows()]
    return []


def load_calibration(path: str | Path | None = None) -> pd.DataFrame:
    source = Path(path) if path else SHIPPED
    if path and not Path(path).is_file():
        raise FileNotFoundError(f"calibration file {path} does not exist (make one: skillrepro cost calibrate)")
    table = pd.read_csv(source)
    missing = {*KEY, "units", "call_budget", *TOKENS, *(f"{t}_{b}" for t in TOKENS for b in ("lo", "hi"))} - set(table.columns)
    if missing:
        raise ValueError(f"calibration file {source}: missing column(s) {', '.join(sorted(missing))}")
    return table


def summary_line(config: dict[str, Any], calibration: pd.DataFrame | None = None) -> str:
    """One line for a dry run: the projected dollars with their range, and what was not counted."""
    table = project(config, load_calibration() if calibration is None else calibration)
    counted = table.dropna(subset=["calls"])
    left = int(table["calls"].isna().sum())
    if counted.empty:
        return "cost projection: nothing of this config is calibrated (skillrepro cost calibrate)"
    return (f"cost projection: ${counted['dollars'].sum():,.2f} (${counted['dollars_lo'].sum():,.2f}-"
            f"${counted['dollars_hi'].sum():,.2f}) for {counted['calls'].sum():,.0f} LLM calls"
            + (f"; {left} (variant, unit) pair(s) not calibrated, not counted" if left else "")
            + "; per variant and role: skillrepro cost estimate")
