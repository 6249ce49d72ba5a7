"""Did SpeedRunner learn? Per seed of a finished run: what its sleep phases wrote, refused (and why) and kept,
and how the final checkpoint's test episodes used the induced functions, beside ReAct and `reference` on the
same tasks. Reads a results folder only.
    python perf/learning_report.py results            # the default run, or configs/laptop-learning.yaml's
    python perf/learning_report.py results --bench babyai --variant speedrunner
"""
import argparse
import collections
import json
from pathlib import Path

import duckdb

from skillrepro.methods.speedrunner_gate import refusal_kind

ap = argparse.ArgumentParser()
ap.add_argument("results", type=Path)
ap.add_argument("--bench", default="babyai")
ap.add_argument("--variant", default="speedrunner")
ap.add_argument("--baselines", nargs="*", default=["react", "reference"])
a = ap.parse_args()
runs = a.results / "runs" / a.bench


def final_eval(run: Path) -> Path:
    return max(run.glob("eval/v*"), key=lambda p: int(p.name[1:]))


def test_figures(run: Path) -> dict:
    """Success, output tokens and skill calls per test episode at the run's last checkpoint."""
    d = final_eval(run)
    con = duckdb.connect()
    ep = con.execute(f"SELECT count(*), avg(success::INT), avg(completion_tokens) FROM read_parquet('{d}/episodes.parquet')").fetchone()
    # the actor's calls (top-level frames); `primitives` lists every environment action a call issued
    calls = con.execute(f"SELECT episode_id, count(*), sum(json_array_length(primitives)), sum((exception <> '')::INT) "
                        f"FROM read_parquet('{d}/skill_calls.parquet') WHERE parent_frame_id = '' "
                        "GROUP BY episode_id").fetchall()
    n = sum(c for _, c, _, _ in calls)
    return {"checkpoint": d.name, "episodes": ep[0], "success": ep[1], "output_tokens": ep[2],
            "skill_calls": n / max(ep[0], 1), "episodes_calling": len(calls),
            # a wrapper of one primitive passes every check and is called: these tell it from a routine
            "primitives_per_call": sum(p for _, _, p, _ in calls) / n if n else 0.0,
            "raised": sum(r for _, _, _, r in calls)}


print(f"| seed | written | not saved (why) | kept at {a.variant}'s last version | test: success | output tokens "
      f"| skill calls / episode | episodes calling one | primitives / call | calls that raised | "
      + " | ".join(f"{b}: success, tokens" for b in a.baselines) + " |")
print("|---" * (10 + len(a.baselines)) + "|")
for run in sorted((runs / a.variant).glob("seed*"), key=lambda p: int(p.name[4:])):
    writes = [t for f in sorted(run.glob("induce/v*/transcript.jsonl")) for t in map(json.loads, f.read_text().splitlines())
              if t.get("tool") == "write_function"]
    # not saved: refused, or the same code again ("Unchanged"), as perf/sleep_replay.py counts them
    refused = collections.Counter(refusal_kind(t["observation"]) for t in writes if not t["observation"].startswith("Saved"))
    last = max(run.glob("library/v*"), key=lambda p: int(p.name[1:]))
    kept = [f["name"] for f in json.loads((last / "manifest.json").read_text())["functions"] if f["public"]]
    t = test_figures(run)
    base = []
    for b in a.baselines:
        other = test_figures(runs / b / run.name) if (runs / b / run.name).exists() else None
        base.append(f"{other['success']:.2f}, {other['output_tokens']:.0f}" if other else "-")
    print(f"| {run.name[4:]} | {len(writes)} | {sum(refused.values())} ({'; '.join(f'{k}: {n}' for k, n in refused.items()) or '-'}) "
          f"| {', '.join(kept) or '-'} ({last.name}) | {t['success']:.2f} | {t['output_tokens']:.0f} | {t['skill_calls']:.2f} "
          f"| {t['episodes_calling']}/{t['episodes']} | {t['primitives_per_call']:.1f} | {t['raised']} | "
          + " | ".join(base) + " |")
