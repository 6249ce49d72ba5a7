"""The library view, the sleep phase view and the episode view: self-contained HTML pages made from one run's
records.

Long because its three pages share one set of record readers and HTML helpers.

A run's library page shows every library version (functions, the diff from the version before, the call graph
drawn), what the sleep phase that made it did (the writes it refused, with their reasons, from its
transcript.jsonl: an empty library says why it is empty) and how that version's evaluation episodes used each
function, and links each sleep phase's page. A sleep phase page shows every line of that phase's transcript in
order: for SpeedRunner each inducer request (the reply, the tool it called, the cell and its output or the
function written and the check's verdict, a request that failed); other methods' lines by key and value. An
episode page shows one evaluated episode step by step: the actor's output, the observation, the
skill call stacks the step triggered (nested), tokens and cost, and cards of the functions it called, linked to
the library page.

Pages are single files with their pictures inlined, because Snakemake's `--report report.html` embeds each
result as one data URI and refuses folders of files. Their size is bounded by `ViewLimits`, not by the run:
text fields are clipped, a page draws at most `graphs_per_run` call graphs, a sleep phase page shows at most
`requests_per_phase` transcript entries and at most `episodes_per_run` episodes of a run get a page, so a
paper-scale report stays small enough to open.
"""
from __future__ import annotations

import base64
import difflib
import html
import io
import json
import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable

import matplotlib
import pandas as pd

from skillrepro import store
from skillrepro.config import Price
from skillrepro.skills import Library
from skillrepro.skills.callgraph import graph_of, stats
from skillrepro.studies.speedrunner import analysis

matplotlib.use("Agg")  # before pyplot is imported: no display on a cluster node
import matplotlib.pyplot as plt  # noqa: E402


