"""Helpers the comparison methods (OPO, ASI, Voyager) share, for any method to use (this module registers
no method): the training history as text, a reply's code as functions, append-only additions that still
load, and the sleep phase's records."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillrepro.methods import InducerLimits
from skillrepro.skills.library import MAX_SOURCE_CHARS, Library, SkillFunction, parse_functions, parse_untrusted
from skillrepro.skills.isolation import SandboxLimits, SandboxPolicy
from skillrepro.skills.sandbox import SandboxSession
from skillrepro.store import LLMCall, write_records, write_text

PROMPTS = Path(__file__).resolve().parents[1] / "prompts"
TOKEN_CHARS = 3  # characters per token: every sleep-phase budget's estimate (no tokenizer for every model)


def estimate_tokens(text: str) -> int:
    return -(-len(text) // TOKEN_CHARS)


@dataclass
class Frame:
    """One skill invocation inside an episode step: nested frames follow their parent, one level deeper."""

    depth: int
    function: str
    arguments: str  # JSON [args, kwargs]
    outcome: str  # the return value, or the exception
    primitives: list  # [name, args, observation] the frame issued itself


@dataclass
class Trace:
    """One recorded training episode: its outcome and its steps (the opening observation included), with
    the skill call stacks of the steps that called a skill (the records' skill_calls)."""

    episode_id: str
    task_id: str
    cycle: int
    success: bool
    progression: float
    opening: str
    steps: list[tuple[str, list, str]] = field(default_factory=list)  # (action, arguments, observation)
    frames: dict[int, list[Frame]] = field(default_factory=dict)  # step -> its call stack, depth first

    def render(self) -> str:
        """The episode as every method reads it: whole observations, and under a skill call its stack."""
        outcome = "SUCCESS" if self.success else f"failure (progression {self.progression:.2f})"
        lines = [f"## Episode on task {self.task_id}: {outcome} in {len(self.steps)} steps",
                 _hanging(f"Start: {self.opening}", "   ")]
        for i, (action, args, obs) in enumerate(self.steps):
            lines.append(_hanging(f"{i}. {action}({', '.join(map(repr, args))}) -> {obs}", "   "))
            for f in self.frames.get(i, []):
                pad = "   " * (f.depth + 1)
                lines.append(_hanging(f"{pad}call {f.function}{_call_args(f.arguments)} -> {f.outcome}", pad + "   "))
                lines += [_hanging(f"{pad}   {name}({', '.join(map(repr, a))}) -> {o}", pad + "      ")
                          for name, a, o in f.primitives]
        return "\n".join(lines)


def _hanging(text: str, pad: str) -> str:
    """A multi-line value under its line, indented, so that a call stack stays readable."""
    return text.replace("\n", "\n" + pad + "| ")


def _call_args(arguments: str) -> str:
    try:
        args, kwargs = json.loads(arguments)
        return "(" + ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())]) + ")"
    except (ValueError, TypeError):
        return f"({arguments})"


@dataclass(frozen=True)
class Shown:
    """What a sleep-phase prompt shows of the training episodes (recorded with each call that reads them)."""

    text: str
    tokens: int  # estimated
    episodes_whole: int = 0
    episodes_cut: int = 0  # at most 1: the newest, when not even it fits whole
    episodes_dropped: int = 0
    observations_whole: int = 0  # the opening and one per step, of the episodes shown whole
    observations_cut: int = 0
    observations_dropped: int = 0
    episode_id_cut: str | None = None  # the episode shown cut, if one is
    cut_chars_shown: int = 0  # of its rendered text, the characters shown (its start and its end)
    cut_chars_total: int = 0

    def record(self) -> dict[str, int | str | None]:
        return {k: getattr(self, k) for k in ("episodes_whole", "episodes_cut", "episodes_dropped",
                                               "observations_whole", "observations_cut", "observations_dropped",
                                               "episode_id_cut", "cut_chars_shown", "cut_chars_total")}


# Characters a cut episode keeps at least (its start and its end); with less room no episode is shown
MIN_CUT_CHARS = 200


