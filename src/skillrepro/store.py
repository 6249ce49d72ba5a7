"""Records: one dataclass per Parquet table, atomic writers, and DuckDB views over a results folder.

The dataclasses are the schema. `schema(cls)` derives the Arrow schema from their type hints, so a field
added here reaches every writer and every reader at once. SCHEMA_VERSION goes up when a field changes
meaning or is removed.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import typing
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

# 2: cached_tokens (llm_calls, episodes) is null where the server did not report it, no longer 0
SCHEMA_VERSION = 2


@dataclass
class Episode:
    episode_id: str
    run_id: str
    benchmark: str
    method: str
    variant: str
    seed: int
    split: str  # train | test
    cycle: int  # training batch index, or the checkpoint's library version for test episodes
    library_version: int
    task_id: str
    success: bool
    progression: float
    score: float
    n_steps: int
    n_llm_calls: int
    n_invalid_actions: int
    prompt_tokens: int
    cached_tokens: int | None  # None: a call's server did not report its cached tokens (unknown, not 0)
    completion_tokens: int
    reasoning_tokens: int
    wall_s: float
    termination: str  # success | env_done | budget | wall_clock | context (analysis.TERMINATIONS)
    history: str = "full"  # the actor's history policy: "full" (the paper) or "window:N" (last N steps)


@dataclass
class Step:
    episode_id: str
    step: int
    reasoning: str
    action: str  # tool name as the model wrote it ("" when none could be parsed)
    arguments: str  # JSON list of positional arguments
    valid: bool
    observation: str
    reward: float
    done: bool
    harness_ms: float  # time in our code for this step, excluding env.step and the LLM call


@dataclass
class LLMCall:
    call_id: str
    session_id: str  # episode_id, or an inducer/optimizer/generator session id
    role: str  # actor | inducer | optimizer | generator | scorer | curriculum | critic | skill_writer | replay
    model: str
    backend: str
    prompt_tokens: int
    # the server's usage.prompt_tokens_details.cached_tokens; None when it reports none (vLLM without
    # --enable-prompt-tokens-details): unknown, never recorded as 0
    cached_tokens: int | None
    completion_tokens: int
    reasoning_tokens: int
    latency_s: float
    retries: int
    finish_reason: str
    prompt_sha256: str
    prompt: str  # the request's messages (and tools) as JSON
    response: str
    started_at: float
    prompt_token_ids: list[int] = field(default_factory=list)  # filled when a cache study asks for them
    faults: list[str] = field(default_factory=list)  # kind of each fault retried before this reply ("429", ...)
    # The reply had no `usage`: the token counts come from the server's tokenizer, or are 0 where it has none.
    usage_missing: bool = False
    # The reply came from the run's response cache (llm/ledger.py): its tokens were paid for once, by the
    # request it repeats. The tables still price it (what the method's call costs); the run's spend does not.
    from_cache: bool = False


@dataclass
class SkillCall:
    frame_id: str
    parent_frame_id: str  # "" for a call the actor made
    episode_id: str
    step: int
    function: str
    arguments: str  # JSON
    primitives: str  # JSON list of [name, args, observation] the frame issued itself
    return_value: str
    exception: str
    duration_s: float


@dataclass
class LibraryFunction:
    run_id: str
    version: int
    name: str
    public: bool
    source_sha256: str
    lines: int
    callees: list[str] = field(default_factory=list)


TABLES: dict[str, type] = {
    "episodes": Episode,
    "steps": Step,
    "llm_calls": LLMCall,
    "skill_calls": SkillCall,
    "libraries": LibraryFunction,
}

_ARROW = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}
_DUCK = {"string": "VARCHAR", "int64": "BIGINT", "double": "DOUBLE", "bool": "BOOLEAN"}


def schema(cls: type) -> pa.Schema:
    hints = typing.get_type_hints(cls)
    fields = []
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        args = typing.get_args(t)
        if type(None) in args and len(args) == 2:  # `X | None`: a nullable X
            t = next(a for a in args if a is not type(None))
        if typing.get_origin(t) is list:
            fields.append(pa.field(f.name, pa.list_(_ARROW[typing.get_args(t)[0]])))
        else:
            fields.append(pa.field(f.name, _ARROW[t]))
    return pa.schema(fields, metadata={"skillrepro_schema": str(SCHEMA_VERSION), "record": cls.__name__})


def write_records(path: str | Path, records: Iterable[Any], cls: type) -> Path:
    """Write dataclass records to Parquet atomically (temporary file in the same folder, then rename)."""
    rows = [dataclasses.asdict(r) for r in records]
    table = pa.Table.from_pylist(rows, schema=schema(cls))
    return write_table(path, table)


def write_table(path: str | Path, table: pa.Table) -> Path:
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return Path(path)


def write_text(path: str | Path, text: str) -> Path:
    """Atomic text write, for manifests and small JSON outputs."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def shared_mode(directory: bool = False) -> int:
    """The mode a plain `open()` (or `mkdir`) would give a new file (folder) under the process's umask:
    0644 (0755) under umask 022. Temporary files and folders are made 0600/0700 whatever the umask."""
    return (0o777 if directory else 0o666) & ~_umask()


