"""SkillScaffold's records: the Scouts as the scorer and the Generator need them (read from the runner's Parquet
batches), and the rows every scaffold rule writes (evidence, candidates, scores, utilities, selections)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from skillrepro.store import read_records


@dataclass(frozen=True)
class TrajectoryStep:
    reasoning: str
    action: str
    arguments: str  # JSON list
    observation: str


@dataclass(frozen=True)
class Trajectory:
    """One recorded episode as the scorer and the Generator need it."""

    episode_id: str
    task_id: str
    success: bool
    order: int  # sampling order within its query (the anchor is the first success in this order)
    messages: tuple[dict[str, Any], ...]  # the actor's full conversation, its final reply included
    steps: tuple[TrajectoryStep, ...]

    @property
    def task_text(self) -> str:
        """The opening observation (it states the task)."""
        return next((m["content"] for m in self.messages if m["role"] == "user"), "")

    def with_system(self, system_prompt: str) -> list[dict[str, Any]]:
        """The same conversation under another system prompt (a context c for scoring)."""
        msgs = [dict(m) for m in self.messages]
        if not msgs or msgs[0]["role"] != "system":
            raise ValueError(f"episode {self.episode_id}: the recorded conversation has no system message")
        msgs[0]["content"] = system_prompt
        return msgs


def conversation(prompt_json: str, response_json: str) -> list[dict[str, Any]]:
    """The conversation of an actor call: its request messages plus its reply as an assistant message."""
    msgs = json.loads(prompt_json)["messages"]
    reply = json.loads(response_json)
    last: dict[str, Any] = {"role": "assistant", "content": reply.get("content", "")}
    if reply.get("tool_calls"):
        last["tool_calls"] = [
            {"id": c["id"], "type": "function",
             "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
            for c in reply["tool_calls"]
        ]
    return msgs + [last]


def load_trajectories(run_dirs: Iterable[str | Path]) -> list[Trajectory]:
    """Every episode in the runner's batch folders, in folder order then episode order.

    The conversation is the episode's last actor call plus its reply: every earlier turn is inside it."""
    # lazy: start-up cost: pandas adds ~200 ms (65 %) to `import skillrepro.check` (the study's settings)
    import pandas as pd

    out: list[Trajectory] = []
    order: dict[str, int] = {}
    for d in run_dirs:
        d = Path(d)
        eps = pd.read_parquet(d / "episodes.parquet")
        steps = pd.read_parquet(d / "steps.parquet")
        calls = pd.read_parquet(d / "llm_calls.parquet")
        calls = calls[calls.role == "actor"].sort_values("started_at")
        for ep in eps.itertuples():
            ep_calls = calls[calls.session_id == ep.episode_id]
            if ep_calls.empty:
                raise ValueError(f"{d}: episode {ep.episode_id} has no actor LLM call to score")
            last = ep_calls.iloc[-1]
            st = steps[steps.episode_id == ep.episode_id].sort_values("step")
            k = order.get(ep.task_id, 0)
            order[ep.task_id] = k + 1
            out.append(Trajectory(
                ep.episode_id, str(ep.task_id), bool(ep.success), k,
                tuple(conversation(last.prompt, last.response)),
                tuple(TrajectoryStep(s.reasoning, s.action, s.arguments, s.observation) for s in st.itertuples()),
            ))
    return out


@dataclass
class EvidenceRecord:
    """The Generator's evidence for one query (appendix A.4). Parquet: evidence.parquet."""

    benchmark: str
    variant: str
    task_id: str
    kind: str  # all_success | all_failure | mixed
    n_scouts: int
    n_success: int
    anchor_episode_id: str  # anc: first successful Scout in sampling order; "" otherwise
    skip: bool  # anc with no success: no generation, the query stays skill-free
    task: str
    evidence: str  # the attempts block the template receives
    scout_episode_ids: list[str] = field(default_factory=list)
    budget_unit: str = "chars"  # chars (scaffold.evidence_max_chars) | tokens (scaffold.evidence_max_tokens)
    evidence_size: int = 0  # the attempts block's length in budget_unit
    n_turns_omitted: int = 0  # Scout turns elided to fit the budget, over all attempts (0: nothing cut)


@dataclass
class CandidateRecord:
    """One generated card (candidates.parquet). Invalid cards are kept but never selected."""

    benchmark: str
    variant: str
    task_id: str
    candidate: int
    raw: str  # the Generator's reply as returned
    card: str
    name: str
    n_words: int
    valid: bool
    problems: str  # "; "-joined
    call_id: str  # the generator LLM call (llm_calls.parquet beside it)


@dataclass
class ScoreRecord:
    """l(c; tau) for one Scout under one context (scores.parquet). candidate -1 = no skill."""

    benchmark: str
    task_id: str
    episode_id: str
    variant: str  # "" for the shared skill-free scores
    candidate: int
    n_tokens: int  # scored actor tokens
    sum_logprob: float
    mean_logprob: float
    n_forward_tokens: int  # tokens the scorer had to process
    scorer: str
    model: str


@dataclass
class UtilityRecord:
    benchmark: str
    variant: str
    task_id: str
    candidate: int
    kind: str
    n_success: int
    n_failure: int
    utility: float  # NaN when undefined
    valid: bool  # card format
    eligible: bool  # valid and finite utility


@dataclass
class SelectionRecord:
    benchmark: str
    variant: str
    task_id: str
    kind: str
    n_success: int
    n_scouts: int
    selected: int  # -1: skill-free
    utility: float  # of the selected candidate, NaN if none
    best_utility: float  # max over eligible candidates, NaN if none (the gate compares it to the threshold)
    n_eligible: int
    card: str  # "" when skill-free


def read_rows(path: str | Path, cls: type) -> list[Any]:
    return read_records(path, cls)
