"""Non-prefix reuse (seed 001, section 2-4; CacheBlend-style): a skill chunk's K/V computed elsewhere.

For a SkillRL-format request (step >= `min_step`), five chunks: G (general principles), C (the category's
skills), M (mistakes to avoid), H (the first history item, `[Observation k: '...', Action k: '...']` whole,
over every line of its observation: 149 tokens at the seminar's step-2 example) and A (the admissible-action
list). Samples: `samples` of the eligible requests, spread evenly over them in (episode, step) order
(`spread: even`; the seminar takes 33 from its RL model's run) or the first ones (`spread: first`). For each
chunk and each reuse context, the chunk's K/V is computed in that context, K re-rotated with RoPE from the
positions it was computed at to the chunk's place in the target prompt (RoPE composes: R(p + d) = R(d) R(p)),
and spliced into the target's cache: the tokens before the chunk keep their own K/V, the chunk gets the
reused K/V, and everything after it (rest of the prompt, then the reply) is computed attending to it.
Measured against full recomputation:
- K rel: ||K_reused - K_full|| / ||K_full|| over the chunk's tokens, per layer and KV head;
- the shift of the sum of log-probabilities of the reply's action tokens (inside <action>...</action>).

Contexts: `noise` (the target prompt cut after the chunk, computed apart: numerical error only),
`alone` (the chunk by itself, from position 0), `alone_sys` (after the chat template's system turn and
the user header), `other` (G, C, M: after another episode's prompt up to its own copy of the chunk;
H, A: after the same episode's previous-step prompt up to where it shows the same text). A cell with no
such context in a sample is skipped for that sample.

A sample's action "changes a lot" when its log-probability shifts by more than `threshold` (0.5 nats, the
seminar's cut). A reply without a non-empty `<action>...</action>` breaks the format: it is a wrong output,
counted (`sample_rows`, the summary's `format_invalid`) and not scored, as the seminar does (30 of 33 for
the base model). Each (chunk, context) count is held against the `noise` count of the same chunk with a
one-sided Fisher exact test: does reusing the chunk from that context change actions more often than
numerical noise does?
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from skillrepro.llm.scorer import load_gguf
from skillrepro.studies.kvcache import formats as F

CHUNKS = ("G", "C", "M", "H", "A")
CONTEXTS = ("noise", "alone", "alone_sys", "other")
_ACTION = re.compile(r"<action>(.*?)</action>", re.DOTALL)


@dataclass(frozen=True)
class Target:
    """One request to reuse chunks in: its prompt text (chat template applied), the reply to score, the
    character span of each chunk in the prompt, and the prompt texts an `other` context may come from."""

    episode: str
    step: int
    prompt: str
    reply: str
    chunks: dict[str, tuple[int, int]]
    others: dict[str, str]  # chunk -> a prompt text that contains the same chunk text elsewhere


@dataclass
class BlendRow:
    episode: str
    step: int
    chunk: str
    context: str
    chunk_start: int  # token position of the chunk in the target prompt
    chunk_tokens: int
    context_tokens: int  # tokens before the chunk where it was computed
    k_rel: float  # mean over layers and KV heads
    k_rel_layers: str  # per layer, mean over KV heads, comma-separated
    v_rel: float
    action_logprob_full: float
    action_logprob_reused: float
    action_logprob_shift: float


def chunk_texts(bank: F.SkillBank, category: str, history: Sequence[F.Turn], admissible: Sequence[str]) -> dict[str, str]:
    """The text of each chunk as the SkillRL format prints it."""
    items = F.history_items(list(history))
    return {"G": F.general_section(bank), "C": F.category_section(bank, category), "M": F.mistakes_section(bank),
            "H": items[0] if items else "", "A": F.format_actions(list(admissible))}


SPREADS = ("even", "first")


def spread_pick(items: Sequence, k: int | None, spread: str = "even") -> list:
    """k of the items: evenly spaced from the first to the last (`even`), or the first k (`first`)."""
    if spread not in SPREADS:
        raise ValueError(f"unknown sample spread {spread!r}; choose one of {SPREADS}")
    items = list(items)
    if k is None or k >= len(items):
        return items
    if spread == "first" or k == 1:
        return items[:k]
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)]


def targets_from_trajectories(trajectories, bank: F.SkillBank | None = None, min_step: int = 2, limit: int | None = None,
                              templates: F.Templates | None = None, spread: str = "even") -> list[Target]:
    """SkillRL-format requests at steps >= min_step, with their replies, chunks and reuse sources; `limit` of
    them picked by `spread_pick` (every one when None)."""
    if spread not in SPREADS:
        raise ValueError(f"kvcache.blend.spread: {spread!r} is not one of {SPREADS}")
    bank = bank or F.load_bank()
    prompts: dict[tuple[str, int], str] = {}
    built = []
    for tr in trajectories:
        cat = F.detect_category(tr.task)
        for t, turn in enumerate(tr.turns):
            msgs = F.build_messages("skillrl", bank, tr.task, None, tr.turns[:t], turn.observation, turn.admissible,
                                    templates=templates)
            prompts[tr.task_id, t] = F.render_chatml(msgs)
            if t >= min_step:
                built.append((tr, t, cat))
    out = []
    built = spread_pick(built, limit, spread)
    built = [(tr, t, cat, chunk_texts(bank, cat, tr.turns[:t], tr.turns[t].admissible)) for tr, t, cat in built]
    for tr, t, cat, texts in built:
        prompt = prompts[tr.task_id, t]
        spans = {}
        for name, text in texts.items():
            i = prompt.find(text)
            if text and i >= 0:
                spans[name] = (i, i + len(text))
        others = {}
        for name in ("G", "C", "M"):  # another episode's prompt with the same chunk text
            other = next((p for (task, s), p in prompts.items() if task != tr.task_id and s >= min_step
                          and texts[name] in p), None)
            if other is not None:
                others[name] = other
        prev = prompts.get((tr.task_id, t - 1), "")
        for name in ("H", "A"):  # the same episode's previous step, if it shows the same text
            if texts[name] in prev:
                others[name] = prev
        out.append(Target(tr.task_id, t, prompt, tr.turns[t].reply, spans, others))
    return out


def scored_action(reply: str) -> str | None:
    """The action a reply commits to, or None when it breaks the <action>...</action> format."""
    m = _ACTION.search(reply or "")
    return m.group(1) if m and m.group(1).strip() else None


@dataclass
class SampleRow:
    """One target request: whether its reply keeps the action format (else it is not scored)."""

    episode: str
    step: int
    format_valid: bool
    action: str
    h_chars: int  # length of the H chunk's text (0 when the sample has none)


def sample_rows(targets: Sequence[Target]) -> list[SampleRow]:
    out = []
    for t in targets:
        a = scored_action(t.reply)
        h = t.chunks.get("H")
        out.append(SampleRow(t.episode, t.step, a is not None, a or "", h[1] - h[0] if h else 0))
    return out


def fisher_greater(a: int, n1: int, b: int, n2: int) -> float:
    """One-sided Fisher exact p-value that group 1's rate (a of n1) exceeds group 2's (b of n2)."""
    k, n = a + b, n1 + n2
    denom = math.comb(n, k)
    return sum(math.comb(n1, i) * math.comb(n2, k - i) for i in range(a, min(n1, k) + 1)) / denom if denom else 1.0


class Blender:
    """A transformers causal LM (Qwen2-style RoPE) and its tokenizer, for chunk reuse experiments."""

    def __init__(self, model, tokenizer):
        import torch

        self.torch = torch
        self.lm = model.eval()
        self.tok = tokenizer
        sys_prompt = F.render_chatml([{"role": "user", "content": ""}]).split("<|im_start|>user")[0]
        self.sys_ids = self.encode(sys_prompt + "<|im_start|>user\n")

    @classmethod
    def from_gguf(cls, gguf_path: str, threads: int | None = None) -> "Blender":
        import torch
        from pathlib import Path

        if threads:
            torch.set_num_threads(threads)
        return cls(*load_gguf(Path(gguf_path)))

    def encode(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def _forward(self, ids: list[int], cache=None):
        torch = self.torch
        with torch.no_grad():
            return self.lm(torch.tensor([ids]), cache=cache, use_cache=True)

    def rotate(self, k, delta: int):
        """K computed at positions p, as if computed at p + delta."""
        from transformers.models.qwen2.modeling_qwen2 import rotate_half

        n = k.shape[2]
        cos, sin = self.lm.model.rotary_emb(k, self.torch.full((1, n), delta))
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return k * cos + rotate_half(k) * sin

    def _action_logprob(self, logits, ids: Sequence[int], start: int, scored: Sequence[int]) -> float:
        """Sum of log-probs of ids[p] for p in scored, from the logits of a forward pass over ids[start:]
        (logits[j] predicts ids[start + j + 1])."""
        lp = self.torch.log_softmax(logits[0].float(), dim=-1)
        return float(sum(lp[p - 1 - start, ids[p]] for p in scored))

    def run(self, target: Target, chunks: Sequence[str] = CHUNKS, contexts: Sequence[str] = CONTEXTS) -> list[BlendRow]:
        torch = self.torch
        from transformers import DynamicCache

        enc = self.tok(target.prompt + target.reply, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = enc["input_ids"], enc["offset_mapping"]
        m = _ACTION.search(target.reply)
        if scored_action(target.reply) is None:
            return []  # a reply that breaks the action format is a wrong output: nothing to score
        a0, a1 = len(target.prompt) + m.start(1), len(target.prompt) + m.end(1)
        scored = [i for i, (s, _) in enumerate(offsets) if a0 <= s < a1]
        full = self._forward(ids)
        base_lp = self._action_logprob(full.logits, ids, 0, scored)
        layers = full.cache.layers
        rows = []
        for name in chunks:
            if name not in target.chunks:
                continue
            c0, c1 = target.chunks[name]
            s = next(i for i, (a, _) in enumerate(offsets) if a >= c0)
            e = next(i for i, (a, _) in enumerate(offsets) if a >= c1)
            chunk = ids[s:e]
            for ctx in contexts:
                before = self._context(ctx, name, target, ids, s)
                if before is None:
                    continue
                out = self._forward(before + chunk)
                delta = s - len(before)
                cache = DynamicCache()
                krel, vrel = [], []
                for li, layer in enumerate(out.cache.layers):
                    k = self.rotate(layer.keys[:, :, len(before):], delta)
                    v = layer.values[:, :, len(before):]
                    k_full, v_full = layers[li].keys[:, :, s:e], layers[li].values[:, :, s:e]
                    norm = torch.linalg.vector_norm
                    krel.append((norm(k - k_full, dim=(0, 2, 3)) / norm(k_full, dim=(0, 2, 3))).tolist())  # per head
                    vrel.append(float(norm(v - v_full) / norm(v_full)))
                    cache.update(torch.cat([layers[li].keys[:, :, :s], k], dim=2),
                                 torch.cat([layers[li].values[:, :, :s], v], dim=2), li)
                rest = self._forward(ids[e:], cache)
                lp = self._action_logprob(rest.logits, ids, e, scored)
                per_layer = [sum(h) / len(h) for h in krel]
                rows.append(BlendRow(target.episode, target.step, name, ctx, s, e - s, len(before),
                                     sum(per_layer) / len(per_layer), ",".join(f"{x:.5f}" for x in per_layer),
                                     sum(vrel) / len(vrel), base_lp, lp, lp - base_lp))
        return rows

    def _context(self, ctx: str, name: str, target: Target, ids: list[int], s: int) -> list[int] | None:
        if ctx == "noise":
            return ids[:s]
        if ctx == "alone":
            return []
        if ctx == "alone_sys":
            return list(self.sys_ids)
        other = target.others.get(name)
        if other is None:
            return None
        c0, c1 = target.chunks[name]
        return self.encode(other[: other.find(target.prompt[c0:c1])])


def summarize(rows, threshold: float = 0.5, samples: Sequence[SampleRow] = ()):
    """Per (chunk, context): median K rel, samples, samples whose action log-prob moved more than
    `threshold`, and the one-sided Fisher p against the same chunk's noise context; with `samples`, the
    targets drawn and how many of their replies broke the action format (the same in every row)."""
    df = pd.DataFrame(rows, columns=[f for f in BlendRow.__dataclass_fields__])
    df["large_shift"] = df.action_logprob_shift.abs() > threshold
    out = df.groupby(["chunk", "context"], sort=False).agg(
        samples=("k_rel", "size"), k_rel_median=("k_rel", "median"), v_rel_median=("v_rel", "median"),
        shift_median=("action_logprob_shift", "median"), large_shifts=("large_shift", "sum")).reset_index()
    noise = out[out.context == "noise"].set_index("chunk")
    out["fisher_p_vs_noise"] = [
        fisher_greater(int(r.large_shifts), int(r.samples), int(noise.large_shifts.get(r.chunk, 0)),
                       int(noise.samples.get(r.chunk, 0))) if r.context != "noise" and r.chunk in noise.index else None
        for r in out.itertuples()]
    if samples:
        out = out.assign(targets=len(samples), format_invalid=sum(not s.format_valid for s in samples))
    return out.assign(threshold=threshold)
