"""A positive control for the utility (seed 002, equations 7-10) on real Scouts: a card that states the task's
solution, an irrelevant card of about the same length and no card, each scored on the same Scouts by the pipeline's
own code (`score_contexts`, `utilities_for_query`, `selection_for_query`). Used by perf/utility_control.py and its
small version in tests/studies/scaffold/test_scaffold_control.py.

The shipped models' Scouts seldom succeed, and on failures alone the utility rewards any card that makes the failed
replies less likely. `play_expert_scouts` plants the successes: Scouts whose replies are BabyAI's own bot's moves,
played through the runner as any Scout is (same prompts, same records), so the scorer reads them as it would a
successful Scout of the model.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from skillrepro.agent import EpisodeSpec
from skillrepro.benchmarks import call_budget
from skillrepro.benchmarks.babyai import BabyAIEnv, bot_moves
from skillrepro.llm.client import Reply
from skillrepro.runner import run_batch
from skillrepro.store import LLMCall
from skillrepro.studies.scaffold.cards import CardFormat, check_card
from skillrepro.studies.scaffold.records import CandidateRecord, Trajectory
from skillrepro.studies.scaffold.scoring import score_contexts
from skillrepro.studies.scaffold.selection import selection_for_query, utilities_for_query
from skillrepro.studies.scaffold.statistics import interval_label, mean_interval

EXPERT = "babyai-bot"  # the model name of an expert Scout's calls


class ExpertClient:
    """Answers each actor request of a task's episode with the bot's next move in the text protocol
    ("Action: go_forward()"), recording the call as the LLM client does. `moves`: the first observation of each
    task (as `BabyAIEnv.reset` gives it) -> its moves."""

    def __init__(self, moves: dict[str, list[str]]):
        self.moves = moves

    def chat(self, messages, *, role, session_id, tools=None, max_tokens=None, stop=None, seed=0, extra_body=None):
        first = next(m["content"] for m in messages if m["role"] == "user")
        plan = next(v for k, v in self.moves.items() if k in first)
        step = sum(m["role"] == "assistant" for m in messages)
        text = f"Action: {plan[min(step, len(plan) - 1)]}()"
        prompt = json.dumps({"messages": messages, "tools": tools or [], **(extra_body or {})}, ensure_ascii=False)
        record = LLMCall(uuid.uuid4().hex, session_id, role, EXPERT, "expert", 0, None, 0, 0, 0.0, 0, "stop",
                         hashlib.sha256(prompt.encode()).hexdigest(), prompt,
                         json.dumps({"content": text, "tool_calls": []}), time.time(), usage_missing=True)
        return Reply(text, [], "stop", record)


def play_expert_scouts(bench: Any, llm: Any, library_dir: str | Path, tasks: Sequence[str], out_dir: str | Path,
                       run_id: str = "utility_control") -> Path:
    """One successful Scout per task (each must be in reach of the bot within the call budget), in `out_dir` as a
    Scout folder of the scaffold_scout rule. `llm`: the Scouts' settings (its tool_calling must be text)."""
    if llm.tool_calling != "text":
        raise ValueError("expert Scouts reply in the text protocol: llm.tool_calling must be text")
    moves, level = {}, bench.options.get("level", "pick_up_seq_go_to")
    for t in tasks:
        plan = bot_moves(t, call_budget(bench), level)
        if plan is None:
            raise ValueError(f"task {t}: the bot needs more than the call budget of {call_budget(bench)} moves")
        moves[BabyAIEnv(t, level).reset()] = plan
    spec = EpisodeSpec(run_id, bench.name, "skillscaffold", "scout", llm.seed, "train", 0, 0)
    outcome = run_batch(bench=bench, llm=llm, library_dir=library_dir, task_ids=list(tasks), spec=spec,
                        out_dir=out_dir, client=ExpertClient(moves))
    failed = [e.task_id for e in outcome.episodes if not e.success]
    if failed:
        raise RuntimeError(f"expert Scouts failed on {failed}: the bot's moves did not replay")
    return Path(out_dir)


# Candidate indices as scores.parquet numbers them (-1 is no card).
SOLUTION, IRRELEVANT, NONE = 0, 1, -1
NAMES = {SOLUTION: "solution", IRRELEVANT: "irrelevant", NONE: "none"}


