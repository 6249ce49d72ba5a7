"""How long Snakemake takes to build a preset's DAG (a dry run), beside the job count and the baseline.

    python perf/dag_build.py [--configfile configs/paper.yaml configs/paper-vllm.yaml] [--repeat 3]

Baseline: the paper preset's 5,162 jobs took 25.5 s on an idle 2-core machine; target <= 10 s.
The figure depends on the machine's load: run it alone.
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE_S, TARGET_S = 25.5, 10.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configfile", nargs="+", default=["configs/paper.yaml", "configs/paper-vllm.yaml"])
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    times, jobs = [], None
    for _ in range(a.repeat):
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "8", "--forceall",
                              "results/tables/main.csv", "--configfile", *a.configfile],
                             cwd=ROOT, capture_output=True, text=True, check=True)
        times.append(time.perf_counter() - t)
        total = re.search(r"^total\s+(\d+)", out.stdout, re.MULTILINE)
        jobs = int(total.group(1)) if total else None
    median = statistics.median(times)
    print(f"{' '.join(a.configfile)}: {jobs} jobs, dry run {median:.1f} s (median of {a.repeat}; "
          f"baseline {BASELINE_S} s, target <= {TARGET_S} s: {'met' if median <= TARGET_S else 'MISSED'})")


if __name__ == "__main__":
    main()