def show_traces(traces: list[Trace], budget_tokens: int, newest_first: bool = True,
                limit: str = "budgets.trajectory_tokens") -> Shown:
    """Whole episodes, newest first, as many as `budget_tokens` (config key budgets.trajectory_tokens, the
    same for every method, or less where the prompt has less room: `limit` names what set it) holds; the older
    ones are dropped whole, never cut. Only when not even the newest fits is it shown cut (its start and its end,
    saying so and naming `limit`), so that a method still sees something; with no room even for that (under
    MIN_CUT_CHARS), none is shown. The text never holds more than `budget_tokens` estimated tokens' characters
    but for the short line that says no episode fit."""
    order = list(reversed(traces) if newest_first else traces)
    parts, used, whole, obs = [], 0, 0, 0
    for t in order:
        text = t.render()
        if used + estimate_tokens(text) > budget_tokens:
            break
        parts.append(text)
        used += estimate_tokens(text) + 1
        whole, obs = whole + 1, obs + len(t.steps) + 1
    cut = cut_obs = cut_shown = cut_total = 0
    cut_id = None
    if not parts and order:
        text = order[0].render()

        def note(n: int) -> str:
            return f"\n[... {n} characters of this episode cut: {limit} reached ...]\n"

        room = budget_tokens * TOKEN_CHARS - len(note(len(text)))  # the note at its longest
        if room >= MIN_CUT_CHARS:
            parts.append(f"{text[:room // 2]}{note(len(text) - room)}{text[-(room - room // 2):]}")
            cut, cut_obs, cut_id, cut_shown, cut_total = 1, len(order[0].steps) + 1, order[0].episode_id, room, len(text)
    rest = order[whole + cut:]
    out = "\n\n".join(parts) or (f"(no room for a recorded episode: {limit} reached)" if order
                                  else "(no recorded episodes)")
    return Shown(out, estimate_tokens(out), whole, cut, len(rest), obs, cut_obs, sum(len(t.steps) + 1 for t in rest),
                 cut_id, cut_shown, cut_total)


def render_traces(traces: list[Trace], budget_tokens: int, newest_first: bool = True) -> tuple[str, int]:
    """`show_traces`'s text and its estimated tokens, which the methods record with each call."""
    shown = show_traces(traces, budget_tokens, newest_first)
    return shown.text, shown.tokens


def read_traces(dirs: tuple[Path, ...] | list[Path]) -> list[Trace]:
    """Every training episode recorded in `dirs` (batch folders), oldest batch first, with its skill call
    stacks. The opening observation is the first user message of the episode's first actor call (nothing is
    re-run)."""
    import duckdb

    con = duckdb.connect()
    out: list[Trace] = []
    for d in dirs:
        if not (d / "episodes.parquet").is_file():
            continue
        path = lambda t: str(d / f"{t}.parquet").replace("'", "''")  # noqa: E731
        eps = con.execute(f"SELECT episode_id, task_id, cycle, success, progression FROM read_parquet('{path('episodes')}') "
                          "WHERE split = 'train'").fetchall()
        calls = _skill_frames(con, path("skill_calls")) if (d / "skill_calls.parquet").is_file() else {}
        for eid, task, cycle, success, progression in eps:
            steps = con.execute(f"SELECT step, action, arguments, observation FROM read_parquet('{path('steps')}') "
                                "WHERE episode_id = ? ORDER BY step", [eid]).fetchall()
            first = con.execute(f"SELECT prompt FROM read_parquet('{path('llm_calls')}') WHERE session_id = ? "
                                "AND role = 'actor' ORDER BY started_at LIMIT 1", [eid]).fetchone()
            at = {step: i for i, (step, *_) in enumerate(steps)}
            frames = {at[k]: v for k, v in calls.get(eid, {}).items() if k in at}
            out.append(Trace(eid, task, cycle, bool(success), float(progression), _opening(first[0] if first else ""),
                             [(a, json.loads(args or "[]"), obs) for _, a, args, obs in steps], frames))
    return out


def _skill_frames(con, path: str) -> dict[str, dict[int, list[Frame]]]:
    """episode -> step -> that step's frames, each root followed by its nested frames (depth first)."""
    rows = con.execute(f"SELECT frame_id, parent_frame_id, episode_id, step, function, arguments, primitives, "
                       f"return_value, exception FROM read_parquet('{path}') ORDER BY frame_id").fetchall()
    children: dict[str, list] = {}
    for r in rows:
        children.setdefault(r[1], []).append(r)
    out: dict[str, dict[int, list[Frame]]] = {}

    def walk(row, depth: int, into: list[Frame]) -> None:
        fid, _, _, _, fn, args, prims, ret, exc = row
        into.append(Frame(depth, fn, args, f"raised {exc}" if exc else ret, json.loads(prims or "[]")))
        for child in sorted(children.get(fid, []), key=lambda c: int(c[0].rsplit(".", 1)[1])):
            walk(child, depth + 1, into)

    for root in children.get("", []):
        walk(root, 0, out.setdefault(root[2], {}).setdefault(int(root[3]), []))
    return out


def _opening(prompt_json: str) -> str:
    try:
        messages = json.loads(prompt_json)["messages"]
        return next(m["content"] for m in messages if m["role"] == "user")
    except (ValueError, KeyError, StopIteration, TypeError):
        return ""


def budget(llm, limits: InducerLimits) -> tuple[int, int]:
    """(reply tokens, prompt characters) for one sleep-phase call (config section inducer)."""
    return limits.reply_tokens(llm), limits.history_chars(llm)


