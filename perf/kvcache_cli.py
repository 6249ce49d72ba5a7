"""What the `skillrepro kvcache simulate` command costs beyond its work: the command against the same simulation
called in-process (read the stream, simulate, write per_request.parquet), on perf/kvcache_sim.py's SkillRL-shaped
stream of 64 episodes x 50 steps (4.6 M prompt tokens). The difference is the interpreter's start and the imports.

    python perf/kvcache_cli.py [--episodes 64 --steps 50 --repeat 3]

Prints both times (best of --repeat) and their ratio beside the target (1.3x) and the baseline measured before the
command stopped importing the LLM client (1.52x: 0.5 s of 1.5 s was start-up and writing).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from kvcache_sim import measure, stream

from skillrepro.store import write_table
from skillrepro.studies.kvcache import sim

TARGET, BASELINE = 1.3, 1.52
CAPACITY = 419_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="kvcache_cli_"))
    try:
        requests = work / "requests.jsonl"
        with requests.open("w") as f:
            for r in stream(sim, a.episodes, a.steps):
                f.write(json.dumps({"episode": r.episode, "step": r.step, "token_ids": r.token_ids.tolist(),
                                    "completion_tokens": r.completion_tokens}) + "\n")
        n_tokens = sum(len(json.loads(line)["token_ids"]) for line in requests.open())

        def in_process() -> None:
            summary, results = sim.simulate(sim.read_requests(str(requests)), sim.CacheConfig(capacity_tokens=CAPACITY))
            write_table(work / "in_process" / "per_request.parquet", sim.results_table(results))

        command = [str(Path(sys.executable).with_name("skillrepro")), "kvcache", "simulate", "--requests",
                   str(requests), "--capacity-tokens", str(CAPACITY), "--out", str(work / "command")]

        def by_command() -> None:
            subprocess.run(command, check=True, capture_output=True)

        t_in, _ = measure(in_process, a.repeat)
        t_cmd, _ = measure(by_command, a.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratio = t_cmd / t_in
    print(f"stream: {a.episodes} episodes x {a.steps} steps, {n_tokens / 1e6:.2f} M prompt tokens; best of {a.repeat}")
    print(f"in-process: {t_in:.2f} s; `skillrepro kvcache simulate`: {t_cmd:.2f} s")
    print(f"ratio {ratio:.2f}x (target <= {TARGET}x; baseline {BASELINE}x): {'met' if ratio <= TARGET else 'MISSED'}")


if __name__ == "__main__":
    main()