@dataclass(frozen=True)
class ViewLimits:
    """config key analysis.views (defaults and descriptions in src/skillrepro/schemas/speedrunner.schema.yaml), and
    requests_per_phase and functions_per_version, which have no key there yet."""

    episodes_per_run: int  # evaluated episodes of a run that get a page
    steps_per_episode: int  # steps shown on an episode page: the first half and the last half
    frames_per_step: int  # skill-call frames shown per step
    text_chars: int  # each actor output, observation, docstring, argument list or return value is clipped to this
    diff_lines: int  # lines of each version's diff shown
    graphs_per_run: int  # call graphs drawn on a library page: the latest versions whose graph changed
    page_kb: int  # a page larger than this is made again with every limit above halved, until it fits
    # Entries (inducer requests) shown on a sleep phase page: its first and last halves. Not a key of
    # analysis.views (the schema has none for it): halved only once texts are at their floor, so a paper-scale
    # phase (100 requests) is shown whole, its texts shortened, and a far larger one still fits.
    requests_per_phase: int = 400
    # Rows of a library version's functions table, likewise halved only once texts are at their floor: a paper-scale
    # library (Voyager's 909 functions in table 8) is listed whole where the page holds it, and otherwise the
    # functions its evaluation called first, then the newest.
    functions_per_version: int = 1000

    def check(self) -> None:
        for name, value in vars(self).items():
            if not isinstance(value, int) or value < (1 if name == "page_kb" else 0):
                raise ValueError(f"config key analysis.views.{name}: {value!r} is not a whole number >= "
                                 f"{1 if name == 'page_kb' else 0}")

    def halved(self) -> "ViewLimits":
        return replace(self, steps_per_episode=max(2, self.steps_per_episode // 2),
                       frames_per_step=max(1, self.frames_per_step // 2), text_chars=max(100, self.text_chars // 2),
                       diff_lines=self.diff_lines // 2, graphs_per_run=self.graphs_per_run // 2,
                       requests_per_phase=self.requests_per_phase if self.text_chars > 100
                       else max(2, self.requests_per_phase // 2),
                       functions_per_version=self.functions_per_version if self.text_chars > 100
                       else max(10, self.functions_per_version // 2))


class PageTooLarge(ValueError):
    """A page over analysis.views.page_kb even at the smallest limits."""


def fit(render: Callable[[ViewLimits], str], limits: ViewLimits,
        shortened: Callable[[ViewLimits], str] | None = None) -> str:
    """render(limits), made again with halved limits while the page is over page_kb; a page that had to be
    shortened says so (`shortened(limits it was made at)` words the limits that page uses). Bounded: the limits
    stop halving at their floors, and then a page still too large is an error naming the setting to raise."""
    current = limits
    while True:
        page = render(current)
        size = len(page.encode())
        if size <= limits.page_kb * 1024:
            break
        smaller = current.halved()
        if smaller == current:
            raise PageTooLarge(f"a page is {size // 1024} KB even at the smallest limits, over analysis.views.page_kb "
                               f"= {limits.page_kb}; raise it")
        current = smaller
    if current != limits:
        at_most = shortened(current) if shortened else (
            f"{current.steps_per_episode} steps, {current.frames_per_step} frames per step, {current.text_chars} "
            f"characters per text, {current.diff_lines} diff lines, {current.graphs_per_run} call graphs, "
            f"{current.functions_per_version} functions per version")
        note = f"<p class='note'>Shortened to fit analysis.views.page_kb = {limits.page_kb}: at most {at_most}.</p>"
        page = page.replace("<body>", "<body>" + note, 1)
    return page


@dataclass(frozen=True)
class RunRecords:
    """What a run's pages are made from: its library version folders (v0, v1, ... in order) and the folders of
    its evaluation checkpoints (eval/v{k}: episodes, steps, skill_calls and llm_calls.parquet)."""

    run_id: str  # bench/variant/seed{n}
    library_dirs: tuple[Path, ...]
    eval_dirs: tuple[Path, ...]
    transcripts: tuple[Path, ...] = ()  # the sleep phases' induce/v{k}/transcript.jsonl, k >= 1

    def sleep_phases(self) -> dict[int, "SleepPhase"]:
        """What each sleep phase did, by the library version it made (the v{k} folder its transcript is in)."""
        return {int(t.parent.name.removeprefix("v")): sleep_phase(t) for t in self.transcripts}

    def tables(self, prices: dict[str, Price]) -> tuple[list[Library], pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """Libraries, episodes (with their dollar cost), steps, skill-call frames and the actor's LLM calls."""
        missing = [str(d / f"{t}.parquet") for d in self.eval_dirs for t in ("episodes", "steps", "skill_calls",
                                                                             "llm_calls")
                   if not (d / f"{t}.parquet").is_file()]
        if missing:
            raise FileNotFoundError(f"run {self.run_id}: evaluation records missing: {', '.join(missing)}")
        libraries = [Library.load(d) for d in self.library_dirs]
        eps = analysis.episodes([d / "episodes.parquet" for d in self.eval_dirs],
                                [d / "llm_calls.parquet" for d in self.eval_dirs],
                                [d / "skill_calls.parquet" for d in self.eval_dirs], prices)
        steps, frames, calls = (pd.concat([_read(d / f"{t}.parquet", cls) for d in self.eval_dirs],
                                          ignore_index=True)
                                for t, cls in (("steps", store.Step), ("skill_calls", store.SkillCall),
                                               ("llm_calls", store.LLMCall)))
        # The actor's calls carry their episode as session id: named episode_id here, like the other tables.
        actor = calls[calls.role == "actor"].rename(columns={"session_id": "episode_id"})
        return libraries, eps, steps, frames, actor


def _read(path: Path, cls: type) -> pd.DataFrame:
    return pd.DataFrame([vars(r) for r in store.read_records(path, cls)], columns=list(cls.__dataclass_fields__))


def _count(value) -> str:
    """A token count for a page: "unknown" where the server did not report it (null, read back as NaN)."""
    return "unknown" if value is None or pd.isna(value) else str(int(value))


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how many were left out."""
    return text if len(text) <= limit else f"{text[:limit]}\n... ({len(text) - limit} more characters)"


# ------------------------------------------------------------------------------------------ function use
USE_COLUMNS = ["version", "function", "calls", "episodes", "success", "primitives_per_call", "errors"]


def function_use(frames: pd.DataFrame, episodes: pd.DataFrame) -> pd.DataFrame:
    """Per (library version, function): calls in the version's evaluation episodes (nested calls counted too),
    the episodes that called it, the success rate of those episodes, primitives per call (those the call
    issued itself and through the functions it called) and calls that ended in an exception."""
    if frames.empty:
        return pd.DataFrame(columns=USE_COLUMNS)
    f = frames.assign(own=[len(json.loads(p or "[]")) for p in frames.primitives])
    total = dict(zip(zip(f.episode_id, f.frame_id), f.own))
    # Each frame's primitives count for its ancestors too. Nested frames are numbered `root.N` in the order
    # they opened, after their parent, so going from the highest N down a parent adds only finished children.
    for row in sorted(f.itertuples(), key=lambda r: -_opened(r.frame_id)):
        parent = (row.episode_id, row.parent_frame_id)
        if parent in total:  # the actor's own calls have no parent
            total[parent] += total[(row.episode_id, row.frame_id)]
    f["inclusive"] = [total[k] for k in zip(f.episode_id, f.frame_id)]
    f = f.merge(episodes[["episode_id", "library_version", "success"]], on="episode_id", how="inner")
    per_episode = f.groupby(["library_version", "function", "episode_id"]).success.first().reset_index()
    out = f.groupby(["library_version", "function"]).agg(
        calls=("frame_id", "size"), primitives_per_call=("inclusive", "mean"),
        errors=("exception", lambda e: int((e != "").sum()))).reset_index()
    eps = per_episode.groupby(["library_version", "function"]).agg(
        episodes=("episode_id", "size"), success=("success", "mean")).reset_index()
    return out.merge(eps, on=["library_version", "function"]).rename(columns={"library_version": "version"})[USE_COLUMNS]


def _opened(frame_id: str) -> int:
    """A frame's place in its call's opening order: -1 for the actor's own call, N for nested frame root.N."""
    _, dot, n = frame_id.rpartition(".")
    return int(n) if dot and n.isdigit() else -1


# ------------------------------------------------------------------------------------------ sleep phases
@dataclass(frozen=True)
class SleepPhase:
    """What the sleep phase that made one library version did, as its transcript.jsonl records it: the writes
    it kept, the writes it refused and why, and what else it did (other tools, replies that named none)."""

    entries: int  # transcript lines: SpeedRunner's inducer requests, ASI's and Voyager's episodes read
    saved: int  # writes kept
    refused: tuple[tuple[str, str, str], ...]  # (the functions written, why the write was refused, the code)
    other: tuple[str, ...]  # everything else, one phrase each


_DEF = re.compile(r"^\s*def\s+([A-Za-z_]\w*)", re.MULTILINE)


def sleep_phase(transcript: Path) -> SleepPhase:
    """Reads the transcript of any method: SpeedRunner's tool calls (a `write_function` whose observation is
    not "Saved ..." was refused, and the observation says why), ASI's and Voyager's `added`/`refused` lists
    ("name: reason"), Voyager's skipped episodes and a request that failed."""
    return summarize(read_transcript(transcript))


def read_transcript(transcript: Path) -> list[dict]:
    """The lines of a transcript.jsonl in order; a line that is not a JSON object is kept as {"line": its text}."""
    entries = []
    for line in Path(transcript).read_text().splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            entry = line
        entries.append(entry if isinstance(entry, dict) else {"line": entry})
    return entries


def summarize(entries: list[dict]) -> SleepPhase:
    """What the transcript lines `entries` of one sleep phase did (see sleep_phase)."""
    saved, refused, tools, other = 0, [], Counter(), []
    for t in entries:
        if "tool" in t:  # SpeedRunner: one line per inducer request
            if t["tool"] == "write_function":
                observation = str(t.get("observation", ""))
                if observation.startswith("Saved"):
                    saved += 1
                else:
                    code = str(t.get("code") or "")
                    first = next((line.strip() for line in code.splitlines() if line.strip()), "")
                    names = ", ".join(_DEF.findall(code)) or (f"no function named ({first})" if first else "no code")
                    refused.append((names, observation.removeprefix("Error: "), code))
            else:
                tools[t["tool"] or "a reply that named no tool"] += 1
        elif "refused" in t or "added" in t:  # ASI, Voyager: what each episode's reply added and refused
            saved += len(t.get("added") or [])
            for r in t.get("refused") or []:
                name, _, why = str(r).partition(": ")
                refused.append((name, why, "") if why else ("-", name, ""))
        if "error" in t and "tool" not in t:
            other.append(f"request {t.get('request', '?')} failed: {t['error']}")
        if "skipped" in t:
            other.append(f"episode {t.get('episode_id', '?')} skipped: {t['skipped']}")
    other = [f"{name} x{n}" for name, n in tools.items()] + other
    return SleepPhase(len(entries), saved, tuple(refused), tuple(other))


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _sleep_html(version: int, phase: SleepPhase, limits: ViewLimits) -> str:
    """The sleep phase that made v{version}: a line of counts and the refused writes with their reasons."""
    entries = f"{phase.entries} transcript {'entry' if phase.entries == 1 else 'entries'}"
    line = (f"<p class='sleep'>Sleep phase that made v{version}: {entries}; writes kept {phase.saved}, refused "
            f"{len(phase.refused)}"
            + (f"; also {_e(clip('; '.join(phase.other), limits.text_chars))}" if phase.other else "") + ".</p>")
    if not phase.refused:
        return line
    short = min(limits.text_chars, 600)
    rows = "".join(f"<tr><td><code>{_e(clip(what, 200))}</code></td><td><pre>{_e(clip(why, limits.text_chars))}</pre></td>"
                   f"<td><pre>{_e(clip(code, short)) or '-'}</pre></td></tr>" for what, why, code in phase.refused)
    return (line + f"<table class='refused' id='refused-v{version}'><tr><th>refused write</th><th>why</th>"
            f"<th>code written</th></tr>{rows}</table>")


def _why_empty(lib: Library, phase: SleepPhase | None) -> str:
    """Why a library version has no functions, from what the sleep phase that made it recorded."""
    if lib.version == 0:
        return "No functions: the run starts from an empty library."
    if phase is None:
        return "No functions."
    method = lib.meta.get("method")
    made = f"the sleep phase that made v{lib.version}" + (f" (method {_e(method)})" if method else "")
    if phase.refused:
        return (f"No functions: {made} kept none; it refused <a href='#refused-v{lib.version}'>"
                f"{_n(len(phase.refused), 'write')}</a> (the reasons are above).")
    if phase.saved:
        return f"No functions: {made} saved {_n(phase.saved, 'write')}, then removed what they wrote."
    if not phase.entries:
        return f"No functions: {made} recorded nothing and wrote no function."
    return f"No functions: {made} never wrote a function."


# ------------------------------------------------------------------------------------------ call graph
# A library page draws the call graph of a version of at most this many functions: past it the labels cannot be
# read at the drawing's largest size (16 inches), and drawing 909 of them took seconds a version.
MAX_DRAWN = 200


def callgraph_png(library: Library) -> bytes:
    """The call graph drawn in layers: functions nobody calls on top, each callee below its deepest caller;
    public functions filled, private ones outlined. A cycle is cut where the layering meets it again."""
    g = graph_of(library)
    level = {n: 0 for n in g.nodes}
    for _ in range(len(g.nodes)):  # longest path from a root, bounded so a cycle cannot loop forever
        changed = False
        for a, b in g.edges:
            if level[b] < level[a] + 1 <= len(g.nodes) - 1:
                level[b], changed = level[a] + 1, True
        if not changed:
            break
    rows: dict[int, list[str]] = {}
    for n in g.nodes:
        rows.setdefault(level[n], []).append(n)
    # Wide enough for the longest row's labels (about 0.08 inch a character at 8 points), up to 16 inches;
    # neighbours in a row alternate a little up and down so that long names that still meet do not overprint.
    chars = max((sum(len(n) + 4 for n in r) for r in rows.values()), default=10)
    fig, ax = plt.subplots(figsize=(min(16, max(3, 0.08 * chars)), min(9, 0.9 + 0.9 * max(len(rows), 1))))
    pos = {n: ((i + 1) / (len(r) + 1), -lv + (0.18 if i % 2 else 0) * (len(r) > 1))
           for lv, r in rows.items() for i, n in enumerate(r)}
    for a, b in g.edges:
        ax.annotate("", xy=pos[b], xytext=pos[a],
                    arrowprops={"arrowstyle": "-|>", "color": "0.45", "shrinkA": 14, "shrinkB": 14})
    public = set(g.public)
    for n, (x, y) in pos.items():
        ax.text(x, y, n, ha="center", va="center", fontsize=8,
                bbox={"boxstyle": "round", "fc": "#cfe3f7" if n in public else "white", "ec": "#2b6ca3"})
    if not g.nodes:
        ax.text(0.5, 0, "no functions", ha="center", va="center", fontsize=10, color="0.4")
    ax.set_xlim(0, 1)
    ax.set_ylim(-max(rows, default=0) - 0.6, 0.6)
    ax.axis("off")
    ax.set_title(f"v{library.version}: {len(g.nodes)} functions, {len(g.edges)} calls (filled: public)", fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return buf.getvalue()


# ------------------------------------------------------------------------------------------ pages
def library_page_name(run_id: str) -> str:
    """The page's file name; unique in a report (the report links results by file name), and names cannot hold
    a dot, so the run's parts stay apart."""
    return "library." + run_id.replace("/", ".") + ".html"


def function_anchor(version: int, name: str) -> str:
    return f"v{version}-{name}"


def library_page(run: RunRecords, libraries: list[Library], use: pd.DataFrame, evaluated: Iterable[int],
                 limits: ViewLimits, phases: dict[int, SleepPhase] | None = None, sleep_pages: str | None = None) -> str:
    """`phases`: what the sleep phase that made each version did (RunRecords.sleep_phases), by version.
    `sleep_pages`: the folder of the run's sleep phase pages (sleep_page_name), relative to this page; each
    version made by a sleep phase links its page. Without it, a version whose sleep phase recorded nothing says
    there was no sleep phase work (react, reference: the library is carried over)."""
    evaluated = set(evaluated)
    phases = phases or {}

    def sleep_link(version: int, text: str) -> str:
        href = f"{sleep_pages.rstrip('/')}/{sleep_page_name(run.run_id, version)}" if sleep_pages else ""
        if href:
            return f"<a class='sleep-page' href='{_e(href)}'>{text}</a>"
        phase = phases.get(version)
        return "no sleep phase work" if phase is not None and phase.entries == 0 else "-"
    by_use = {(r.version, r.function): r for r in use.itertuples()}
    changed = [lib.version for i, lib in enumerate(libraries)  # an empty library has nothing to draw
               if lib.functions and (i == 0 or graph_of(lib) != graph_of(libraries[i - 1]))]
    drawable = [lib.version for lib in libraries if lib.version in changed and len(lib.functions) <= MAX_DRAWN]
    drawn = set(drawable[-limits.graphs_per_run:]) if limits.graphs_per_run else set()
    body = [f"<h1>Library of {_e(run.run_id)}</h1>",
            "<p>Every library version of the run: its functions, the diff from the version before, its call graph, "
            "and, for versions that were evaluated, how the evaluation episodes used each function.</p>",
            "<table><tr><th>version</th><th>made by the sleep phase</th><th>functions</th><th>public</th>"
            "<th>calls between functions</th><th>max depth</th><th>evaluated</th></tr>"]
    for lib in libraries:
        s = stats(lib)
        made = "-" if lib.version == 0 else sleep_link(lib.version, f"v{lib.version - 1} &rarr; v{lib.version}")
        body.append(f"<tr><td><a href='#v{lib.version}'>v{lib.version}</a></td><td>{made}</td><td>{s.size}</td>"
                    f"<td>{s.n_public}</td><td>{s.n_edges}</td><td>{s.max_depth}</td>"
                    f"<td>{'yes' if lib.version in evaluated else '-'}</td></tr>")
    body.append("</table>")
    previous = None
    for lib in libraries:
        body.append(f"<h2 id='v{lib.version}'>v{lib.version}</h2>")
        body.append(_diff_html(previous, lib, limits))
        if lib.version in phases:
            body.append(_sleep_html(lib.version, phases[lib.version], limits))
            link = sleep_link(lib.version, "its page: every request, reply and observation")
            if link != "-":
                body.append(f"<p class='note'>Sleep phase v{lib.version - 1} &rarr; v{lib.version}: {link}.</p>")
        if lib.version in drawn:
            png = base64.b64encode(callgraph_png(lib)).decode()
            body.append(f"<img class='graph' alt='call graph of v{lib.version}' src='data:image/png;base64,{png}'>")
        else:
            body.append("<p class='note'>Call graph: " + ("none (no functions)." if not lib.functions else
                        "the same as the version before." if lib.version not in changed
                        else f"not drawn: {len(lib.functions)} functions, more than the {MAX_DRAWN} a drawing can "
                             "label (its statistics are in the table above)." if len(lib.functions) > MAX_DRAWN
                        else f"not drawn (only the last {limits.graphs_per_run} changes are, analysis.views.graphs_per_run).")
                        + "</p>")
        body.append(_functions_table(lib, by_use, lib.version in evaluated, limits, phases.get(lib.version)))
        previous = lib
    if libraries and not any(lib.functions for lib in libraries):
        # The page of an empty library says why at the top: every sleep phase's refused writes.
        refused = sum(len(p.refused) for p in phases.values())
        method = libraries[-1].meta.get("method")
        why = (f"its sleep phases refused {_n(refused, 'write')}, listed under the version each phase made, "
               f"with the reasons" if refused else "no sleep phase wrote a function" if phases
               else "no sleep phase records were given") + (f" (method {_e(method)})" if method else "")
        body.insert(2, f"<p class='empty'><b>No version of this library has a function:</b> {why}.</p>")
    return _document(f"Library of {run.run_id}", body)


def _diff_html(previous: Library | None, lib: Library, limits: ViewLimits) -> str:
    if previous is None:
        return f"<p>First version: {len(lib.functions)} functions.</p>"
    old, new = {f.name: f for f in previous.functions}, {f.name: f for f in lib.functions}
    added = [n for n in new if n not in old]
    removed = [n for n in old if n not in new]
    edited = [n for n in new if n in old and new[n].source != old[n].source]
    if not (added or removed or edited) and previous.notes == lib.notes:
        return f"<p>Unchanged from v{previous.version}.</p>"
    lines = list(difflib.unified_diff(previous.source.splitlines(), lib.source.splitlines(),
                                      f"v{previous.version}/skills.py", f"v{lib.version}/skills.py", lineterm=""))
    shown = lines[:limits.diff_lines]
    more = f"\n... ({len(lines) - len(shown)} more lines)" if len(lines) > len(shown) else ""
    names = lambda ns: _e(clip(", ".join(ns), limits.text_chars)) or "none"  # noqa: E731
    notes = "" if previous.notes == lib.notes else " The notes changed."
    return (f"<p>From v{previous.version}: added {names(added)}; removed {names(removed)}; edited {names(edited)}."
            f"{notes}</p>" + (f"<pre class='diff'>{_e(chr(10).join(shown) + more)}</pre>" if lines else ""))


def _functions_table(lib: Library, by_use: dict, evaluated: bool, limits: ViewLimits,
                     phase: SleepPhase | None = None) -> str:
    if not lib.functions:
        return f"<p>{_why_empty(lib, phase)}</p>"
    use_head = ("<th>calls</th><th>episodes</th><th>success of those episodes</th><th>primitives per call</th>"
                "<th>errors</th>")
    rows = ["<table class='functions'><tr><th>function</th><th>public</th><th>docstring</th><th>lines</th>"
            f"<th>callees</th>{use_head}</tr>"]
    shown = lib.functions
    if len(shown) > limits.functions_per_version:  # the called ones first, then the newest; in library order
        calls = {f.name: getattr(by_use.get((lib.version, f.name)), "calls", 0) for f in shown}
        ranked = sorted(range(len(shown)), key=lambda i: (-calls[shown[i].name], -i))
        shown = tuple(shown[i] for i in sorted(ranked[:limits.functions_per_version]))
        rows.insert(0, f"<p class='note'>{len(shown)} of {len(lib.functions)} functions listed: those the evaluation "
                       f"called first, then the newest (all of them: v{lib.version}/skills.py).</p>")
    for f in shown:
        callees = ", ".join(f"<a href='#{function_anchor(lib.version, c)}'>{_e(c)}</a>" for c in f.callees) or "-"
        u = by_use.get((lib.version, f.name))
        if not evaluated:
            use = "<td colspan='5' class='note'>not evaluated</td>"
        elif u is None:
            use = "<td>0</td><td>0</td><td>-</td><td>-</td><td>0</td>"
        else:
            use = (f"<td>{u.calls}</td><td>{u.episodes}</td><td>{u.success:.2f}</td>"
                   f"<td>{u.primitives_per_call:.1f}</td><td>{u.errors}</td>")
        rows.append(f"<tr id='{function_anchor(lib.version, f.name)}'><td><code>{_e(f.signature)}</code></td>"
                    f"<td>{'public' if f.public else 'private'}</td><td><pre>{_e(clip(f.doc, limits.text_chars))}</pre></td>"
                    f"<td>{len(f.source.splitlines())}</td><td>{callees}</td>{use}</tr>")
    rows.append("</table>")
    return "".join(rows)


# ------------------------------------------------------------------------------------------ sleep phase pages
def sleep_page_name(run_id: str, version: int) -> str:
    """The page of the sleep phase that made library v{version}: unique in a report, like the others."""
    return f"sleep.{run_id.replace('/', '.')}.v{version}.html"


def sleep_shortened(limits: ViewLimits) -> str:
    """What a sleep phase page made at `limits` shows at most (fit's note)."""
    return f"{limits.text_chars} characters per text, {limits.requests_per_phase} transcript entries"


# SpeedRunner's keys (speedrunner_session.py, transcript.append): each is shown in its place on a request; any other
# key of a tool line is listed after it.
_REQUEST_KEYS = {"request", "prefill", "reply", "tool", "code", "public", "target", "observation", "tool_s",
                 "prompt_tokens", "completion_tokens"}


def _is_request(entry: dict) -> bool:
    return "tool" in entry


def _is_failed_request(entry: dict) -> bool:
    return "error" in entry and set(entry) <= {"request", "error"}


def _write_kept(entry: dict) -> bool:
    return str(entry.get("observation") or "").startswith("Saved")


def _first_line(text: str) -> str:
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


def _outcome(entry: dict) -> str:
    """One line on what a transcript entry came to, for the page's table of requests."""
    if _is_failed_request(entry):
        return f"failed: {_first_line(entry['error'])}"
    if not _is_request(entry):
        kept, refused = entry.get("added"), entry.get("refused")
        if kept is not None or refused is not None:
            return f"kept {len(kept or [])}, refused {len(refused or [])}"
        return _first_line(entry.get("skipped") or "") or ", ".join(map(str, entry))
    observation = str(entry.get("observation") or "")
    if entry.get("tool") == "write_function":
        return "kept: " + _first_line(observation) if _write_kept(entry) else \
            "refused: " + _first_line(observation.removeprefix("Error: "))
    return _first_line(observation) or "(no output)"


def _line(text: str, limit: int) -> str:
    """`text` cut to `limit` characters with an ellipsis: a line of a table, shown in full further down."""
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def _value_text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)


def _pre(text: str, limit: int) -> str:
    return f"<pre>{_e(clip(text, limit))}</pre>"


def _entry_table(entry: dict, keys: Iterable[str], limits: ViewLimits) -> str:
    """A transcript line's `keys` and their values, as written (any method's transcript shape)."""
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_pre(_value_text(entry[k]), limits.text_chars)}</td></tr>" for k in keys)
    return f"<table class='entry'>{rows}</table>" if rows else ""


def _request_html(i: int, entry: dict, limits: ViewLimits) -> str:
    """One transcript line: a SpeedRunner request (its reply, the tool it called and what the tool answered), a
    request that failed, or another method's line (its keys and values)."""
    n = entry.get("request", i)
    anchor = f"request-{_e(n)}"
    if _is_failed_request(entry):
        return (f"<div class='request' id='{anchor}'><h3>Request {_e(n)}: <span class=bad>failed</span></h3>"
                f"<h4>Error</h4>{_pre(_value_text(entry['error']), limits.text_chars)}</div>")
    if not _is_request(entry):
        return (f"<div class='request' id='{anchor}'><h3>Entry {i}</h3>"
                f"{_entry_table(entry, entry, limits)}</div>")
    tool = entry.get("tool") or ""
    code, observation = str(entry.get("code") or ""), str(entry.get("observation") or "")
    verdict = ""
    if tool == "write_function":
        verdict = " <span class=kept>kept</span>" if _write_kept(entry) else " <span class=bad>refused</span>"
    head = f"<code>{_e(tool)}</code>" if tool else "<span class=bad>no tool called</span>"
    facts = [f"{entry[k]} {w} tokens" for k, w in (("prompt_tokens", "prompt"), ("completion_tokens", "output"))
             if entry.get(k) is not None]
    if entry.get("tool_s") is not None and tool:
        facts.append(f"the tool took {entry['tool_s']} s")
    parts = [f"<div class='request' id='{anchor}'><h3>Request {_e(n)}: {head}{verdict}</h3>",
             f"<p class='note'>{_e('; '.join(facts))}</p>" if facts else ""]
    if entry.get("prefill"):
        parts.append("<h4>Reply started for the model (prefill)</h4>" + _pre(str(entry["prefill"]), limits.text_chars))
    reply = str(entry.get("reply") or "")
    parts.append("<h4>Reply</h4>" + (_pre(reply, limits.text_chars) if reply else
                                     "<p class='note'>No text: the call came as a native tool call.</p>"))
    if tool == "execute_code":
        parts.append("<h4>Cell</h4>" + _pre(code or "(none)", limits.text_chars)
                     + "<h4>Output</h4>" + _pre(observation or "(no output)", limits.text_chars))
    elif tool == "write_function":
        access = {True: " (public)", False: " (private)"}.get(entry.get("public"), "")
        why = "kept" if _write_kept(entry) else "refused, and why"
        parts.append(f"<h4>Code written{access}</h4>" + _pre(code or "(none)", limits.text_chars)
                     + f"<h4>The check's verdict: {why}</h4>" + _pre(observation, limits.text_chars))
    else:
        if entry.get("target"):
            parts.append(f"<p>Target: <code>{_e(entry['target'])}</code></p>")
        if code:
            parts.append("<h4>Code</h4>" + _pre(code, limits.text_chars))
        if not tool:
            parts.append("<h4>Answer (the reply named no tool)</h4>")
        else:
            parts.append("<h4>Observation</h4>")
        parts.append(_pre(observation or "(none)", limits.text_chars))
    extra = [k for k in entry if k not in _REQUEST_KEYS]
    if extra:
        parts.append("<h4>Also recorded</h4>" + _entry_table(entry, extra, limits))
    parts.append("</div>")
    return "".join(parts)


def sleep_page(run_id: str, entries: list[dict], before: Library | None, made: Library, library_href: str,
               limits: ViewLimits) -> str:
    """The sleep phase that made library `made` from `before`: every line of its transcript in order (for
    SpeedRunner each inducer request: the reply, the tool it called, the cell and its output or the function
    written and the check's verdict), after a table of what each request came to."""
    k = made.version
    phase = summarize(entries)
    method = made.meta.get("method")
    old = {f.name: f for f in before.functions} if before else {}
    new = {f.name: f for f in made.functions}
    names = lambda ns: ", ".join(_e(n) for n in ns) or "none"  # noqa: E731
    grew = (f"v{k - 1} had {_n(len(old), 'function')}, v{k} has {len(new)}: added {names(n for n in new if n not in old)}; "
            f"removed {names(n for n in old if n not in new)}; edited "
            f"{names(n for n in new if n in old and new[n].source != old[n].source)}."
            + (" The notes changed." if before is not None and before.notes != made.notes else ""))
    body = [f"<h1>Sleep phase v{k - 1} &rarr; v{k} of {_e(run_id)}</h1>",
            f"<p>Library <a href='{_e(library_href)}#v{k}'>v{k}</a>{f' (method {_e(method)})' if method else ''}: "
            f"{grew}</p>",
            f"<p>{_n(phase.entries, 'transcript entry') if phase.entries == 1 else f'{phase.entries} transcript entries'}; "
            f"writes kept {phase.saved}, refused {len(phase.refused)}"
            + (f"; also {_e(clip('; '.join(phase.other), limits.text_chars))}" if phase.other else "") + ".</p>"]
    if not entries:
        body.append("<p class='empty'>No sleep phase work: the transcript is empty.</p>")
        return _document(f"Sleep phase v{k - 1} to v{k} of {run_id}", body)
    shown = list(enumerate(entries))
    cap = limits.requests_per_phase
    head, tail = (cap + 1) // 2, cap // 2
    hidden = len(shown) - head - tail
    if hidden > 0:
        shown = shown[:head] + [(-1, {})] + shown[len(shown) - tail:]
    short = min(limits.text_chars, 160)
    rows = []
    for i, entry in shown:
        if i < 0:
            rows.append(f"<tr><td colspan='3' class='note'>... {hidden} entries not shown (at most {cap} are)</td></tr>")
            continue
        n = entry.get("request", i)
        what = ("error" if _is_failed_request(entry) else (entry.get("tool") or "(no tool)") if _is_request(entry)
                else "entry")
        rows.append(f"<tr><td><a href='#request-{_e(n)}'>{_e(n)}</a></td><td><code>{_e(what)}</code></td>"
                    f"<td>{_e(_line(_outcome(entry), short))}</td></tr>")
    body.append("<table class='requests'><tr><th>request</th><th>tool</th><th>what it came to</th></tr>"
                + "".join(rows) + "</table>")
    for i, entry in shown:
        body.append(f"<p class='note'>... {hidden} entries not shown (at most {cap} are shown).</p>" if i < 0
                    else _request_html(i, entry, limits))
    return _document(f"Sleep phase v{k - 1} to v{k} of {run_id}", body)


def sample_episodes(episodes: pd.DataFrame, n: int) -> pd.DataFrame:
    """At most `n` episodes, spread over the checkpoints: the first task of every checkpoint, then the second,
    and so on (in the order the analytics sort them), so each checkpoint is seen before any is seen twice."""
    if episodes.empty or n == 0:
        return episodes.iloc[:0]
    ordered = episodes.sort_values(["library_version", "task_id", "episode_id"]).copy()
    ordered["_rank"] = ordered.groupby("library_version").cumcount()
    return ordered.sort_values(["_rank", "library_version"]).head(n).drop(columns="_rank").sort_values(
        ["library_version", "task_id", "episode_id"])


def episode_page_name(run_id: str, version: int, index: int) -> str:
    return f"episode.{run_id.replace('/', '.')}.v{version}.{index}.html"


def episode_page(episode, steps: pd.DataFrame, frames: pd.DataFrame, calls: pd.DataFrame, library: Library,
                 library_href: str, limits: ViewLimits) -> str:
    """One episode (a row of analysis.episodes) with its steps, skill frames and actor calls (in call order)."""
    calls = calls.sort_values("started_at")
    task = _first_user_message(calls.prompt.iloc[0]) if len(calls) else ""
    by_name = {f.name: f for f in library.functions}
    children: dict[str, list] = {}
    for fr in sorted(frames.itertuples(), key=lambda r: _opened(r.frame_id)):  # the order they opened
        children.setdefault(fr.parent_frame_id, []).append(fr)
    roots_by_step: dict[int, list] = {}
    for fr in children.get("", []):
        roots_by_step.setdefault(int(fr.step), []).append(fr)
    ok = "succeeded" if episode.success else "failed"
    body = [f"<h1>Episode {_e(episode.episode_id)}</h1>",
            f"<p>Task {_e(str(episode.task_id))} at library <a href='{_e(library_href)}#v{episode.library_version}'>"
            f"v{episode.library_version}</a>: {ok} ({_e(episode.termination)}) after {episode.n_steps} steps.</p>",
            "<table><tr><th>LLM calls</th><th>prompt tokens</th><th>cached</th><th>output tokens</th><th>cost ($)</th>"
            f"<th>wall (s)</th></tr><tr><td>{episode.llm_calls}</td><td>{episode.prompt_tokens}</td>"
            f"<td>{_count(episode.cached_tokens)}</td><td>{episode.output_tokens}</td><td>{episode.cost:.6f}</td>"
            f"<td>{episode.wall_s:.1f}</td></tr></table>",
            f"<h2>Task</h2><pre>{_e(clip(task, limits.text_chars))}</pre>", "<h2>Steps</h2>"]
    replies = list(calls.itertuples())
    ordered = list(steps.sort_values("step").itertuples())
    head = (limits.steps_per_episode + 1) // 2
    tail = limits.steps_per_episode - head
    hidden = len(ordered) - head - tail
    for i, st in enumerate(ordered):
        if hidden > 0 and head <= i < len(ordered) - tail:
            if i == head:
                body.append(f"<p class='note'>... {hidden} steps not shown (analysis.views.steps_per_episode) ...</p>")
            continue
        reply = replies[st.step] if st.step < len(replies) else None
        output = _reply_text(reply.response) if reply is not None else st.reasoning
        tokens = (f"{reply.prompt_tokens} prompt ({_count(reply.cached_tokens)} cached), {reply.completion_tokens} output tokens"
                  if reply is not None else "no actor call recorded")
        action = f"{st.action}({', '.join(map(repr, json.loads(st.arguments or '[]')))})" if st.action else "(none parsed)"
        body.append(f"<div class='step' id='step-{st.step}'><h3>Step {st.step}: <code>{_e(clip(action, limits.text_chars))}"
                    f"</code>{'' if st.valid else ' <span class=bad>invalid</span>'}</h3><p class='note'>{tokens}; "
                    f"reward {st.reward:g}</p><h4>Actor output</h4><pre>{_e(clip(output, limits.text_chars))}</pre>")
        if st.step in roots_by_step:
            budget = [limits.frames_per_step]  # frames left to show for this step, shared down the stack
            body.append("<h4>Skill calls</h4>" + _stack_html(roots_by_step[st.step], children, limits, budget))
        body.append(f"<h4>Observation</h4><pre>{_e(clip(st.observation, limits.text_chars))}</pre></div>")
    called = sorted({fr.function for fr in frames.itertuples()})
    body.append("<h2>Functions called</h2>" if called else "<h2>Functions called</h2><p>None.</p>")
    for name in called:
        f = by_name.get(name)
        href = f"{library_href}#{function_anchor(library.version, name)}"
        doc = f"<pre>{_e(clip(f.doc, limits.text_chars))}</pre>" if f else "<p>not in this library version</p>"
        sig = f.signature if f else name
        body.append(f"<div class='card' id='fn-{_e(name)}'><code>{_e(sig)}</code> "
                    f"(<a href='{_e(href)}'>in the library view</a>){doc}</div>")
    return _document(f"Episode {episode.episode_id}", body)


def _stack_html(frames: list, children: dict[str, list], limits: ViewLimits, budget: list[int]) -> str:
    """Nested lists of frames, depth first in the order they opened, until `budget[0]` frames are shown."""
    items = []
    for j, fr in enumerate(frames):
        if budget[0] <= 0:
            items.append(f"<li class='note'>{len(frames) - j} more calls not shown (analysis.views.frames_per_step)</li>")
            break
        budget[0] -= 1
        short = min(limits.text_chars, 300)  # a stack can be deep: each frame's details in a line or two
        outcome = (f"<span class=bad>raised {_e(clip(fr.exception, short))}</span>" if fr.exception
                   else f"returned <code>{_e(clip(fr.return_value, short))}</code>")
        prims = [p[0] for p in json.loads(fr.primitives or "[]")]
        own = f"primitives of its own: {_e(clip(', '.join(prims), short))}" if prims else "no primitives of its own"
        inner = _stack_html(children[fr.frame_id], children, limits, budget) if fr.frame_id in children else ""
        items.append(f"<li class='frame'><a href='#fn-{_e(fr.function)}'><code>{_e(fr.function)}</code></a>"
                     f"(<code>{_e(clip(_call_args(fr.arguments), short))}</code>) {outcome}; {own}; "
                     f"{fr.duration_s:.2f} s{inner}</li>")
    return "<ul>" + "".join(items) + "</ul>"


def _call_args(arguments: str) -> str:
    """A frame's recorded arguments (JSON [args, kwargs], cut at 2,000 characters by the sandbox) as a call's."""
    try:
        args, kwargs = json.loads(arguments)
        return ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])
    except (ValueError, TypeError, AttributeError):
        return arguments  # cut short, so no longer JSON: shown as recorded


def _first_user_message(prompt: str) -> str:
    """The task as the actor was first given it: the first user message of its first request."""
    try:
        messages = json.loads(prompt).get("messages", [])
    except (ValueError, AttributeError):
        return ""
    return next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")


def _reply_text(response: str) -> str:
    """The actor's reply as it wrote it: its text, and any tool call it made."""
    try:
        r = json.loads(response)
    except ValueError:
        return response
    calls = [f"tool call: {c.get('name', '')}({json.dumps(c.get('arguments', {}))})" for c in r.get("tool_calls") or []]
    return "\n".join([r.get("content") or "", *calls]).strip()


def _e(text: str) -> str:
    return html.escape(str(text), quote=True)


_STYLE = """
body { font-family: sans-serif; margin: 1.5em; max-width: 70em; color: #222; } h1 { overflow-wrap: anywhere; }
table { border-collapse: collapse; margin: 0.5em 0; } td, th { border: 1px solid #bbb; padding: 3px 6px;
vertical-align: top; text-align: left; } th { background: #eef3f8; }
pre { white-space: pre-wrap; margin: 0; font-size: 0.85em; } .diff { background: #f6f6f6; padding: 0.4em; }
.note { color: #666; } .empty { background: #fff6d8; padding: 0.4em; } .bad { color: #b00020; }
.kept { color: #1b7a2e; } .step, .request { border-left: 3px solid #2b6ca3; padding-left: 0.8em; margin: 1em 0; }
.card { border: 1px solid #ccc; padding: 0.4em; margin: 0.4em 0; } .graph { max-width: 100%; }
.request h3 { margin: 0.3em 0; } .request h4 { margin: 0.6em 0 0.2em; } .request p { margin: 0.2em 0; }
.request pre { background: #f6f6f6; padding: 0.3em; overflow-wrap: anywhere; }
.requests td:last-child, .entry td { overflow-wrap: anywhere; }
"""


def _document(title: str, body: list[str]) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_e(title)}</title><style>{_STYLE}</style>"
            f"</head><body>{''.join(body)}</body></html>\n")
