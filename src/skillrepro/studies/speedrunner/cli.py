"""`skillrepro cost ...`: what a config's SpeedRunner DAG will cost (studies/speedrunner/cost.py)."""
from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from snakemake.utils import update_config

from skillrepro.check import check_config
from skillrepro.config import load_yaml
from skillrepro.studies.speedrunner import cost


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cost")  # its help: skillrepro.cli.COMMANDS
    csub = p.add_subparsers(dest="cost_command", required=True)
    e = csub.add_parser("estimate", help="project a config's LLM calls, tokens and dollars before it runs")
    c = csub.add_parser("calibrate", help="a calibration from a finished run's records")
    for q in (e, c):
        q.add_argument("--configfile", nargs="+", default=["config.yaml"],
                       help="as snakemake takes them: the first replaces config.yaml, later ones merge into it")
    e.add_argument("--calibration", help="a calibration CSV (default: the shipped one, from the default laptop run)")
    e.add_argument("--out", help="also write the table as CSV here")
    e.set_defaults(func=_estimate)
    c.add_argument("results", type=Path, help="a results folder of a finished run (its runs/ records)")
    c.add_argument("--out", required=True, type=Path, help="the calibration CSV to write")
    c.set_defaults(func=_calibrate)


def _config(files: list[str]) -> dict:
    merged: dict = {}
    for f in files:
        update_config(merged, load_yaml(Path(f)))
    return check_config(merged, check_files=False, billing=False)


def _estimate(a: argparse.Namespace) -> int:
    table = cost.project(_config(a.configfile), cost.load_calibration(a.calibration))
    if a.out:
        table.to_csv(a.out, index=False)
    with pd.option_context("display.max_rows", None, "display.width", 200, "display.max_colwidth", 60):
        print(table.to_string(index=False, float_format=lambda x: f"{x:,.2f}"))
    counted = table.dropna(subset=["calls"])
    print(f"\ntotal: {counted['calls'].sum():,.0f} calls, {counted['prompt'].sum():,.0f} input tokens "
          f"({counted['cached'].sum():,.0f} cached), {counted['output'].sum():,.0f} output tokens, "
          f"${counted['dollars'].sum():,.2f} (range ${counted['dollars_lo'].sum():,.2f}-${counted['dollars_hi'].sum():,.2f})")
    return 0


def _calibrate(a: argparse.Namespace) -> int:
    table = cost.calibrate(a.results, _config(a.configfile))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(a.out, index=False)
    print(f"{a.out}: {len(table)} rows ({', '.join(sorted(set(table['env'])))}; "
          f"{', '.join(sorted(set(table['method'])))})")
    return 0
