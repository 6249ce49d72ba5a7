"""Run a batch of episodes of one benchmark with one library version and store their records.

This is the one place that turns (tasks, library, LLM) into Parquet files; the rollout, evaluate and
scout rules all call `run_batch`.

Episodes in flight: up to `llm.episodes_in_flight` episodes of a batch play at once, each on its own
environment, in threads (the work is waiting for the LLM). Their env calls are serialised by one lock
(env steps take milliseconds; several simulators, e.g. textworld's, are not thread-safe), and their
records are merged in task order, so a batch's tables do not depend on how many episodes were in flight.
A method with a curriculum (`next_task`) chooses each task from the episodes before it, so its training
batches play one episode at a time; so do benchmarks that hold one simulator per process (ScienceWorld).

Kill -9 at any moment loses no finished episode. Each finished episode is written to the batch's hidden
resume folder (`.batchK.partial/` beside the output folder), which Snakemake does not know and never
deletes. When every episode is in, the merged tables are written there first (`done.*.parquet`) and then
hard-linked to the declared outputs: if the job is killed before Snakemake records it, Snakemake deletes
the outputs and reruns the job, which links the same tables again (same episode ids) without one LLM
call. The resume folder is keyed by everything that decides the batch's episodes (`batch_key`): a batch
rerun because its settings or library changed starts afresh. `forget_finished` drops the resume folders
once Snakemake has recorded their jobs (the workflow calls it when a run succeeds).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable

from skillrepro import skills
from skillrepro.agent import Actor, EpisodeRecords, EpisodeSpec, Prompts, primitive_tools, skill_tools
from skillrepro.config import OPERATIONAL_LLM_KEYS, ROLLOUT_WALL_S, BenchmarkConfig, LLMConfig, MethodConfig
from skillrepro.llm.client import LLMClient, session
from skillrepro.llm.limits import tool_limits
from skillrepro.methods import TaskContext, Variant, default_next_task
from skillrepro.progress import Progress
from skillrepro.skills.isolation import SandboxPolicy
from skillrepro.skills.protocol import tag_skill_calls
from skillrepro.store import Episode, LLMCall, SkillCall, Step, read_records, write_records
from skillrepro.benchmarks import call_budget, load_benchmark

RECORD_TABLES = {"episodes": Episode, "steps": Step, "llm_calls": LLMCall, "skill_calls": SkillCall}



@dataclass
class BatchOutcome:
    episodes: list[Episode]
    out_dir: Path


def resume_dir(out_dir: str | Path) -> Path:
    """The hidden folder beside `out_dir` that keeps the batch's finished episodes across kills."""
    out_dir = Path(out_dir)
    return out_dir.parent / f".{out_dir.name}.partial"


