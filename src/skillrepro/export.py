"""`skillrepro export RUN OUT`: one run's records and libraries as a Hugging Face `datasets` folder.

OUT gets one folder of Parquet files per table and a dataset card, README.md, whose YAML front matter lists one
config per table (`configs:`), so that `datasets.load_dataset(OUT, "episodes")` reads a table back, as does
`datasets.load_dataset("parquet", data_files=...)` with the card's globs. Nothing here imports `datasets`: the
folder is plain Parquet and YAML, written with pyarrow.

What is read from the run folder (results/runs/BENCH/VARIANT/seedN, skillrepro.studies.speedrunner.paths):
  train/batchK/{episodes,steps,llm_calls,skill_calls}.parquet   training batch K, played with library vK
  eval/vK/{...}.parquet                                          the checkpoint of library vK on the test tasks
  induce/vK/llm_calls.parquet                                    the sleep phase that wrote library vK
  library/vK/manifest.json                                       library version K (skills.Library)
A record table's `train` split holds the training batches (and the sleep phases' calls), its `test` split the
checkpoints, as the episodes' own `split` column says. Each row also gets `folder`, the folder of the run it came
from (train/batch0, eval/v1, induce/v1): a step, a skill call or a sleep phase's call has no split or version of
its own. A table or split without rows is left out (`datasets` cannot read it). The protocols' extra test sets
(eval_on/, truncated/) are not exported.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from skillrepro.skills.library import Library
from skillrepro.store import SCHEMA_VERSION, TABLES, atomic_dir, schema


class ExportError(RuntimeError):
    """A run that cannot be exported, or an OUT that would be overwritten; the message names the path."""


# The run's record folders: (subfolder, name pattern, HF split, place in time). A sleep phase vK follows training
# batch K-1, so a split's files are read in the order the run wrote them.
_FOLDERS: tuple[tuple[str, re.Pattern[str], str, Callable[[int], tuple[int, int]]], ...] = (
    ("train", re.compile(r"batch(\d+)"), "train", lambda k: (k, 0)),
    ("induce", re.compile(r"v(\d+)"), "train", lambda k: (k - 1, 1)),
    ("eval", re.compile(r"v(\d+)"), "test", lambda k: (k, 0)),
)
RECORD_TABLES = ("episodes", "steps", "llm_calls", "skill_calls")
SPLITS = ("train", "test")
_IDENTITY = ("run_id", "benchmark", "method", "variant", "seed")

LIBRARY_SCHEMA = pa.schema([
    ("version", pa.int64()), ("name", pa.string()), ("public", pa.bool_()), ("signature", pa.string()),
    ("doc", pa.string()), ("source", pa.string()), ("callees", pa.list_(pa.string())), ("sha256", pa.string()),
])
VERSION_SCHEMA = pa.schema([
    ("version", pa.int64()), ("n_functions", pa.int64()), ("n_public", pa.int64()), ("notes", pa.string()),
    ("meta", pa.string()),
])

# What a row of each table is, for the card.
DESCRIPTIONS = {
    "episodes": "one row per episode. `train`: the training batches (train/batchK, played with library vK, "
                "`cycle` K); `test`: the checkpoints (eval/vK: library vK on the held-out test tasks). `split`, "
                "`cycle` and `library_version` are the record's own columns.",
    "steps": "one row per step of an episode's actor (join on `episode_id`).",
    "llm_calls": "one row per LLM request, with its prompt and reply. An actor's calls have the episode's id as "
                 "`session_id`; the `train` split also holds the sleep phases' calls (`folder` induce/vK: the "
                 "phase that wrote library vK).",
    "skill_calls": "one row per call of a library function during an episode (`parent_frame_id` is \"\" for a call "
                   "the actor made, else the calling frame's `frame_id`).",
    "libraries": "one row per function of each library version, in the version's order. `public`: shown to the "
                 "actor; `callees`: the library functions its body calls; `sha256`: of its source.",
    "library_versions": "one row per library version: its `notes` (prompt text the method keeps for the actor, "
                        "empty for code-only methods) and `meta` (who wrote it and how, JSON).",
}


@dataclass(frozen=True)
class RecordFile:
    path: Path
    folder: str  # relative to the run: train/batch0, eval/v1, induce/v1
    split: str
    order: tuple[int, int]


@dataclass(frozen=True)
class Export:
    out: Path
    identity: dict[str, Any]
    rows: dict[str, dict[str, int]]  # table -> split -> rows written


def package_version() -> str:
    try:
        return version("skillrepro")
    except PackageNotFoundError:  # run from a source tree that was never pip-installed
        return "unknown"


def record_files(run: Path, table: str) -> list[RecordFile]:
    """The run's files of one record table, in the order the run wrote them (batch10 after batch9)."""
    found = []
    for sub, pattern, split, order in _FOLDERS:
        for folder in (run / sub).iterdir() if (run / sub).is_dir() else ():
            # a regex, not a glob: the runner's resume folders (.batchK.partial) hold tables too
            m = pattern.fullmatch(folder.name)
            if m and (folder / f"{table}.parquet").is_file():
                found.append(RecordFile(folder / f"{table}.parquet", f"{sub}/{folder.name}", split,
                                        order(int(m.group(1)))))
    return sorted(found, key=lambda f: (f.split, f.order))


