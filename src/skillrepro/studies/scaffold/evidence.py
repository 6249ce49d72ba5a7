"""A query's Scouts as the Generator's evidence (seed 002, appendix A.4), within a budget in characters or in the
Generator's tokens; what the budget elides is recorded."""
from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from skillrepro.config import ConfigError
from skillrepro.llm.models import resolve
from skillrepro.llm.scorer import hf_tokenizer, load_gguf_tokenizer
from skillrepro.studies.scaffold.records import EvidenceRecord, Trajectory
from skillrepro.studies.scaffold.selection import VARIANTS, group_kind


def render_attempt(t: Trajectory, max_chars: int, count: Callable[[str], int] = len) -> str:
    """A Scout as Generator evidence: numbered thought/action/observation lines. When longer than `max_chars`
    (in units of `count`: characters, or tokens with a tokenizer's counter), the first and last steps are kept
    and the middle is elided (the start shows the approach, the end the outcome)."""
    return render_attempt_counted(t, max_chars, count)[0]


def render_attempt_counted(t: Trajectory, budget: int, count: Callable[[str], int] = len) -> tuple[str, int]:
    """`render_attempt` and how many turns it elided."""
    lines = []
    for i, s in enumerate(t.steps):
        args = ", ".join(json.dumps(a) for a in json.loads(s.arguments or "[]"))
        thought = " ".join(s.reasoning.split())
        lines.append(f"Turn {i}. Thought: {thought}\n  Action: {s.action}({args})\n  Observation: "
                     + " ".join(s.observation.split()))
    text = "\n".join(lines)
    if count(text) <= budget:
        return text, 0
    head, tail, used = [], [], 0
    for a, b in zip(lines, reversed(lines)):
        if used + count(a) + count(b) > budget:
            break
        head.append(a)
        tail.insert(0, b)
        used += count(a) + count(b)
    omitted = len(lines) - len(head) - len(tail)
    return "\n".join(head + [f"[{omitted} turns omitted]"] + tail), omitted


def build_evidence(benchmark: str, variant: str, scouts: Sequence[Trajectory], max_chars: int = 6000,
                   count: Callable[[str], int] | None = None) -> EvidenceRecord:
    """grp: the task and every Scout with its outcome. anc: the first successful Scout only (skip if none).

    The budget is `max_chars` characters, or tokens when `count` (a token counter) is given; grp splits it
    evenly over the Scouts (at least 500 characters or 125 tokens each). Elided turns are recorded."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown evidence variant {variant!r}; known: {', '.join(VARIANTS)}")
    if not scouts:
        raise ValueError(f"{benchmark}: a query with no Scouts")
    unit, measure = ("chars", len) if count is None else ("tokens", count)
    scouts = sorted(scouts, key=lambda t: t.order)
    task_id = scouts[0].task_id
    kind = group_kind([t.success for t in scouts])
    n_success = sum(t.success for t in scouts)
    ids = [t.episode_id for t in scouts]
    if variant == "anc":
        anchor = next((t for t in scouts if t.success), None)
        if anchor is None:
            return EvidenceRecord(benchmark, variant, task_id, kind, len(scouts), 0, "", True,
                                  scouts[0].task_text, "", ids, unit)
        text, omitted = render_attempt_counted(anchor, max_chars, measure)
        body = f"<attempt outcome=SUCCESS>\n{text}\n</attempt>"
        return EvidenceRecord(benchmark, variant, task_id, kind, len(scouts), n_success, anchor.episode_id, False,
                              anchor.task_text, body, ids, unit, measure(body), omitted)
    per = max(500 if count is None else 125, max_chars // len(scouts))
    parts, omitted = [], 0
    for i, t in enumerate(scouts):
        text, k = render_attempt_counted(t, per, measure)
        omitted += k
        parts.append(f"<attempt index={i} outcome={'SUCCESS' if t.success else 'FAILURE'}>\n{text}\n</attempt>")
    body = "\n".join(parts)
    return EvidenceRecord(benchmark, variant, task_id, kind, len(scouts), n_success, "", False,
                          scouts[0].task_text, body, ids, unit, measure(body), omitted)


def token_counter(llm: Any) -> Callable[[str], int]:
    """Counts tokens as `llm.model`'s tokenizer does (the Generator is the same model): from the GGUF file
    (embedded backend) or the Hugging Face tokenizer (vllm)."""
    if llm.backend == "embedded":
        tok = load_gguf_tokenizer(resolve(llm.model))
    elif llm.backend == "vllm":
        tok = hf_tokenizer(llm.model)
    else:
        raise ConfigError(f"config key scaffold.evidence_max_tokens: no tokenizer for llm.backend {llm.backend}; "
                          "use scaffold.evidence_max_chars")
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])
