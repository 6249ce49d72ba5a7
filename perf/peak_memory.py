"""Peak memory of a command and everything it starts (the test suite: Snakemake, llama.cpp servers, job
processes, ScienceWorld's JVMs), sampled from /proc, beside the machine's own figure.

    python perf/peak_memory.py [--every 1.0] [--top 5] -- pytest -p no:cacheprovider -m "not workflow"

`/usr/bin/time -v` reports the largest single process; what a laptop must hold is the sum over the process
tree at its worst moment. That sum is the resident set size (RSS) of every descendant, which counts pages
shared between processes (a forked sandbox zygote's, a model file mapped twice) once per process, so it is
an upper bound; the machine's used memory (MemTotal - MemAvailable) at the same moment is printed beside it,
and includes everything else the machine runs. Baseline: about 13 GB at the full suite's peak.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # the process ended while we looked
            kids.setdefault(ppid, []).append(int(d.name))
    return kids


def _rss_mb(pid: int) -> tuple[float, str]:
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
        return int(fields.get("VmRSS", "0 kB").split()[0]) / 1024, fields.get("Name", "?").strip()
    except (OSError, ValueError):
        return 0.0, "?"


def tree_rss(root: int) -> tuple[float, list[tuple[float, str]]]:
    """The process tree's summed RSS (MB) and its processes, largest first."""
    kids, todo, procs = _children(), [root], []
    while todo:
        pid = todo.pop()
        procs.append(_rss_mb(pid))
        todo.extend(kids.get(pid, []))
    procs.sort(reverse=True)
    return sum(mb for mb, _ in procs), procs


def machine_used_mb() -> float:
    info = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())}
    return (info["MemTotal"] - info["MemAvailable"]) / 1024


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--every", type=float, default=1.0, help="seconds between samples")
    ap.add_argument("--top", type=int, default=5, help="processes listed at the peak")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no command given (put it after --)")
    started = time.monotonic()
    proc = subprocess.Popen(cmd)
    peak, at, peak_procs, peak_machine = 0.0, 0.0, [], 0.0
    while proc.poll() is None:
        total, procs = tree_rss(proc.pid)
        if total > peak:
            peak, at, peak_procs, peak_machine = total, time.monotonic() - started, procs, machine_used_mb()
        time.sleep(a.every)
    wall = time.monotonic() - started
    print(f"\n{' '.join(cmd)}: exit {proc.returncode}, {wall / 60:.1f} min", file=sys.stderr)
    print(f"peak of the process tree's summed RSS: {peak / 1024:.2f} GiB at minute {at / 60:.1f} "
          f"(machine's used memory then: {peak_machine / 1024:.2f} GiB of {os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f})",
          file=sys.stderr)
    for mb, name in peak_procs[:a.top]:
        print(f"  {mb:8.0f} MB  {name}", file=sys.stderr)
    print("baseline: about 13 GB at the full suite's peak; target: a laptop with 8 GB", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