def export_run(run: str | Path, out: str | Path, *, force: bool = False) -> Export:
    """Write `run`'s tables and card to `out`. Everything is checked before anything is written, and the files
    are written in a temporary sibling of `out` first, so a failure leaves `out` as it was."""
    run, out = Path(run), Path(out)
    if not run.is_dir():
        raise ExportError(f"run folder {run} does not exist" if not run.exists() else f"{run} is not a folder")
    episodes = record_files(run, "episodes")
    identity = _identity(episodes)
    if identity is None:
        raise ExportError(f"run folder {run} holds no episodes (no train/batchK/episodes.parquet or eval/vK/"
                          "episodes.parquet with a row); is it a run folder, results/runs/BENCH/VARIANT/seedN?")
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ExportError(f"{out} exists and is not empty; give --force to replace an earlier export there")
    versions = _libraries(run)
    with atomic_dir(out) as tmp:
        rows = {table: _write_records(tmp / table, record_files(run, table), TABLES[table])
                for table in RECORD_TABLES}
        rows = {table: counts for table, counts in rows.items() if counts}  # a table with no rows: no config
        for table, target, made in (("libraries", LIBRARY_SCHEMA, _function_rows(versions)),
                                    ("library_versions", VERSION_SCHEMA, _version_rows(versions))):
            if n := _write(tmp / table, "train", target, made):
                rows[table] = {"train": n}
        (tmp / "README.md").write_text(card(identity, rows))
        _move_into(tmp, out)
    return Export(out, identity, rows)


def _identity(episodes: list[RecordFile]) -> dict[str, Any] | None:
    """The run the episodes belong to, None when there are none. A folder mixing runs is refused: its card would
    name one of them."""
    seen = set()
    for f in episodes:
        for row in _read(f.path, columns=list(_IDENTITY)).to_pylist():
            seen.add(tuple(row[c] for c in _IDENTITY))
    if len(seen) > 1:
        raise ExportError(f"{episodes[0].path.parents[2]} holds episodes of {len(seen)} runs: "
                          f"{', '.join(sorted(str(s[0]) for s in seen))}")
    return dict(zip(_IDENTITY, seen.pop())) if seen else None


def _read(path: Path, columns: list[str] | None = None) -> pa.Table:
    try:
        return pq.read_table(path, columns=columns)
    except (OSError, pa.ArrowException) as e:
        raise ExportError(f"{path}: cannot be read as a record table ({e})") from None


def _write_records(folder: Path, files: list[RecordFile], cls: type) -> dict[str, int]:
    """One Parquet file per split, streamed one record file at a time: a run's llm_calls (every prompt) can be far
    larger than memory."""
    target = schema(cls).append(pa.field("folder", pa.string()))
    counts: dict[str, int] = {}
    for split in SPLITS:
        chosen = [f for f in files if f.split == split]
        n = _write(folder, split, target, (_conform(_read(f.path), target, f) for f in chosen))
        if n:
            counts[split] = n
    return counts


def _conform(table: pa.Table, target: pa.Schema, f: RecordFile) -> pa.Table:
    """`table` in the current record schema, plus its folder. A column a file written under an older schema
    lacks is null (unknown), as DuckDB's union_by_name reads it (store.views)."""
    columns = []
    for field in target:
        if field.name == "folder":
            columns.append(pa.array([f.folder] * table.num_rows, pa.string()))
        elif field.name in table.column_names:
            try:
                columns.append(table.column(field.name).cast(field.type))
            except pa.ArrowException as e:
                raise ExportError(f"{f.path}: column {field.name} is not {field.type} ({e})") from None
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=target)


def _write(folder: Path, split: str, target: pa.Schema,
           parts: Iterable[pa.Table | list[dict[str, Any]]]) -> int:
    """Write `parts` (tables, or lists of row dicts) as the split's one file, named as the Hub names shards, and
    return its rows. No rows, no file: `datasets` fails on a Parquet file of no rows, and on a config whose split
    matches no file, so an empty split (say, the skill calls of a method without skills) is left out."""
    writer, n = None, 0
    try:
        for part in parts:
            table = part if isinstance(part, pa.Table) else pa.Table.from_pylist(part, schema=target)
            if table.num_rows == 0:
                continue
            if writer is None:
                folder.mkdir(exist_ok=True)
                writer = pq.ParquetWriter(folder / f"{split}-00000-of-00001.parquet", target)
            writer.write_table(table)
            n += table.num_rows
    finally:
        if writer is not None:
            writer.close()
    return n


