"""The KV-cache study's part of a rehearsal (skillrepro/rehearsal.py): its section at the rehearsal's counts.

It keeps the preset's formats and lockstep, and everything the simulator reads (capacities, policies, the
scheduler's limits): those cost no engine time. It plays `n_games` games of its first seed for at most the
rehearsal's call budget of steps, with the first model only (the others name checkpoints that exist only beside a
GPU), at most the engine's slots in flight, and a SkillRL bank that is not here becomes a stand-in bank of the
seminar's size in SkillRL's schema (`standin_bank`), so the real loader reads it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from skillrepro.studies.kvcache.formats import CATEGORIES
from skillrepro.studies.kvcache.paths import KV_RUN

# SkillRL's ALFWorld bank has 55 entries (configs/kvcache-gpu.yaml); the stand-in's split of them
BANK_SIZES = {"general": 13, "per_task": 5, "mistakes": 12}
BANK_ENTRIES = BANK_SIZES["general"] + BANK_SIZES["per_task"] * len(CATEGORIES) + BANK_SIZES["mistakes"]


def standin_bank(path: Path) -> Path:
    """A bank in SkillRL's JSON schema with 55 entries of stand-in wording (the loader's checks apply to it)."""
    entry = lambda i, key: {"skill_id": f"{key}_{i:03d}", "title": f"Stand-in skill {key} {i}",  # noqa: E731
                            "principle": f"Rehearsal principle {i} for {key}: look, then act on what is seen.",
                            "when_to_apply": f"When the rehearsal reaches case {i}."}
    bank = {"general_skills": [entry(i, "gen") for i in range(BANK_SIZES["general"])],
            "task_specific_skills": {t: [entry(i, t) for i in range(BANK_SIZES["per_task"])] for t in CATEGORIES},
            "common_mistakes": [{"mistake_id": f"err_{i:03d}", "description": f"Stand-in mistake {i}.",
                                 "why_it_happens": "The rehearsal says so.", "how_to_avoid": "Look first."}
                                for i in range(BANK_SIZES["mistakes"])]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(bank, indent=1))
    return path


def reduce(cfg: dict[str, Any], r: Any, workdir: Path) -> str:
    """Shrink `cfg`'s kvcache section in place to `r` (a rehearsal.Reduction); returns what it did, in words."""
    kv = cfg["kvcache"]
    slots = cfg["llm"]["slots"]
    seeds = (kv.get("seeds") or [0])[:1]
    kv.update(n_games=min(kv.get("n_games", r.n_games), r.n_games), seeds=seeds,
              call_budget=min(kv.get("call_budget", r.call_budget), r.call_budget),
              parallel_episodes=min(kv.get("parallel_episodes", 1), slots),
              concurrency=sorted({min(c, slots) for c in kv.get("concurrency") or [1]}),
              models=(kv.get("models") or [])[:1])
    if kv["models"]:
        kv["models"][0].pop("llm", None)  # the llm section's model: the engine's
    bank = kv.get("bank")
    if bank and not Path(bank).is_file():
        kv["bank"] = str(standin_bank(workdir / "standin_bank.json"))
    return (f"KV-cache: {kv['n_games']} games x seed {seeds[0]}, at most {kv['call_budget']} steps an episode, "
            f"{kv['parallel_episodes']} in flight, the first model only"
            + (f"; the bank {bank!r} is not here: a stand-in of {BANK_ENTRIES} entries in SkillRL's schema"
               if kv["bank"] != bank else ""))


def report(workdir: Path) -> list[str]:
    """The runs the study played, by format."""
    runs = sorted(workdir.glob(KV_RUN.format(kvmodel="*", kvfmt="*", kvseed="*") + "/episodes.parquet"))
    return [f"KV-cache runs played: {len(runs)} ({', '.join(sorted({p.parts[-3] for p in runs}))})"]