def run_batch(
    *,
    bench: BenchmarkConfig,
    llm: LLMConfig,
    library_dir: str | Path,
    task_ids: list[str],
    spec: EpisodeSpec,
    out_dir: str | Path,
    wall_s: float = float(ROLLOUT_WALL_S),
    prompts: Prompts | None = None,
    notes: str | None = None,
    method: Variant | None = None,
    history_dirs: tuple[Path, ...] = (),
    client: LLMClient | None = None,
    logger: logging.Logger | None = None,
    sandbox: SandboxPolicy = SandboxPolicy(),
    progress: Progress | None = None,
) -> BatchOutcome:
    """Play `task_ids` and write episodes/steps/llm_calls/skill_calls.parquet into `out_dir`.

    `method` (the variant bound to its method, skillrepro.methods.bind) decides what the actor is shown of the
    library (its notes and visible skills) and, for training batches, which task comes next (a curriculum; by
    default `task_ids` in order). `notes` overrides the notes (SkillScaffold injects a skill card this way).
    `progress`: the job's count when it plays several batches (SkillScaffold plays one batch per card), updated
    here and closed by the caller; None: the batch's own.
    """
    log = logger or logging.getLogger("skillrepro.runner")
    out_dir = Path(out_dir)
    prompts = prompts or Prompts()
    impl, options = (method.impl, method.options) if method else (None, None)
    curriculum = _curriculum(impl, spec.split)
    key = batch_key(bench=bench, llm=llm, library_dir=library_dir, task_ids=task_ids, spec=spec, wall_s=wall_s,
                    prompts=prompts, notes=notes, method=method.config if method else None, history_dirs=history_dirs if curriculum else ())
    partial = _open_resume_dir(resume_dir(out_dir), key, log)
    if (partial / "done.episodes.parquet").exists():
        log.info("batch already merged before an interruption: its %d episodes are kept", len(task_ids))
        if progress is not None:
            progress.update(len(task_ids))
        return BatchOutcome(_link_outputs(partial, out_dir), out_dir)

    with contextlib.ExitStack() as stack:
        if client is None:  # the run's own server, opened once the batch has episodes to play
            client = stack.enter_context(session(llm))
        benchmark = load_benchmark(bench)
        library = skills.Library.load(library_dir)
        if notes is None:
            notes = impl.notes(library, options) if impl else library.notes
        visible = impl.visible(library, options) if impl else None
        actor = Actor(client, benchmark.describe(), call_budget(bench), wall_s, llm.tool_calling, prompts, notes,
                      history_window=bench.history_window, tool_limits=tool_limits(llm.backend, llm.max_tools))
        env_lock = threading.Lock()
        # episodes done of N on the console (stderr, which Snakemake shows) and in the job's log
        label = f"{spec.benchmark}/{spec.variant}/seed{spec.seed} {spec.split} c{spec.cycle}"
        counter = progress or Progress(len(task_ids), f"{spec.split} episodes", label=label)

        def play(i: int) -> None:
            task_id, episode_actor, shown, choice_calls = task_ids[i], actor, visible, []
            if curriculum:
                choice = impl.next_task(TaskContext(library, options, spec.cycle, i, tuple(task_ids),
                                                    tuple(history_dirs) + _finished(partial), llm, bench, client,
                                                    spec.run_id))
                task_id, choice_calls = choice.task_id, list(choice.llm_calls)
                if choice.goal:
                    episode_actor = replace(actor, notes=f"{notes}\nGoal for this episode: {choice.goal}".strip())
                if choice.visible is not None:
                    shown = list(choice.visible)
            with env_lock:
                env = _Locked(benchmark.make(task_id), env_lock)
            skill_calls: list[SkillCall] = []
            tools = primitive_tools(env) + skill_tools(library, env, skill_calls.append, sandbox, shown)
            episode_id = f"{spec.run_id}/{spec.split}/c{spec.cycle}/{task_id}/{_digest(key, str(i))[:8]}"
            replan = choice.replan if curriculum else None

            def on_step(observation: str, env: Any) -> str | None:
                """A curriculum's next goal mid-episode: its calls join the episode's, its goal the actor's notes."""
                nxt = replan(observation, env)
                if nxt is None:
                    return None
                choice_calls.extend(nxt.llm_calls)
                return f"{notes}\nGoal for this episode: {nxt.goal}".strip()

            rec: EpisodeRecords = episode_actor.run(env, tools, spec, log.info, episode_id=episode_id,
                                                    on_step=on_step if replan is not None else None)
            tag_skill_calls(skill_calls, rec.episode.episode_id, rec.steps)
            # The curriculum's calls go ahead of the actor's: they are this episode's cost too.
            _write_episode(partial / f"{i:04d}", replace(rec, llm_calls=choice_calls + rec.llm_calls), skill_calls)
            counter.update(1)

        todo = [i for i in range(len(task_ids)) if not (partial / f"{i:04d}" / "episodes.parquet").exists()]
        if len(todo) < len(task_ids):
            log.info("resuming: %d of %d episodes already finished, kept", len(task_ids) - len(todo), len(task_ids))
            counter.update(len(task_ids) - len(todo))
        in_flight = 1 if plays_one_at_a_time(benchmark, method, spec.split) else min(llm.episodes_in_flight, len(todo))
        try:
            _play_all(play, todo, in_flight)
        except BaseException as error:  # a batch that fails says so, and stops its heartbeat (a thread a test
            if progress is None:        # process would keep otherwise)
                counter.close(error)
            raise
        if progress is None:
            counter.close()
        _merge(partial, len(task_ids))
        return BatchOutcome(_link_outputs(partial, out_dir), out_dir)


def plays_one_at_a_time(benchmark: Any, method: Variant | None, split: str) -> bool:
    """True when a batch's episodes cannot be in flight together: a curriculum's training batch (each choice
    sees the episodes before it) or a benchmark whose envs share one simulator per process."""
    return _curriculum(method.impl if method else None, split) or benchmark.one_episode_per_process


def batch_key(*, bench: BenchmarkConfig, llm: LLMConfig, library_dir: str | Path, task_ids: list[str],
              spec: EpisodeSpec, wall_s: float, prompts: Prompts, notes: str | None, method: MethodConfig | None,
              history_dirs: Iterable[Path] = ()) -> str:
    """A digest of everything that decides a batch's episodes: the settings (not how fast they run), the
    library's files, and, for a curriculum, the training history it chooses from."""
    settings = {
        "bench": dataclasses.asdict(bench),
        "llm": {k: v for k, v in dataclasses.asdict(llm).items() if k not in OPERATIONAL_LLM_KEYS},
        "task_ids": list(task_ids), "spec": dataclasses.asdict(spec), "wall_s": wall_s,
        "prompts": dataclasses.asdict(prompts), "notes": notes,
        "method": dataclasses.asdict(method) if method else None,
        "library": _files_digest([Path(library_dir)]),
        "history": _files_digest(Path(d) for d in history_dirs),
    }
    return _digest(json.dumps(settings, sort_keys=True, default=list))


