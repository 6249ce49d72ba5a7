"""SkillScaffold's part of a rehearsal (skillrepro/rehearsal.py): its section at the rehearsal's counts.

It keeps what shapes a request: the Executor's and the Generator's prompts and sampling, the Generator's decoding
(vLLM's structured outputs under `grammar`), the scorer's prompt_logprobs requests on the same server, the evidence
budget, the card format, every variant and ablation, and the benchmarks' pools. It plays one query of each
benchmark with two Scouts, two cards, one Post-Scout and two evaluation rollouts a condition (figure 2's smallest K
needs 2), at most the rehearsal's call budget of steps, the Generator's reply cut to `GENERATOR_MAX_TOKENS` (a CPU
writes about 10 tokens a second). The GRPO stage (its own target, scaffold_grpo) shrinks to one update a chain on
one query, its held-out pools to one task each.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from skillrepro.config import ConfigError
from skillrepro.studies.scaffold.paths import SCAFFOLD_RESULTS

COUNTS = {"n_queries": 1, "n_scouts": 2, "n_candidates": 2, "n_post": 1, "n_eval": 2, "n_probes": 1}
GENERATOR_MAX_TOKENS = 256


def reduce(cfg: dict[str, Any], r: Any, workdir: Path) -> str:
    """Shrink `cfg`'s scaffold section in place to `r` (a rehearsal.Reduction); returns what it did, in words."""
    sc = cfg["scaffold"]
    names = sc.get("benchmarks") or list(cfg["benchmarks"])
    keep = [b for b in names if not r.benchmarks or b in r.benchmarks]
    if not keep:
        raise ConfigError(f"rehearse --benchmarks: none of {', '.join(r.benchmarks)} in the preset's "
                          f"scaffold.benchmarks ({', '.join(names)})")
    sc["benchmarks"] = keep
    for key in ("splits", "executor"):  # per-benchmark settings of the ones kept
        if sc.get(key):
            sc[key] = {b: v for b, v in sc[key].items() if b in keep}
    for key, n in COUNTS.items():
        sc[key] = min(sc.get(key, n), n)
    sc.pop("pilot_ks", None)  # the powers of two that fit n_eval
    sc["generator_max_tokens"] = min(sc.get("generator_max_tokens", GENERATOR_MAX_TOKENS), GENERATOR_MAX_TOKENS)
    cap = cfg["llm"].get("max_tokens")
    for executor in (sc.get("executor") or {}).values():
        if cap and executor.get("max_tokens"):
            executor["max_tokens"] = min(executor["max_tokens"], cap)
    for b in keep:
        bench = cfg["benchmarks"][b]
        bench["llm_call_budget"] = min(bench.get("llm_call_budget") or r.call_budget, r.call_budget)
    t = sc.get("training") or {}
    if t:
        t.update(steps=1, query_batch_size=1, micro_batch_size=1, cohort_iterations=1)
        t.pop("global_batch_size", None)  # query_batch_size x (N + L), which the update then takes
    heldout = sc.get("heldout") or {}
    if heldout:
        if heldout.get("skills"):
            heldout["skills"] = {b: v for b, v in heldout["skills"].items() if b in keep}
        heldout.update(rollouts=1, every=1,
                       splits={b: {split: 1 for split in (heldout.get("splits") or {}).get(b) or {"test": None}}
                               for b in keep})
    return (f"SkillScaffold: {sc['n_queries']} query of each of {', '.join(keep)}; N {sc['n_scouts']}, M "
            f"{sc['n_candidates']}, L {sc['n_post']}, {sc['n_eval']} evaluation rollouts a condition; at most "
            f"{r.call_budget} steps an episode; Generator replies of at most {sc['generator_max_tokens']} tokens; "
            f"variants {', '.join(sc.get('variants') or ['grp'])} and ablations "
            f"{', '.join(sc.get('ablations') or {}) or 'none'}"
            + ("; GRPO: 1 update a chain on 1 query, held-out pools of 1 task" if t else ""))


def report(workdir: Path) -> list[str]:
    """The episodes the study played and the cards it wrote and scored."""
    root = workdir / SCAFFOLD_RESULTS
    episodes = sorted(root.rglob("episodes.parquet"))
    cards = sorted(root.rglob("candidates.parquet"))
    scored = sorted(root.rglob("utilities.parquet"))
    return [f"SkillScaffold: {len(episodes)} episode files, {len(cards)} card sets written, {len(scored)} scored"]
