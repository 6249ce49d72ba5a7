"""What SpeedRunner's inducer is shown of the run's history: the per-cycle facts and an example episode in its first
message, and the interpreter (execute_code's notebook), which holds every training table in a read-only DuckDB
and the working library's functions, with each primitive raising there.
"""
from __future__ import annotations

from pathlib import Path

import duckdb

from skillrepro.methods import InduceContext, InducerLimits
from skillrepro.methods.common import Trace
from skillrepro.methods.speedrunner_gate import Session
from skillrepro.methods.speedrunner_protocol import HELPER_API
from skillrepro.skills.library import Library
from skillrepro.skills.isolation import SandboxLimits
from skillrepro.skills.sandbox import SandboxSession
from skillrepro.store import TABLES, schema

HISTORY_TABLES = ("episodes", "steps", "llm_calls", "skill_calls")


def interpreter_limits(limits: InducerLimits) -> SandboxLimits:
    """The interpreter's sandbox. It loads the run's history into DuckDB when it starts: on a busy laptop that
    can take more than a skill worker's 30 s. Its output capture is what the inducer is shown of a result."""
    return SandboxLimits(call_wall_s=60, call_cpu_s=30, memory_bytes=4 << 30, output_chars=limits.tool_output_chars,
                         start_wall_s=180, scratch_bytes=512 << 20)


def history_files(history_dirs: tuple[Path, ...]) -> dict[str, list[str]]:
    return {t: [str(d / f"{t}.parquet") for d in history_dirs if (d / f"{t}.parquet").is_file()] for t in HISTORY_TABLES}


def history_facts(files: dict[str, list[str]]) -> list[dict]:
    """Per-cycle success summary, read in the parent with DuckDB."""
    if not files["episodes"]:
        return []
    con = duckdb.connect()
    listing = ", ".join("'" + f.replace("'", "''") + "'" for f in files["episodes"])
    con.execute(f"CREATE VIEW e AS SELECT * FROM read_parquet([{listing}], union_by_name=true)")
    rows = con.execute("SELECT cycle, library_version, count(*) n, avg(success::INT) success_rate, "
                       "avg(progression) mean_progression, avg(n_steps) mean_steps, "
                       "avg(completion_tokens) mean_output_tokens "
                       "FROM e WHERE split = 'train' GROUP BY ALL ORDER BY cycle").fetchall()
    cols = ["cycle", "library_version", "episodes", "success_rate", "mean_progression", "mean_steps",
            "mean_output_tokens"]
    return [dict(zip(cols, r)) for r in rows]


def example_episode(traces: list[Trace], n_steps: int) -> str:
    """One recorded training episode as the agent saw it, a failed one where there is one (the latest): its
    opening observation and its first `n_steps` steps, each action with what it returned (option
    inducer.example_steps; the paper shows none and the inducer reads episodes with its interpreter)."""
    if n_steps <= 0 or not traces:
        return ""
    t = min(traces, key=lambda t: (t.success, -t.cycle, t.episode_id))
    lines = [f"One recorded episode (episode_id {t.episode_id!r}, task {t.task_id}, "
             f"{'solved' if t.success else 'failed'}), as the agent saw it "
             f"(the steps table has every one):", f"Opening observation:\n{t.opening}"]
    for step, (action, args, observation) in enumerate(t.steps[:n_steps]):
        lines.append(f"Step {step}: {action}({', '.join(map(repr, args))}) returned:\n{observation}")
    return "\n".join(lines)


def notebook_library(sess: Session) -> str:
    """Code that defines the working library in the interpreter, so a cell can try its functions (their
    parsing, on recorded observations). There is no environment there: each primitive raises, saying so."""
    why = ("steps the environment, and execute_code has none (a finished task is never re-run); try the "
           "parts of a function that read observations on recorded ones instead")
    stubs = "\n".join(f"def {p}(*args, **kwargs):\n    raise RuntimeError({(p + '() ' + why)!r})"
                      for p in sorted(sess.primitives))
    return stubs + "\n\n" + Library(0, tuple(sess.functions.values())).source


def _empty_tables() -> dict[str, list[tuple[str, str]]]:
    """Each history table's columns (name, Arrow type), as the store's schema gives them."""
    return {t: [(f.name, str(f.type)) for f in schema(TABLES[t])] for t in HISTORY_TABLES}


def helper_api() -> str:
    """The interpreter's predefined names and tables, as the first message lists them."""
    empty = _empty_tables()
    tables = ", ".join(f"{t}({', '.join(c for c, _ in empty[t])})" for t in HISTORY_TABLES)
    tables += ", openings(task_id, opening: the task's first observation, with its mission)"
    return HELPER_API.format(tables=tables)


def open_interpreter(ctx: InduceContext, sess: Session, files: dict[str, list[str]],
                     traces: list[Trace]) -> SandboxSession:
    """The started interpreter: the history's tables in its DuckDB, the working library defined in its notebook.
    The interpreter is this method's defining tool: one that cannot start, or lacks a required layer, fails the
    sleep phase (SandboxError) instead of letting it write a library without analysis."""
    sandbox = SandboxSession(
        site_packages=True, limits=interpreter_limits(ctx.limits), policy=ctx.sandbox,
        db={"tables": files, "empty_schemas": {t: _duck_types(c) for t, c in _empty_tables().items()},
            # each training task's first observation, from its episode's first actor prompt
            "inline": {"openings": [{"task_id": t, "opening": o} for t, o in
                                    {t.task_id: t.opening for t in traces}.items()]},
            "library_versions": {str(v): str(ctx.library_root / f"v{v}" / "skills.py")
                                 for v in range(ctx.library.version + 1)}})
    try:
        sandbox.start()
        sandbox.exec_code(notebook_library(sess))
    except BaseException:
        sandbox.close()
        raise
    return sandbox


_DUCK = {"string": "VARCHAR", "int64": "BIGINT", "double": "DOUBLE", "bool": "BOOLEAN", "list<item: int64>": "BIGINT[]"}


def _duck_types(cols: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(c, _DUCK.get(t, "VARCHAR")) for c, t in cols]