def _umask() -> int:
    try:  # Linux reports it without changing it (os.umask can only be read by setting it)
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Write `path` atomically: the block writes the yielded temporary path in the same folder, which then
    gets the mode the umask gives a new file and is renamed onto `path`; an error leaves no file behind.
    Every atomic file writer of the package (records, tables, figures, manifests) goes through here, so
    what a user shares is readable as their umask says, not mkstemp's 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, shared_mode())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_dir(folder: str | Path) -> Iterator[Path]:
    """A temporary sibling folder for `folder`, given the umask's folder mode; the caller renames it into
    place (see skills.Library.write). Removed if the block fails."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        os.chmod(tmp, shared_mode(directory=True))
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_records(path: str | Path, cls: type) -> list[Any]:
    return [cls(**row) for row in pq.read_table(path).to_pylist()]


def connect(root: str | Path = "results"):
    """A DuckDB connection with one view per table over every Parquet file of that table under `root`.

    For looking around by hand: files are found by name (`episodes.parquet`, ...), wherever they sit in the
    tree. The workflow's tables use `views` with the exact files a rule declares instead.
    """
    root = Path(root)
    return views({name: sorted(str(p) for p in root.rglob(f"{name}.parquet")) if root.exists() else []
                  for name in TABLES})


def views(files: dict[str, list[str]]):
    """A DuckDB connection with one view per record table over exactly the given files (table name ->
    Parquet paths), each row tagged with its `filename`. A table given no file is an empty view with the
    right columns."""
    # lazy: start-up cost: duckdb adds ~45 ms to the kvcache CLI's start (30 %) and to `import skillrepro.check`
    import duckdb

    con = duckdb.connect()
    for name, cls in TABLES.items():
        paths = files.get(name) or []
        if paths:
            listing = ", ".join("'" + f.replace("'", "''") + "'" for f in paths)
            scan = f"read_parquet([{listing}], union_by_name=true, filename=true)"
            # files written before a field was added lack its column: null there, so every query can name it
            have = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {scan}").fetchall()}
            missing = "".join(f", CAST(NULL AS {_DUCK[str(f.type)]}) AS {f.name}" for f in schema(cls)
                              if f.name not in have and str(f.type) in _DUCK)
            con.execute(f"CREATE VIEW {name} AS SELECT *{missing} FROM {scan}")
        else:
            con.register(f"_{name}_empty", pa.Table.from_pylist([], schema=schema(cls)))
            con.execute(f"CREATE VIEW {name} AS SELECT *, '' AS filename FROM _{name}_empty")
    return con


# ---------------------------------------------------------------------------------------------------- user files
# Input files given on the command line are read line by line within these bounds, so a file of one
# gigabyte-long line stops with a message instead of filling memory.
MAX_LINE_BYTES = 64 * 1024
MAX_FILE_BYTES = 64 * 1024 * 1024


class InputFileError(ValueError):
    """A file given on the command line that cannot be read as text; the message names file and line."""


def read_lines(path: str | Path, what: str = "file", *, max_line_bytes: int = MAX_LINE_BYTES,
               max_file_bytes: int = MAX_FILE_BYTES) -> list[str]:
    """The lines of a UTF-8 text file (without line ends), or an InputFileError naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise InputFileError(f"{what} {str(path)!r} does not exist")
    lines, total = [], 0
    with open(path, "rb") as f:
        while raw := f.readline(max_line_bytes + 1):
            number = len(lines) + 1
            total += len(raw)
            if len(raw) > max_line_bytes:
                raise InputFileError(f"{path}:{number}: line longer than {max_line_bytes} bytes; is this a {what}?")
            if total > max_file_bytes:
                raise InputFileError(f"{path}: larger than {max_file_bytes} bytes; is this a {what}?")
            try:
                lines.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as e:
                raise InputFileError(f"{path}:{number}: not UTF-8 text (byte {raw[e.start]:#04x} at column "
                                     f"{e.start + 1}); save the {what} as UTF-8") from None
    return lines


def shorten(text: str, limit: int = 120) -> str:
    """`text` for a message: at most `limit` characters, the rest counted, never echoed."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"
