"""SkillScaffold's query pools and its episodes: the queries and held-out tasks drawn from a benchmark's pools, and
the Scouts, Post-Scouts and evaluation rollouts played on the runner (by llm.model or a GRPO checkpoint)."""
from __future__ import annotations

import random
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from skillrepro.agent import EpisodeSpec
from skillrepro.benchmarks import load_benchmark
from skillrepro.benchmarks.scienceworld import TaskRef, partitions
from skillrepro.config import ROLLOUT_WALL_S, ConfigError
from skillrepro.llm.servers import own_server
from skillrepro.progress import Progress
from skillrepro.runner import RECORD_TABLES, run_batch
from skillrepro.store import schema as record_schema
from skillrepro.store import write_table
from skillrepro.studies.scaffold.settings import ScaffoldConfig


def sample_queries(bench: Any, cfg: ScaffoldConfig, seed: int) -> list[str]:
    """The fixed queries of `bench`: from `scaffold.splits[bench][split]` when given (ScienceWorld
    "task@partition" pools, drawn uniformly from their union as the paper trains on it), else the
    benchmark's own sampler for `split` (train | test)."""
    return split_tasks(bench, cfg, cfg.split, cfg.n_queries, seed, key="scaffold.split")


def split_pool(bench: Any, cfg: ScaffoldConfig, split: str, key: str) -> list[str] | None:
    """Every task id of a pool named in `scaffold.splits[bench]` (None: `split` is the benchmark's own)."""
    spec = cfg.splits.get(bench.name, {}).get(split)
    if spec is None:
        if split not in ("train", "test"):
            raise ConfigError(f"config key {key}: {split!r} is neither train/test nor a split in "
                              f"scaffold.splits.{bench.name}")
        return None
    if bench.env != "scienceworld":
        raise ConfigError(f"config key scaffold.splits.{bench.name}: task pools exist for scienceworld only")
    pool = []
    for item in spec:
        task, _, part = item.partition("@")
        if part not in ("train", "dev", "test"):
            raise ConfigError(f"config key scaffold.splits.{bench.name}.{split}: {item!r} is not 'task@train|dev|test'")
        pool += [TaskRef(task, v).task_id for v in partitions(task)[part]]
    return pool


def split_tasks(bench: Any, cfg: ScaffoldConfig, split: str, n: int | None, seed: int, key: str) -> list[str]:
    """`n` tasks of `split` drawn with `seed` (None: the whole pool, in a seeded order)."""
    pool = split_pool(bench, cfg, split, key)
    if pool is None:
        b = load_benchmark(bench)
        if n is None:
            n = b.pool_size(split)
            if n is None:
                raise ConfigError(f"config key {key}: {bench.name} cannot tell the size of its {split} pool "
                                  "without its data; give the number of tasks")
        return b.sample_tasks(split, n, seed)
    if n is None:
        n = len(pool)
    if n > len(pool):
        raise ConfigError(f"config key {key}: scaffold.splits.{bench.name}.{split} has {len(pool)} tasks; asked for {n}")
    return random.Random(seed).sample(pool, n)


def episode_variant(variant: str, phase: str, candidate: int = -1) -> str:
    """Episode.variant of scaffold episodes: scout | eval/free | {grp,anc}/post | {grp,anc}/eval/c{j}."""
    if phase == "scout":
        return "scout"
    if phase == "eval_free":
        return "eval/free"
    if phase == "post":
        return f"{variant}/post"
    return f"{variant}/eval/c{candidate}"


def phase_seed(llm: Any, phase: str, index: int) -> Any:
    """Distinct sampling seeds, so the N Scouts (and L Post-Scouts, M candidates) of a query differ."""
    from dataclasses import replace

    base = {"scout": 0, "post": 1000, "eval": 2000, "generate": 3000, "cohort": 4000, "heldout": 5000}[phase]
    return replace(llm, seed=llm.seed + base + index)


@contextmanager
def policy_server(llm: Any, policy: str | None):
    """Serve a GRPO checkpoint's policy for this job (`llm.model` is its serving form); none for `policy` ""
    (the run's shared server plays llm.model)."""
    if not policy:
        yield
        return
    with own_server(llm):
        yield


def play(*, bench: Any, llm: Any, library_dir: str | Path, plan: Sequence[tuple[str, str, str]], run_id: str,
         cycle: int, out_dir: str | Path, wall_s: float = float(ROLLOUT_WALL_S), logger: Any = None, policy: str = "",
         split: str = "train") -> Path:
    """Play (task_id, notes, episode variant) items and merge their records into `out_dir`.

    Items with the same notes share one runner batch (the runner takes one notes text per batch).
    `policy`: a GRPO checkpoint that plays them on a server of this job's own. `split`: Episode.split (test for
    the held-out evaluation)."""
    out_dir = Path(out_dir)
    groups: dict[tuple[str, str], list[str]] = {}
    for task_id, notes, variant in plan:
        groups.setdefault((notes, variant), []).append(task_id)
    parts = []
    # one count over the job's batches: Post-Scouts and candidate evaluations play one batch per card
    with policy_server(llm, policy if groups else ""), Progress(len(plan), f"{split} episodes") as progress:
        for g, ((notes, variant), tasks) in enumerate(groups.items()):
            spec = EpisodeSpec(run_id, bench.name, "skillscaffold", variant, llm.seed, split, cycle, 0)
            part = out_dir / f"part{g:03d}"
            run_batch(bench=bench, llm=llm, library_dir=library_dir, task_ids=tasks, spec=spec, out_dir=part,
                      wall_s=wall_s, notes=notes, logger=logger, progress=progress)
            parts.append(part)
    for name, cls in RECORD_TABLES.items():
        tables = [pq.read_table(p / f"{name}.parquet") for p in parts]
        table = pa.concat_tables(tables) if tables else pa.Table.from_pylist([], schema=record_schema(cls))
        write_table(out_dir / f"{name}.parquet", table)
    return out_dir