def forget_finished(output_files: Iterable[str | Path]) -> int:
    """Delete the resume folders of batches whose outputs are among `output_files` and merged: call it only
    once Snakemake has recorded those jobs (a later forced rerun then plays afresh). Returns how many."""
    n = 0
    for f in output_files:
        f = Path(f)
        partial = resume_dir(f.parent)
        if f.name == "episodes.parquet" and f.exists() and (partial / "done.episodes.parquet").exists():
            shutil.rmtree(partial, ignore_errors=True)
            n += 1
    return n


# ----------------------------------------------------------------------------------------------------------
def _play_all(play, todo: list[int], in_flight: int) -> None:
    if in_flight <= 1:
        for i in todo:
            play(i)
        return
    with ThreadPoolExecutor(in_flight, thread_name_prefix="episode") as pool:
        futures = [pool.submit(play, i) for i in todo]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in done if f.exception() is not None]
        if failed:
            # Episodes already in flight finish and are kept; the ones not started yet are not started.
            pool.shutdown(wait=True, cancel_futures=True)
            raise failed[0].exception()


def _write_episode(folder: Path, rec: EpisodeRecords, skill_calls: list[SkillCall]) -> None:
    # Episode file last: its presence marks the episode as complete.
    write_records(folder / "steps.parquet", rec.steps, Step)
    write_records(folder / "llm_calls.parquet", rec.llm_calls, LLMCall)
    write_records(folder / "skill_calls.parquet", skill_calls, SkillCall)
    write_records(folder / "episodes.parquet", [rec.episode], Episode)


def _merge(partial: Path, n: int) -> None:
    """The batch's tables in task order, kept in the resume folder (episodes last: it marks them complete);
    then the per-episode folders go."""
    for name, cls in sorted(RECORD_TABLES.items(), key=lambda kv: kv[0] == "episodes"):
        rows = [r for i in range(n) for r in read_records(partial / f"{i:04d}" / f"{name}.parquet", cls)]
        write_records(partial / f"done.{name}.parquet", rows, cls)
    for i in range(n):
        shutil.rmtree(partial / f"{i:04d}", ignore_errors=True)


def _link_outputs(partial: Path, out_dir: Path) -> list[Episode]:
    """Hard-link the merged tables to the declared outputs (a copy where links are not allowed): when
    Snakemake deletes an unrecorded output, the resume folder still holds it, at no extra disk."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in RECORD_TABLES:
        src, dst = partial / f"done.{name}.parquet", out_dir / f"{name}.parquet"
        tmp = out_dir / f".{name}.parquet.link"
        tmp.unlink(missing_ok=True)
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    return read_records(out_dir / "episodes.parquet", Episode)


def _open_resume_dir(partial: Path, key: str, log: logging.Logger) -> Path:
    """The resume folder for `key`; one left by a batch with other settings is emptied first."""
    key_file = partial / "key"
    if partial.exists() and (not key_file.exists() or key_file.read_text().strip() != key):
        log.info("%s holds episodes played with other settings: starting the batch afresh", partial)
        shutil.rmtree(partial)
    partial.mkdir(parents=True, exist_ok=True)
    if not key_file.exists():
        key_file.write_text(key + "\n")
    return partial


def _finished(partial: Path) -> tuple[Path, ...]:
    """This batch's finished episodes, one folder each (same tables as a batch folder)."""
    return tuple(sorted(d for d in partial.glob("[0-9]*") if (d / "episodes.parquet").exists()))


def _files_digest(folders: Iterable[Path]) -> str:
    h = hashlib.sha256()
    for folder in folders:
        for f in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")):
            h.update(f"{f.relative_to(folder)}\0".encode())
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


class _Locked:
    """An env whose method calls hold the batch's env lock; attributes read through. The model calls of
    episodes in flight overlap freely, their env steps never."""

    def __init__(self, env: Any, lock: threading.Lock):
        self._env, self._lock = env, lock

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._env, name)
        if not callable(value):
            return value

        def locked(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return value(*args, **kwargs)

        return locked


def _curriculum(impl: Any, split: str) -> bool:
    return impl is not None and split == "train" and impl.next_task is not default_next_task