def _libraries(run: Path) -> list[Library]:
    """The run's complete library versions (those with a manifest), by version."""
    root = run / "library"
    folders = [d for d in root.iterdir() if re.fullmatch(r"v\d+", d.name) and (d / "manifest.json").is_file()] \
        if root.is_dir() else []
    versions = []
    for d in sorted(folders, key=lambda d: int(d.name[1:])):
        try:
            versions.append(Library.load(d))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ExportError(f"{d}: not a readable library version ({type(e).__name__}: {e})") from None
    return versions


def _function_rows(versions: list[Library]) -> Iterator[list[dict[str, Any]]]:
    for lib in versions:
        yield [{"version": lib.version, "name": f.name, "public": f.public, "signature": f.signature, "doc": f.doc,
                "source": f.source, "callees": list(f.callees), "sha256": f.sha256} for f in lib.functions]


def _version_rows(versions: list[Library]) -> Iterator[list[dict[str, Any]]]:
    yield [{"version": lib.version, "n_functions": len(lib.functions), "n_public": len(lib.public()),
            "notes": lib.notes, "meta": json.dumps(lib.meta, sort_keys=True)} for lib in versions]


def _move_into(tmp: Path, out: Path) -> None:
    """Put the written files in place. With --force only what an export writes is replaced: OUT may be any folder
    the user named, and its other files are not ours to delete."""
    if not out.exists():
        os.replace(tmp, out)
        return
    # every name an export may write, not only this one's: a table an earlier export had and this run lacks goes
    for name in ("README.md", *RECORD_TABLES, "libraries", "library_versions"):
        old = out / name
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old)
        elif old.exists() or old.is_symlink():
            old.unlink()
    for entry in tmp.iterdir():
        os.replace(entry, out / entry.name)
    tmp.rmdir()


def card(identity: dict[str, Any], rows: dict[str, dict[str, int]]) -> str:
    """The dataset card: `configs` front matter (what `load_dataset` reads), then what each table holds."""
    configs = [{"config_name": table, **({"default": True} if table == "episodes" else {}),
                "data_files": [{"split": s, "path": f"{table}/{s}-*.parquet"} for s in counts]}
               for table, counts in rows.items()]
    front = yaml.safe_dump({"pretty_name": f"skillrepro run {identity['run_id']}", "tags": ["skillrepro"],
                            "configs": configs}, sort_keys=False)
    lines = [
        "---", front.rstrip(), "---", "",
        f"# skillrepro run {identity['run_id']}", "",
        f"The records of one run: benchmark `{identity['benchmark']}`, variant `{identity['variant']}` (method "
        f"`{identity['method']}`), seed {identity['seed']}. Exported by skillrepro {package_version()} "
        f"(`skillrepro export`), record schema version {SCHEMA_VERSION}.", "",
        'Read a table with `datasets.load_dataset("<this folder>", "episodes")` (one config per table), or any '
        "Parquet reader on the files below. Record tables have a `train` split (the training batches and sleep "
        "phases) and a `test` split (the checkpoints on the held-out tasks); their `folder` column is the folder "
        "of the run a row came from (train/batch0, induce/v1, eval/v1). A table or split without rows has no "
        "config or file (`datasets` cannot read a Parquet file of no rows).", "",
        "| config | rows | a row is |", "| --- | --- | --- |",
    ]
    for table, counts in rows.items():
        shown = ", ".join(f"{s} {n}" for s, n in counts.items())
        lines.append(f"| `{table}` | {shown} | {DESCRIPTIONS[table]} |")
    lines += ["", "## Columns", ""]
    for table in rows:
        names = _columns(table)
        lines.append(f"- `{table}`: {', '.join(f'`{c}`' for c in names)}")
    return "\n".join(lines) + "\n"


def _columns(table: str) -> list[str]:
    if table == "libraries":
        return LIBRARY_SCHEMA.names
    if table == "library_versions":
        return VERSION_SCHEMA.names
    return schema(TABLES[table]).names + ["folder"]


# ---------------------------------------------------------------------------------------------------------- CLI
def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export")  # its help: skillrepro.cli.COMMANDS
    p.add_argument("run", help="a run folder, results/runs/BENCH/VARIANT/seedN")
    p.add_argument("out", help="the dataset folder to write (new or empty)")
    p.add_argument("--force", action="store_true",
                   help="write into OUT although it is not empty (an export's own files there are replaced)")
    p.set_defaults(func=_cli)


def _cli(a: argparse.Namespace) -> int:
    try:
        done = export_run(a.run, a.out, force=a.force)
    except ExportError as e:
        raise SystemExit(f"skillrepro export: {e}")
    for table, counts in done.rows.items():
        print(f"{table}: " + ", ".join(f"{s} {n} rows" for s, n in counts.items()))
    print(f"wrote {done.out} ({done.identity['run_id']}); read it with datasets.load_dataset({str(done.out)!r}, "
          f"\"episodes\")")
    return 0