def prompt_text(option: str | None, default: str) -> str:
    return Path(option).read_text() if option else (PROMPTS / default).read_text()


def check_prompt_file(name: str, path: str | None) -> None:
    if path and not Path(path).is_file():
        raise ValueError(f"{name}: {path} does not exist")


# ------------------------------------------------------------------------------------------ code
CODE_FENCE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def reply_code(text: str) -> str:
    """The reply's code: its ```python blocks, or from the first `def` on; a cut-off tail is dropped."""
    blocks = CODE_FENCE.findall(text)
    code = "\n\n".join(b.strip("\n") for b in blocks) if blocks else text[text.find("def "):] if "def " in text else ""
    return longest_parsing_prefix(code.splitlines()) or ""


PREFIX_TRIES = 200  # a reply cut by max_tokens is broken at its tail: this many line ends back is plenty


def longest_parsing_prefix(lines: list[str]) -> str | None:
    """The longest run of leading lines that parses as Python (a reply cut by max_tokens); None if none does
    among the last PREFIX_TRIES line ends (each try parses the whole prefix: model code is not trusted to be
    small)."""
    if sum(map(len, lines)) > MAX_SOURCE_CHARS:
        return None
    for end in range(len(lines), max(0, len(lines) - PREFIX_TRIES), -1):
        chunk = "\n".join(lines[:end])
        try:
            parse_untrusted(chunk)
            return chunk
        except SyntaxError:
            continue
    return None


# A library's load check (and SpeedRunner's optional replay check) runs model code briefly, with no env.
SMOKE_LIMITS = SandboxLimits(call_wall_s=15, call_cpu_s=5, max_primitives=100, output_chars=1000)


def load_check(functions: dict[str, SkillFunction], policy: SandboxPolicy) -> str:
    """'' if the library loads in the sandbox (no environment is stepped); otherwise what went wrong. A
    sandbox that cannot start, or lacks a layer `policy` requires, raises SandboxError: the job fails."""
    s = SandboxSession(source=Library(0, tuple(functions.values())).source, limits=SMOKE_LIMITS, policy=policy)
    try:
        error = s.load()
        return f"the library does not load: {error}" if error else ""
    finally:
        s.close()


def append_functions(library: Library, code: str, primitives: set[str],
                     policy: SandboxPolicy) -> tuple[list[SkillFunction], list[str]]:
    """The functions in `code` that may be appended to `library` without touching what is there: new names
    only (no edits, no deletions), no primitive hidden, and the library with them still loads. Returns
    (added, why each other one was refused)."""
    if not code.strip():
        return [], ["no code in the reply"]
    have = {f.name for f in library.functions}
    added: list[SkillFunction] = []
    refused: list[str] = []
    for f in parse_functions(code):
        if f.name in have or f.name in primitives:
            refused.append(f"{f.name}: the name is taken (append-only)")
            continue
        candidate = {g.name: g for g in (*library.functions, *added, f)}
        problem = load_check(candidate, policy)
        if problem:
            refused.append(f"{f.name}: {problem}")
            continue
        added.append(SkillFunction(f.name, not f.name.startswith("_"), f.signature, f.doc, f.source))
        have.add(f.name)
    if added:  # callees across the whole library (a new function may call an old one)
        whole = {g.name: g for g in parse_functions(Library(0, (*library.functions, *added)).source)}
        added = [SkillFunction(f.name, f.public, f.signature, f.doc, f.source, whole[f.name].callees) for f in added]
    return added, refused


# ------------------------------------------------------------------------------------------ records
def save_records(record_dir: Path, calls: list[LLMCall], transcript: list[dict[str, Any]]) -> None:
    """The sleep phase's LLM calls (each with its role) and what it did, beside the new version."""
    write_records(record_dir / "llm_calls.parquet", calls, LLMCall)
    write_text(record_dir / "transcript.jsonl", "".join(json.dumps(t, default=str) + "\n" for t in transcript))


def listing(lines: list[str], chars: int) -> str:
    """A sleep-phase prompt's list of the library's functions, a line each, as many whole lines as `chars` holds.
    ASI's inducer and Voyager's skill writer have no tool to read the rest, so a cut listing counts what it left
    out: a name it does not show is still taken (the library is append-only)."""
    if not lines:
        return "(none yet)"
    shown, used = 0, -1  # characters of the shown lines, joined by newlines
    while shown < len(lines) and used + 1 + len(lines[shown]) <= chars:
        used += 1 + len(lines[shown])
        shown += 1
    if shown == len(lines):
        return "\n".join(lines)
    total = len("\n".join(lines))
    return ("\n".join(lines[:shown]) + f"\n(shown {max(used, 0)} of {total} characters: {shown} of {len(lines)} "
            f"functions listed, {len(lines) - shown} left out; their names are taken too)")