def load_card(path: str | Path, fmt: CardFormat, candidate: int, benchmark: str = "babyai",
              variant: str = "grp") -> CandidateRecord:
    """A card file as a candidate of every query (`card_record`)."""
    try:
        return card_record(Path(path).read_text(), fmt, candidate, benchmark, variant)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def card_record(text: str, fmt: CardFormat, candidate: int, benchmark: str = "babyai",
                variant: str = "grp") -> CandidateRecord:
    """A card's Markdown as a candidate of every query. It must be a valid card of `fmt`: the gate only ever sees
    valid cards, so an invalid one would make the control say nothing about the utility."""
    from dataclasses import replace

    text = text.strip()
    check = check_card(f"<skill>\n{text}\n</skill>", replace(fmt, reply="tagged"))
    if not check.valid:
        raise ValueError(f"not a valid card: {'; '.join(check.problems)}")
    return CandidateRecord(benchmark, variant, "", candidate, text, check.card, check.name, check.n_words, True, "",
                           "")


@dataclass
class ControlRow:
    """One query: each card's utility (no card's is 0 by construction: d = l(empty) - l(empty)), the gate's choice
    between the solution and the irrelevant card, each Scout's signed d per card (the term it adds to grp's
    utility: d for a success, -d for a failure), and the actor tokens scored per Scout under each context."""

    task_id: str
    kind: str
    n_success: int
    n_scouts: int
    utility: dict[int, float]
    selected: int  # SOLUTION, IRRELEVANT or NONE (the gate kept the query skill-free)
    signed: dict[int, list[float]]
    n_tokens: dict[int, list[int]]  # context (NONE included) -> per Scout, in sampling order

    @property
    def u_solution(self) -> float:
        return self.utility[SOLUTION]

    @property
    def u_irrelevant(self) -> float:
        return self.utility[IRRELEVANT]


def control_rows(scorer: Any, scouts: Sequence[Trajectory], cards: Sequence[CandidateRecord], *, bench: Any,
                 llm: Any, library_dir: str | Path, variant: str = "grp", threshold: float = 0.0) -> list[ControlRow]:
    """Score every Scout under no card and under each card (one pass of `score_contexts`), then apply eq. 8/9 per
    query and the gate (eq. 10) with the solution and the irrelevant card as that query's candidates. `cards`
    must hold SOLUTION and IRRELEVANT; others (a planted null, say) get utilities but are not offered to the gate."""
    _check_indices(cards)  # before the scoring, which is the work
    recs = score_contexts(scorer, scouts, {NONE: "", **{c.candidate: c.card for c in cards}}, bench=bench, llm=llm,
                          library_dir=library_dir, benchmark=bench.name, variant=variant)
    return rows_from_scores(recs, scouts, cards, bench=bench, variant=variant, threshold=threshold)


def rows_from_scores(recs: Sequence[Any], scouts: Sequence[Trajectory], cards: Sequence[CandidateRecord], *,
                     bench: Any, variant: str = "grp", threshold: float = 0.0) -> list[ControlRow]:
    """`control_rows` on scores already made (`score_contexts`' records for these Scouts, or for more): one
    scoring pass serves several subsets of the Scouts (the model's alone, then with a planted success)."""
    from dataclasses import replace

    by_index = _check_indices(cards)
    l_none = {r.episode_id: r.mean_logprob for r in recs if r.candidate == NONE}
    l_cand = {(r.candidate, r.episode_id): r.mean_logprob for r in recs if r.candidate != NONE}
    tokens = {(r.candidate, r.episode_id): r.n_tokens for r in recs}
    rows = []
    for task in dict.fromkeys(t.task_id for t in scouts):  # in the Scouts' order
        group = sorted((t for t in scouts if t.task_id == task), key=lambda t: t.order)
        cands = [replace(c, task_id=task, variant=variant) for c in cards]
        utils = utilities_for_query(bench.name, variant, group, cands, l_none, l_cand)
        gated = [c for c in cands if c.candidate in (SOLUTION, IRRELEVANT)]
        sel = selection_for_query(bench.name, variant, group, gated,
                                  [u for u in utils if u.candidate in (SOLUTION, IRRELEVANT)], threshold)
        signed = {c.candidate: [(1 if t.success else -1) * (l_cand[(c.candidate, t.episode_id)] - l_none[t.episode_id])
                                for t in group] for c in cards}
        rows.append(ControlRow(task, utils[0].kind, utils[0].n_success, len(group),
                               {u.candidate: u.utility for u in utils}, sel.selected, signed,
                               {c: [tokens[(c, t.episode_id)] for t in group] for c in (NONE, *by_index)}))
    return rows


