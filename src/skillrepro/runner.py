"""Run a batch of episodes of one benchmark with one library version and store their records.

This is the one place that turns (tasks, library, LLM) into Parquet files; the rollout, evaluate and
scout rules all call `run_batch`. A batch resumes: episodes already written to the batch's partial
folder are kept, so a killed job redoes only the episode it was in.
"""
from __future__ import annotations

import logging
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from skillrepro import skills
from skillrepro.agent import Actor, EpisodeRecords, EpisodeSpec, Prompts, primitive_tools
from skillrepro.config import BenchmarkConfig, LLMConfig, MethodConfig
from skillrepro.llm.client import LLMClient, session
from skillrepro.methods import TaskContext, get_method
from skillrepro.skills.sandbox import tag_skill_calls
from skillrepro.store import Episode, LLMCall, SkillCall, Step, read_records, write_records

RECORD_TABLES = {"episodes": Episode, "steps": Step, "llm_calls": LLMCall, "skill_calls": SkillCall}


@dataclass
class BatchOutcome:
    episodes: list[Episode]
    out_dir: Path


def _episode_files(folder: Path) -> dict[str, Path]:
    return {name: folder / f"{name}.parquet" for name in RECORD_TABLES}


def run_batch(
    *,
    bench: BenchmarkConfig,
    llm: LLMConfig,
    library_dir: str | Path,
    task_ids: list[str],
    spec: EpisodeSpec,
    out_dir: str | Path,
    wall_s: float = 1800.0,
    prompts: Prompts | None = None,
    notes: str | None = None,
    method: MethodConfig | None = None,
    history_dirs: tuple[Path, ...] = (),
    client: LLMClient | None = None,
    logger: logging.Logger | None = None,
) -> BatchOutcome:
    """Play `task_ids` and write episodes/steps/llm_calls/skill_calls.parquet into `out_dir`.

    `method` decides what the actor is shown of the library (its notes and visible skills) and, for
    training batches, which task comes next (a curriculum; by default `task_ids` in order). `notes`
    overrides the notes (SkillScaffold injects a skill card this way).
    """
    if client is None:
        with session(llm) as client:
            return run_batch(bench=bench, llm=llm, library_dir=library_dir, task_ids=task_ids, spec=spec,
                             out_dir=out_dir, wall_s=wall_s, prompts=prompts, notes=notes, method=method,
                             history_dirs=history_dirs, client=client, logger=logger)
    log = logger or logging.getLogger("skillrepro.runner")
    out_dir = Path(out_dir)
    partial = out_dir.parent / f".{out_dir.name}.partial"
    benchmark = bench.load()
    library = skills.Library.load(library_dir)
    impl, options = _method(method)
    if notes is None:
        notes = impl.notes(library, options) if impl else library.notes
    visible = impl.visible(library, options) if impl else None
    actor = Actor(client, benchmark.describe(), bench.call_budget(), wall_s, llm.tool_calling,
                  prompts or Prompts(), notes)
    progress = _progress(len(task_ids), f"{spec.benchmark}/{spec.variant}/seed{spec.seed} {spec.split} c{spec.cycle}")
    for i, task_id in enumerate(task_ids):
        done_dir = partial / f"{i:04d}"
        if not (done_dir / "episodes.parquet").exists():
            episode_actor, shown, choice_calls = actor, visible, []
            if impl is not None and spec.split == "train":
                choice = impl.next_task(TaskContext(library, options, spec.cycle, i, tuple(task_ids),
                                                    tuple(history_dirs) + _finished(partial), llm, bench, client,
                                                    spec.run_id))
                task_id, choice_calls = choice.task_id, list(choice.llm_calls)
                if choice.goal:
                    episode_actor = replace(actor, notes=f"{notes}\nGoal for this episode: {choice.goal}".strip())
                if choice.visible is not None:
                    shown = list(choice.visible)
            env = benchmark.make(task_id)
            skill_calls: list[SkillCall] = []
            tools = primitive_tools(env) + skills.tools_for(library, env, skill_calls.append, shown)
            rec: EpisodeRecords = episode_actor.run(env, tools, spec, log.info)
            tag_skill_calls(skill_calls, rec.episode.episode_id, rec.steps)
            # Episode file last: its presence marks the episode as complete.
            write_records(done_dir / "steps.parquet", rec.steps, Step)
            write_records(done_dir / "llm_calls.parquet", choice_calls + rec.llm_calls, LLMCall)
            write_records(done_dir / "skill_calls.parquet", skill_calls, SkillCall)
            write_records(done_dir / "episodes.parquet", [rec.episode], Episode)
        else:
            log.info("task=%s already done, kept", task_id)
        progress.update(1)
    progress.close()
    # Merge the per-episode files into the batch's tables.
    merged: dict[str, list] = {name: [] for name in RECORD_TABLES}
    for i in range(len(task_ids)):
        for name, cls in RECORD_TABLES.items():
            merged[name] += read_records(partial / f"{i:04d}" / f"{name}.parquet", cls)
    for name, cls in RECORD_TABLES.items():
        write_records(out_dir / f"{name}.parquet", merged[name], cls)
    shutil.rmtree(partial, ignore_errors=True)
    return BatchOutcome(merged["episodes"], out_dir)


def _finished(partial: Path) -> tuple[Path, ...]:
    """This batch's finished episodes, one folder each (same tables as a batch folder)."""
    return tuple(sorted(d for d in partial.glob("[0-9]*") if (d / "episodes.parquet").exists()))


def _method(method: MethodConfig | None) -> tuple[Any, Any]:
    if method is None:
        return None, None
    impl = get_method(method.method)
    return impl, impl.parse_options(method.options, method.variant)


def _progress(total: int, desc: str):
    from tqdm import tqdm

    # A bar on a terminal; in a log file (snakemake redirects stderr) one line per episode suffices.
    return tqdm(total=total, desc=desc, disable=not sys.stderr.isatty(), leave=False)
