"""The KV-cache study's results layout, written here once: the rules build every path from these folders and
patterns (rules/kvcache/*.smk), and KVRun.of reads a run back from a path, the inverse of KVRun.folder."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath
from typing import Literal, get_args

from skillrepro.studies.contract import FIGURES, RESULTS, TABLES, TIMINGS

KV_RESULTS = f"{RESULTS}/kvcache"  # the sampled tasks, replayed trajectories, and per model its runs' records
KV_TABLES = f"{TABLES}/kvcache"  # a model's tables, KV_TABLES/<model>/; the comparisons are TABLES/kvcache_*.csv
KV_FIGURES = f"{FIGURES}/kvcache"  # a model's figures, as its tables
KV_TIMINGS = f"{TIMINGS}/kvcache"
KV_TASKS = f"{KV_RESULTS}/tasks.json"
KV_TRAJECTORIES = f"{KV_RESULTS}/trajectories.json"

# A run's records, one folder per stage: the served episodes and their requests, the requests' prefix-cache
# simulation, and their replay on the vLLM engine at each kvcache.engine_kv_blocks size.
Stage = Literal["runs", "sim", "engine"]
STAGES: tuple[str, ...] = get_args(Stage)
_FOLDER = KV_RESULTS + "/{kvmodel}/{stage}/{kvfmt}/seed{kvseed}"
KV_RUN, KV_SIM, KV_ENGINE = (_FOLDER.replace("{stage}", s) for s in STAGES)  # the rules' patterns
_RUN_IN = re.compile(rf"(?:.*/)?kvcache/(?P<model>[^/]+)/(?P<stage>{'|'.join(STAGES)})/(?P<fmt>[^/]+)/"
                     r"seed(?P<seed>\d+)(?:/|$)")


@dataclass(frozen=True)
class KVRun:
    """One stage of one run: a model playing ALFWorld in a prompt format with a seed."""

    model: str
    fmt: str
    seed: int
    stage: Stage = "runs"

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"KV-cache run stage {self.stage!r}: one of {', '.join(STAGES)}")

    @property
    def folder(self) -> str:
        return _FOLDER.format(kvmodel=self.model, stage=self.stage, kvfmt=self.fmt, kvseed=self.seed)

    @classmethod
    def of(cls, path: str | PurePath) -> KVRun:
        m = _RUN_IN.match(PurePath(path).as_posix())  # the last kvcache/ folder: one above results/ is not it
        if not m:
            raise ValueError(f"{path}: not in a KV-cache run folder (…/kvcache/MODEL/<runs|sim|engine>/FORMAT/seedN/)")
        return cls(m["model"], m["fmt"], int(m["seed"]), m["stage"])


LAYOUT = (KVRun,)
