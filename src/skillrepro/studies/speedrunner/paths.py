"""SpeedRunner's results layout, written here once: the rules build every path from these folders and patterns
(rules/speedrunner/*.smk), the jobs name their run with run_id, and the analytics read a path's run back with
Run.of (the inverse of Run.folder), a record's run and cycle with batch_of and folder_of."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePath

from skillrepro.studies.contract import RESULTS, TIMINGS

TASKS = f"{RESULTS}/tasks"  # each benchmark's task lists
ANALYTICS = f"{RESULTS}/analytics"  # the DuckDB views' Parquet exports
VIEWS = f"{RESULTS}/views"  # the HTML pages of episodes, sleep phases and libraries
RUN_ID = "{bench}/{variant}/seed{seed}"  # one run: benchmark x method variant x seed
RUN = f"{RESULTS}/runs/{RUN_ID}"  # its records: library/v{k}/, train/batch{k}/, induce/v{k}/, eval/v{k}/, ...
RUN_LOG = "logs/runs/" + RUN_ID  # its jobs' logs
RUN_TIMING = f"{TIMINGS}/runs/{RUN_ID}"  # its jobs' timings

_RUN_IN = re.compile(r"(?:^|/)runs/(?P<bench>[^/]+)/(?P<variant>[^/]+)/seed(?P<seed>\d+)(?:/|$)")
_FOLDER = re.compile(r"runs/(?P<run>[^/]+/[^/]+/seed\d+)/(?P<kind>train|induce|eval|eval_on|truncated)/[^.][^/]*(?:/[^/]+)?/"
                     r"[a-z_]+\.parquet$")
_CALLS = re.compile(r"runs/(?P<run>[^/]+/[^/]+/seed\d+)/(?:train/batch(?P<batch>\d+)|induce/v(?P<v>\d+))/llm_calls\.parquet$")


def run_id(bench: str, variant: str, seed: int | str) -> str:
    return RUN_ID.format(bench=bench, variant=variant, seed=seed)


@dataclass(frozen=True)
class Run:
    """One run: benchmark instance x method variant x seed."""

    bench: str
    variant: str
    seed: int

    @property
    def folder(self) -> str:
        """Its records' folder (RUN)."""
        return RUN.format(bench=self.bench, variant=self.variant, seed=self.seed)

    @classmethod
    def of(cls, path: str | PurePath) -> Run:
        """The run whose folder holds `path` (the folder itself or anything under it): Run.folder read back."""
        m = _RUN_IN.search(PurePath(path).as_posix())
        if not m:
            raise ValueError(f"{path}: not in a run folder (…/runs/BENCH/VARIANT/seedN/)")
        return cls(m["bench"], m["variant"], int(m["seed"]))


def training_history(library_dir: str | Path, k: int) -> tuple[Path, ...]:
    """The folders of a run's training batches 0..k-1, which rollout k and sleep phase k read. Their rules
    list only batch k-1 as input: every earlier batch is its ancestor through the library chain, and listing
    them all made the DAG quadratic in the cycles. So check here that each one is complete."""
    train = Path(library_dir).parent.parent / "train"
    dirs = tuple(train / f"batch{i}" for i in range(k))
    missing = [str(d) for d in dirs if not (d / "episodes.parquet").exists()]
    if missing:
        raise FileNotFoundError(f"training batches this job reads are missing: {', '.join(missing)}")
    return dirs


def batch_of(path: str) -> tuple[str, int, str]:
    """(run id, cycle, phase) of a training batch's or a sleep phase's llm_calls.parquet. Sleep phase v{k} follows
    training batch k-1, so it belongs to cycle k-1."""
    m = _CALLS.search(path)
    if not m:
        raise ValueError(f"{path}: neither a training batch's nor a sleep phase's calls "
                         f"(…/runs/BENCH/VARIANT/seedN/train/batchK/ or induce/vK/llm_calls.parquet)")
    return (m["run"], int(m["batch"]), "train") if m["batch"] is not None else (m["run"], int(m["v"]) - 1, "sleep")


def folder_of(path: str) -> tuple[str, str]:
    """(run id, unit) of a record file in a run folder: unit "train" (a training batch), "sleep" (a sleep phase)
    or "test" (an evaluation: a checkpoint, another instance's test set, a truncated library)."""
    m = _FOLDER.search(path)
    if not m:
        raise ValueError(f"{path}: not a record of a run folder (…/runs/BENCH/VARIANT/seedN/<train|induce|eval|…>/)")
    return m["run"], {"train": "train", "induce": "sleep"}.get(m["kind"], "test")