def _check_indices(cards: Sequence[CandidateRecord]) -> dict[int, CandidateRecord]:
    by_index = {c.candidate: c for c in cards}
    if SOLUTION not in by_index or IRRELEVANT not in by_index or NONE in by_index or len(by_index) != len(cards):
        raise ValueError("control_rows: the cards need distinct indices, SOLUTION and IRRELEVANT among them, not NONE")
    return by_index


def summarize(rows: Sequence[ControlRow], interval: str = "expanded") -> dict[str, Any]:
    """Means over queries of each card's utility and of the two differences, with `statistics.mean_interval`
    (NaN and a "too few queries" label below the n where it covers 95 %), and how often the gate chose each."""
    n = len(rows)
    finite = [r for r in rows if math.isfinite(r.u_solution) and math.isfinite(r.u_irrelevant)]
    out: dict[str, Any] = {"n_queries": n, "n_finite": len(finite)}
    series = {
        "u_solution": [r.u_solution for r in finite],
        "u_irrelevant": [r.u_irrelevant for r in finite],
        "solution_minus_irrelevant": [r.u_solution - r.u_irrelevant for r in finite],
        "solution_minus_none": [r.u_solution for r in finite],  # no card's utility is 0
    }
    for key, xs in series.items():
        mean = sum(xs) / len(xs) if xs else math.nan
        lo, hi = mean_interval(xs, interval=interval) if len(xs) >= 2 else (math.nan, math.nan)
        out[key] = (mean, lo, hi)
    out["interval"] = interval_label(len(finite), interval)
    out["selected"] = {name: sum(r.selected == c for r in rows) for c, name in NAMES.items()}
    pairs = [(a, b) for r in rows for a, b in zip(r.signed[SOLUTION], r.signed[IRRELEVANT])]
    out["scouts_solution_above"] = (sum(a > b for a, b in pairs), len(pairs))
    return out


def format_table(rows: Sequence[ControlRow], s: dict[str, Any]) -> str:
    """The per-query table and the overall lines, as Markdown."""
    def num(x: float) -> str:
        return "nan" if not math.isfinite(x) else f"{x:+.4f}"

    def with_interval(v: tuple[float, float, float]) -> str:
        mean, lo, hi = v
        return num(mean) + (f" [{num(lo)}, {num(hi)}]" if math.isfinite(lo) else " (too few queries)")

    lines = ["| query | Scouts (successes) | U solution | U irrelevant | U none | solution - irrelevant | "
             "Scouts where solution's signed d is higher | gate selects |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        above = sum(a > b for a, b in zip(r.signed[SOLUTION], r.signed[IRRELEVANT]))
        lines.append(f"| {r.task_id} | {r.n_scouts} ({r.n_success}) | {num(r.u_solution)} | {num(r.u_irrelevant)} | "
                     f"0 | {num(r.u_solution - r.u_irrelevant)} | {above}/{r.n_scouts} | {NAMES[r.selected]} |")
    k, m = s["scouts_solution_above"]
    sel = s["selected"]
    lines += [
        "",
        f"over {s['n_queries']} queries ({s['n_finite']} with finite utilities); interval: {s['interval']}",
        f"mean U solution {with_interval(s['u_solution'])}; irrelevant {with_interval(s['u_irrelevant'])}; none 0",
        f"solution - irrelevant: {with_interval(s['solution_minus_irrelevant'])}",
        f"solution - none: {with_interval(s['solution_minus_none'])}",
        f"Scouts where the solution card's signed d is above the irrelevant card's: {k}/{m}",
        f"gate (eq. 10, both cards as candidates) selects: solution {sel['solution']}, irrelevant "
        f"{sel['irrelevant']}, none {sel['none']} of {s['n_queries']} queries",
    ]
    return "\n".join(lines)
