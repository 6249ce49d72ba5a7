"""SkillScaffold (seed 002, sections 3 and 4.1-4.4): skill-free Scouts, candidate skill cards (constrained to
their format), likelihood-ratio utility, positive-gated injection and its ablations, and the pilot
diagnostics. GRPO training is in scaffold_grpo, the WebShop and tau2-bench data in scaffold_data.

The pure decisions (`utility`, `select`, `check_card`, `group_kind`) take plain numbers and strings so a
test can reach every branch. The rest turns stored records into those inputs: Scout trajectories from
the runner's Parquet files, evidence text for the Generator, the conversations the scorer reads, and
the tables of the validation experiment (section 5.4) and the exploration view (figure 6).
"""
from __future__ import annotations

import json
import math
import random
import re
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from skillrepro import skills
from skillrepro.agent import Actor, EpisodeSpec, Prompts, primitive_tools, skill_tools
from skillrepro.benchmarks import call_budget, load_benchmark
from skillrepro.llm.models import MODELS, resolve
from skillrepro.llm.servers import URL_ENV, own_server
from skillrepro.runner import RECORD_TABLES, run_batch
from skillrepro.skills.sandbox import SandboxPolicy
from skillrepro.store import read_records, write_table
from skillrepro.store import schema as record_schema

VARIANTS = ("grp", "anc")
PROMPTS = Path(__file__).resolve().parents[1] / "prompts"


# ----------------------------------------------------------------------------------------------------
# Utility and selection (equations 8-10)


def utility(d_success: Sequence[float], d_failure: Sequence[float], variant: str = "grp") -> float:
    """Skill utility of one candidate from its per-Scout differences d(s, tau) = l(s; tau) - l(empty; tau).

    `d_success` / `d_failure` hold d for the successful / failed Scouts, each in sampling order.
    grp (eq. 8): mean over successes if no failure; minus the mean over failures if no success; otherwise
    half the success mean minus half the failure mean, so each outcome class weighs 1/2 whatever its size.
    anc (eq. 9): d on the anchor, the first successful Scout; failures are not used.
    NaN when undefined (no Scout at all, or no success for anc) or when a needed d is not finite.
    """
    s = [float(x) for x in d_success]
    f = [float(x) for x in d_failure]
    if variant == "anc":
        return s[0] if s and math.isfinite(s[0]) else math.nan
    if variant != "grp":
        raise ValueError(f"unknown utility variant {variant!r}; known: {', '.join(VARIANTS)}")
    if not s and not f:
        return math.nan
    if not all(math.isfinite(x) for x in s + f):
        return math.nan
    if not f:
        return sum(s) / len(s)
    if not s:
        return -sum(f) / len(f)
    return 0.5 * sum(s) / len(s) - 0.5 * sum(f) / len(f)


def select(utilities: Sequence[float], valid: Sequence[bool], threshold: float = 0.0) -> int | None:
    """Positive-gated selection (eq. 10): index of the best valid candidate with a finite utility, if that
    utility is above `threshold`; None (stay skill-free) otherwise. Ties go to the earlier candidate."""
    if len(utilities) != len(valid):
        raise ValueError(f"select: {len(utilities)} utilities but {len(valid)} validity flags")
    best: int | None = None
    for j, (u, ok) in enumerate(zip(utilities, valid)):
        if ok and u is not None and math.isfinite(u) and (best is None or u > utilities[best]):
            best = j
    if best is None or not utilities[best] > threshold:
        return None
    return best


SELECTIONS = ("utility", "random", "shuffled")


def select_with(utilities: Sequence[float], valid: Sequence[bool], threshold: float = 0.0, *,
                selection: str = "utility", gate: bool = True, rng: random.Random | None = None,
                ) -> tuple[int | None, list[float]]:
    """Selection with the ablations of table 3; returns (index or None, the utilities paired with the
    candidates as used, which are what the Generator's rewards read).

    utility: eq. 10. shuffled: the eligible candidates' utilities are permuted among them before eq. 10,
    so whether to inject is unchanged (the maximum is) but which card is unrelated to its own utility.
    random: inject when eq. 10 would, but a uniformly drawn eligible card. gate=False: the best eligible
    card is injected even when its utility is not above the threshold."""
    if selection not in SELECTIONS:
        raise ValueError(f"unknown selection {selection!r}; known: {', '.join(SELECTIONS)}")
    thr = threshold if gate else -math.inf
    us = [float(u) for u in utilities]
    eligible = [j for j, (u, ok) in enumerate(zip(us, valid)) if ok and math.isfinite(u)]
    if selection == "utility" or not eligible:
        return select(us, valid, thr), us
    rng = rng or random.Random(0)
    if selection == "shuffled":
        perm = rng.sample(eligible, len(eligible))
        shuffled = list(us)
        for j, k in zip(eligible, perm):
            shuffled[j] = us[k]
        return select(shuffled, valid, thr), shuffled
    return (None if select(us, valid, thr) is None else rng.choice(eligible)), us


def group_kind(outcomes: Sequence[bool]) -> str:
    """all_success | all_failure | mixed, for a non-empty Scout group."""
    if not outcomes:
        raise ValueError("group_kind: empty Scout group")
    n = sum(bool(o) for o in outcomes)
    return "all_success" if n == len(outcomes) else "all_failure" if n == 0 else "mixed"


# ----------------------------------------------------------------------------------------------------
# Skill cards


@dataclass(frozen=True)
class CardFormat:
    """What a valid card looks like: a `# Skill: <name>` title, then exactly these `##` headings in order,
    each with some text, and a word count within limits. Configurable so a user's own template can
    ask for other headings (the paper's WebShop and tau2 cards have different ones)."""

    headings: tuple[str, ...] = (
        "When to apply",
        "Success-preserving strategy",
        "Failure patterns to suppress",
        "Procedure",
        "Decision rules",
        "Verification and recovery",
        "Stop conditions",
    )
    max_words: int = 400
    min_words: int = 20


@dataclass(frozen=True)
class CardCheck:
    card: str  # the extracted card (text between <skill> tags, or from '# Skill:' on); "" if none found
    name: str
    n_words: int
    problems: tuple[str, ...]

    @property
    def valid(self) -> bool:
        return not self.problems


_TITLE = re.compile(r"^#\s*Skill\s*:\s*(.*)$", re.IGNORECASE)
_HEADING = re.compile(r"^(#{1,6})\s*(.*?)\s*#*\s*$")


def extract_card(text: str) -> str:
    """The card inside a Generator reply. A reply that is a JSON object (the paper's serialization
    contract) gives its "skill" string, or "" unless it is exactly one object with one string key "skill".
    Otherwise: between <skill> and </skill> if present, else from the first '# Skill:' line on.
    Reasoning before it (a <think> block, a preface) is dropped."""
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL | re.IGNORECASE)
    if text.lstrip().startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            return ""
        if not (isinstance(obj, dict) and list(obj) == ["skill"] and isinstance(obj["skill"], str)):
            return ""
        text = obj["skill"]
    m = re.search(r"<skill>(.*?)(?:</skill>|$)", text, flags=re.DOTALL | re.IGNORECASE)
    if m:
        text = m.group(1)
    m = re.search(r"^#\s*Skill\s*:", text, flags=re.MULTILINE | re.IGNORECASE)
    return text[m.start():].strip() if m else ""


def check_card(text: str, fmt: CardFormat = CardFormat()) -> CardCheck:
    """Extract the card from a Generator reply and list every way it breaks `fmt` (none: valid)."""
    card = extract_card(text)
    if not card:
        if text.lstrip().startswith("{"):
            return CardCheck("", "", 0, ('not one JSON object with exactly one string key "skill"',))
        return CardCheck("", "", 0, ("no card: expected a line starting with '# Skill:'",))
    lines = card.splitlines()
    problems: list[str] = []
    name = _TITLE.match(lines[0].strip()).group(1).strip()
    if not name:
        problems.append("the '# Skill:' title has no name")
    found: list[tuple[str, int]] = []  # (heading, line index)
    for i, line in enumerate(lines[1:], start=1):
        m = _HEADING.match(line.strip())
        if m:
            level, title = len(m.group(1)), m.group(2).strip().rstrip(":")
            if level <= 2:
                found.append((title, i))
    titles = [t for t, _ in found]
    want = [h.lower() for h in fmt.headings]
    if [t.lower() for t in titles] != want:
        missing = [h for h in fmt.headings if h.lower() not in [t.lower() for t in titles]]
        extra = [t for t in titles if t.lower() not in want]
        if missing:
            problems.append("missing heading(s): " + ", ".join(missing))
        if extra:
            problems.append("unexpected heading(s): " + ", ".join(extra))
        if not missing and not extra:
            problems.append("headings out of order or repeated: " + ", ".join(titles))
    else:
        bounds = [i for _, i in found] + [len(lines)]
        for (title, start), end in zip(found, bounds[1:]):
            if not "\n".join(lines[start + 1:end]).strip():
                problems.append(f"section '{title}' is empty")
    n_words = len(re.findall(r"[A-Za-z0-9][\w'-]*", card))
    if n_words > fmt.max_words:
        problems.append(f"{n_words} words, more than the limit of {fmt.max_words}")
    if n_words < fmt.min_words:
        problems.append(f"{n_words} words, fewer than the minimum of {fmt.min_words}")
    return CardCheck(card, name, n_words, tuple(problems))


# ----------------------------------------------------------------------------------------------------
# Constrained decoding of cards (valid structure by construction; the words stay the model's)

# The paper pre-fills the Generator's reply with this and asks for one JSON object (appendix D).
PREFILL = '{"skill":"# Skill: '
DECODINGS = ("auto", "grammar", "grammar_single", "json_schema", "none")
_WORD = re.compile(r"[A-Za-z0-9][\w'-]*")


def _gbnf_literal(text: str) -> str:
    """`text` as it appears inside a JSON string, as a GBNF string literal."""
    inner = json.dumps(text)[1:-1]  # JSON-escaped: a newline becomes the two characters \ n
    return '"' + inner.replace("\\", "\\\\").replace('"', '\\"') + '"'


def section_word_bounds(fmt: CardFormat, max_tokens: int | None = None) -> tuple[int, int]:
    """(lo, hi) words per section such that any card the grammar allows has min_words..max_words words
    (as check_card counts them: title word, name, heading words and section words) and, when
    `max_tokens` is given, fits in it (about 2 tokens per word and separator, 12 per heading line), so
    the reply is never cut off before its closing brace."""
    k = len(fmt.headings)
    fixed = 2 + sum(len(_WORD.findall(h)) for h in fmt.headings)  # "Skill", the kebab name, headings
    hi = (fmt.max_words - fixed) // k
    if max_tokens is not None:
        hi = min(hi, (max_tokens - 16 - 12 * k) // (2 * k))
    lo = max(1, -(-(fmt.min_words - fixed) // k))
    if hi < lo:
        raise ValueError(f"card format: {k} sections need {lo}..{hi} words each, impossible with max_words "
                         f"{fmt.max_words}, min_words {fmt.min_words}" + (f" and {max_tokens} generator tokens"
                                                                         if max_tokens else ""))
    return lo, hi


_NAME_RULE = 'name ::= [a-z] [a-z0-9]{0,15} ("-" [a-z0-9] [a-z0-9]{0,15}){0,5}'


def _body_rules(lo: int, hi: int) -> list[str]:
    return [
        f'body ::= "- "? word (sep word){{{lo - 1},{hi - 1}}} "."?',
        "word ::= [A-Za-z0-9] [A-Za-z0-9'-]{0,19}",
        # A separator holds no letter or digit, so each `word` is exactly one word for check_card.
        'sep ::= " " | ", " | ". " | "; " | ": " | " (" | ") " | "), " | "/" | "\\\\n- "',
    ]


def heading_literal(heading: str) -> str:
    """A heading line as it appears inside the reply's JSON string (newlines escaped)."""
    return json.dumps("\n## " + heading + "\n")[1:-1]


def card_grammar(fmt: CardFormat, max_tokens: int | None = None) -> str:
    """GBNF (llama.cpp; vLLM's xgrammar reads the same syntax) for the Generator's reply after PREFILL:
    a kebab-case name, then every heading of `fmt` in order, each followed by lo..hi words (see
    `section_word_bounds`), then the closing `"}`. Section text cannot contain '#', a quote or a
    backslash other than a newline escape, so no extra heading can appear and the JSON stays valid.
    One request under this grammar can still be cut by its token limit before the closing brace (a word
    costs one to twenty tokens); `sectioned` decoding (`part_grammars`) bounds the reply in tokens instead."""
    lo, hi = section_word_bounds(fmt, max_tokens)
    parts = " ".join(f"{_gbnf_literal(chr(10) + '## ' + h + chr(10))} body" for h in fmt.headings)
    return "\n".join([f'root ::= name {parts} "\\"}}"', _NAME_RULE] + _body_rules(lo, hi))


def part_grammars(fmt: CardFormat, max_tokens: int | None = None) -> tuple[str, str]:
    """(name grammar, section-body grammar) of sectioned decoding: the same rules as `card_grammar`, one part of
    the card per request, the headings and the closing brace written between the requests."""
    lo, hi = section_word_bounds(fmt, max_tokens)
    return "\n".join(["root ::= name", _NAME_RULE]), "\n".join(["root ::= body"] + _body_rules(lo, hi))


# What a body or a name cut by its token limit may end with that the grammar does not let it end with: a
# separator, or part of one (a cut can fall inside the two characters of an escaped newline).
_CUT_TAIL = re.compile(r"(?:\\n- |\\n-|\\n|\\|[ ,;:(/)-]|\.(?= ))+$")


def close_cut(text: str) -> str:
    """A body (or name) cut by the token limit, made a complete one: its trailing separator dropped. A word cut in
    the middle is still a word (any prefix of one is), so nothing the policy wrote besides the separator goes."""
    return _CUT_TAIL.sub("", text)


def card_json_schema(fmt: CardFormat) -> dict[str, Any]:
    """JSON schema of the reply for servers without grammars (OpenAI-style structured outputs): one
    object with one string key "skill" whose headings come in order; the word bounds are not expressible
    here and are left to validation."""
    pattern = "^# Skill: [a-z0-9]+(-[a-z0-9]+)*" + "".join(
        "\\n## " + re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", h) + "\\n[^#]+" for h in fmt.headings) + "$"
    return {"type": "object", "additionalProperties": False, "required": ["skill"],
            "properties": {"skill": {"type": "string", "pattern": pattern}}}


@dataclass(frozen=True)
class GeneratorRequest:
    """What to send with the Generator's messages: an assistant pre-fill (the reply continues it) and
    the request fields the backend needs for it and for constrained decoding. `parts` (sectioned decoding):
    the name and section-body grammars, one request each, under `grammar_field`; `headings` are written
    between them."""

    prefill: str
    extra_body: dict[str, Any]
    parts: tuple[str, str] | None = None
    grammar_field: str = "grammar"
    headings: tuple[str, ...] = ()

    def reply_text(self, continuation: str, prefill: str | None = None) -> str:
        """The whole reply. llama.cpp returns the pre-fill with the continuation, vLLM without it."""
        prefill = self.prefill if prefill is None else prefill
        return continuation if continuation.startswith(prefill) else prefill + continuation

    def with_grammar(self, grammar: str) -> dict[str, Any]:
        return {**self.extra_body, self.grammar_field: {"grammar": grammar} if self.grammar_field == "structured_outputs"
                else grammar}


def generator_request(fmt: CardFormat, decoding: str, backend: str, max_tokens: int | None) -> GeneratorRequest:
    """`grammar`: pre-fill PREFILL and decode the card in parts, the name and then each section's body under
    `part_grammars` (llama.cpp's `grammar`, vLLM's `structured_outputs.grammar`), each request limited to the
    tokens the card has left, the headings and the closing `"}` written in between: the reply fits
    `max_tokens` and always closes (`sectioned_reply`). `grammar_single`: one request under `card_grammar`,
    bounded in words only (a long reply is cut before its closing brace). `json_schema`: `response_format`
    with `card_json_schema`, no pre-fill (a schema covers the whole reply). `none`: pre-fill only, free
    decoding. `auto`: grammar, or json_schema on the openai backend (API servers do not continue a pre-filled
    reply)."""
    if decoding not in DECODINGS:
        raise ValueError(f"config key scaffold.generator_decoding: {decoding!r}; allowed: {', '.join(DECODINGS)}")
    if decoding == "auto":
        decoding = "json_schema" if backend == "openai" else "grammar"
    if decoding == "json_schema":
        return GeneratorRequest("", {"response_format": {"type": "json_schema", "json_schema": {
            "name": "skill_card", "strict": True, "schema": card_json_schema(fmt)}}})
    if backend == "openai":
        raise ValueError(f"config key scaffold.generator_decoding: {decoding!r} pre-fills the assistant reply, "
                         "which OpenAI-style APIs do not continue; use json_schema for llm.backend openai")
    extra: dict[str, Any] = {}
    if backend == "vllm":  # vLLM continues a final assistant message only when asked to
        extra.update(continue_final_message=True, add_generation_prompt=False)
    field_name = "structured_outputs" if backend == "vllm" else "grammar"
    if decoding == "grammar":
        return GeneratorRequest(PREFILL, extra, part_grammars(fmt, max_tokens), field_name, tuple(fmt.headings))
    req = GeneratorRequest(PREFILL, extra, grammar_field=field_name)
    if decoding == "grammar_single":
        return GeneratorRequest(PREFILL, req.with_grammar(card_grammar(fmt, max_tokens)), grammar_field=field_name)
    return req


# Sectioned decoding: the tokens a section body is sure to get (so it holds a word), and the most a name may take.
SECTION_MIN_TOKENS = 4
NAME_MAX_TOKENS = 16


def _part_budgets(fmt: CardFormat, max_tokens: int, literal_tokens: Sequence[int]) -> tuple[int, int]:
    """(tokens the model may write in all, of which at most this many for the name): `max_tokens` less the
    headings and the closing brace written between the requests, and a token per seam where re-tokenising
    could merge two pieces."""
    k = len(fmt.headings)
    free = max_tokens - sum(literal_tokens) - 2 - (2 * k + 2)
    if free < SECTION_MIN_TOKENS * (k + 1):
        raise ValueError(f"config key scaffold.generator_max_tokens: {max_tokens} tokens leave {free} for the model's "
                         f"own text after the {k} headings; a card needs at least {SECTION_MIN_TOKENS * (k + 1)}")
    return free, min(NAME_MAX_TOKENS, free - SECTION_MIN_TOKENS * k)


def server_token_counter(base_url: str, backend: str, model: str) -> Callable[[str], int]:
    """Counts tokens as the server that plays the Generator does (its /tokenize: llama.cpp and vLLM both have
    one), remembering texts it has counted (the headings repeat for every card)."""
    import urllib.request

    root = base_url.rstrip("/").removesuffix("/v1")
    seen: dict[str, int] = {}

    def count(text: str) -> int:
        if text not in seen:
            body = ({"content": text, "add_special": False} if backend == "embedded"
                    else {"model": model, "prompt": text, "add_special_tokens": False})
            req = urllib.request.Request(root + "/tokenize", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                seen[text] = len(json.loads(r.read())["tokens"])
        return seen[text]

    return count


def sectioned_reply(client: Any, messages: Sequence[dict[str, Any]], request: GeneratorRequest, max_tokens: int,
                    count: Callable[[str], int], session_id: str) -> tuple[str, list[Any]]:
    """One card by sectioned decoding (see `generator_request`): (the whole reply, every request's LLM record).

    Each request continues the reply so far (the pre-fill grows) and may write what the card has left less
    SECTION_MIN_TOKENS for every later section, so the model's tokens plus the headings stay within
    `max_tokens`. A part cut by its limit loses only a trailing separator (`close_cut`)."""
    name_grammar, body_grammar = request.parts
    literals = [heading_literal(h) for h in request.headings]
    free, name_max = _part_budgets(CardFormat(request.headings), max_tokens, [count(x) for x in literals])
    text, records = request.prefill, []

    def part(grammar: str, limit: int) -> int:
        nonlocal text
        reply = client.chat(list(messages[:-1]) + [{"role": "assistant", "content": text}], role="generator",
                            session_id=session_id, max_tokens=limit, extra_body=request.with_grammar(grammar))
        records.append(reply.record)
        piece = request.reply_text(reply.text, text)[len(text):]
        text += close_cut(piece) if reply.finish_reason == "length" else piece
        return int(getattr(reply.record, "completion_tokens", 0) or count(piece))

    free -= part(name_grammar, name_max)
    for i, lit in enumerate(literals):
        text += lit
        later = len(literals) - i - 1
        free -= part(body_grammar, max(1, free - SECTION_MIN_TOKENS * later))
    return text + '"}', records


# ----------------------------------------------------------------------------------------------------
# Scout trajectories and evidence


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


GROUP_GUIDANCE = {
    "all_success": "Every attempt succeeded: extract the reusable decisions that made them work.",
    "all_failure": "Every attempt failed: diagnose the recurring errors and give conditional corrections, "
                   "without presenting an unobserved complete solution as verified.",
    "mixed": "Some attempts succeeded and some failed: contrast the decisions that separate them.",
    "anchor": "This attempt succeeded: extract the single most reusable decision mechanism it shows.",
}


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
        # lazy: the scorer extra (torch, transformers), for the embedded backend's tokenizer only
        from skillrepro.llm.scorer import load_gguf_tokenizer

        tok = load_gguf_tokenizer(resolve(llm.model))
    elif llm.backend == "vllm":
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(MODELS[llm.model].hf_id if llm.model in MODELS else llm.model)
    else:
        raise ValueError(f"config key scaffold.evidence_max_tokens: no tokenizer for llm.backend {llm.backend}; "
                         "use scaffold.evidence_max_chars")
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])


# ----------------------------------------------------------------------------------------------------
# Generator prompts


@dataclass(frozen=True)
class GeneratorTemplate:
    """A generator prompt file: a system part and a user part separated by a line '=== user ==='.
    Placeholders: {task}, {attempts}, {n_attempts}, {guidance}, {headings}, {max_words}."""

    system: str
    user: str
    path: str

    @classmethod
    def load(cls, benchmark_env: str, path: str | Path | None = None) -> "GeneratorTemplate":
        p = Path(path) if path else PROMPTS / f"scaffold_{benchmark_env}.txt"
        if not p.is_file():
            raise FileNotFoundError(f"generator template {p} does not exist (config key scaffold.generator_prompt)")
        text = p.read_text()
        if "=== user ===" not in text:
            raise ValueError(f"generator template {p}: no '=== user ===' line between the system and user parts")
        system, user = text.split("=== user ===", 1)
        for key in ("{task}", "{attempts}"):
            if key not in user:
                raise ValueError(f"generator template {p}: the user part lacks the placeholder {key}")
        return cls(system.strip(), user.strip(), str(p))

    def messages(self, ev: EvidenceRecord, fmt: CardFormat) -> list[dict[str, str]]:
        values = {
            "task": ev.task,
            "attempts": ev.evidence,
            "n_attempts": str(1 if ev.variant == "anc" else ev.n_scouts),
            "guidance": GROUP_GUIDANCE["anchor" if ev.variant == "anc" else ev.kind],
            "headings": "\n".join(["# Skill: <short-kebab-case-name>"] + [f"## {h}" for h in fmt.headings]),
            "max_words": str(fmt.max_words),
        }

        # Only known placeholders are replaced, so braces elsewhere in a user's template stay as written.
        def fill(s: str) -> str:
            return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), s)

        return [{"role": "system", "content": fill(self.system)}, {"role": "user", "content": fill(self.user)}]


# ----------------------------------------------------------------------------------------------------
# Records of the scaffold rules


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


def utilities_for_query(
    benchmark: str,
    variant: str,
    scouts: Sequence[Trajectory],
    candidates: Sequence[CandidateRecord],
    l_none: dict[str, float],
    l_cand: dict[tuple[int, str], float],
) -> list[UtilityRecord]:
    """U for every candidate of one query. `l_none[episode_id]`, `l_cand[(candidate, episode_id)]`:
    mean log-probs. Candidates with no score (invalid cards are not scored) get NaN."""
    scouts = sorted(scouts, key=lambda t: t.order)
    kind = group_kind([t.success for t in scouts])
    n_s = sum(t.success for t in scouts)
    out = []
    for c in candidates:
        d = {t.episode_id: l_cand.get((c.candidate, t.episode_id), math.nan) - l_none.get(t.episode_id, math.nan)
             for t in scouts}
        u = utility([d[t.episode_id] for t in scouts if t.success],
                    [d[t.episode_id] for t in scouts if not t.success], variant)
        out.append(UtilityRecord(benchmark, variant, c.task_id, c.candidate, kind, n_s, len(scouts) - n_s, u,
                                 c.valid, c.valid and math.isfinite(u)))
    return out


def selection_for_query(benchmark: str, variant: str, scouts: Sequence[Trajectory],
                        candidates: Sequence[CandidateRecord], utils: Sequence[UtilityRecord],
                        threshold: float, selection: str = "utility", gate: bool = True) -> SelectionRecord:
    """The selection of one query under `variant` (a utility variant or an ablation of one); the random
    draws of the ablations are seeded by (benchmark, variant, task) so reruns select the same card."""
    kind = group_kind([t.success for t in scouts])
    n_s = sum(t.success for t in scouts)
    j, us, _ = _select_query(benchmark, variant, scouts[0].task_id, candidates, utils, threshold, selection, gate)
    ok = [c.valid for c in candidates]
    eligible = [u for u, v in zip(us, ok) if v and math.isfinite(u)]
    return SelectionRecord(
        benchmark, variant, scouts[0].task_id, kind, n_s, len(scouts),
        -1 if j is None else candidates[j].candidate,
        math.nan if j is None else us[j],
        max(eligible) if eligible else math.nan, len(eligible),
        "" if j is None else candidates[j].card,
    )


def _select_query(benchmark: str, variant: str, task_id: str, candidates: Sequence[CandidateRecord],
                  utils: Sequence[UtilityRecord], threshold: float, selection: str, gate: bool
                  ) -> tuple[int | None, list[float], list[float]]:
    """`select_with` on one query's cards, with the ablations' random draws seeded by (benchmark, variant, task):
    (the selected index, the cards' scored utilities, the utilities as the selection paired them)."""
    by = {u.candidate: u for u in utils}
    us = [by[c.candidate].utility if c.candidate in by else math.nan for c in candidates]
    rng = random.Random(zlib.crc32(f"{benchmark}/{variant}/{task_id}".encode()))
    j, used = select_with(us, [c.valid for c in candidates], threshold, selection=selection, gate=gate, rng=rng)
    return j, us, used


def paired_utilities(benchmark: str, variant: str, candidates: Sequence[CandidateRecord],
                     utils: Sequence[UtilityRecord], threshold: float, selection: str, gate: bool
                     ) -> list[UtilityRecord]:
    """The utilities as a chain's selection paired them with its cards, which its Generator's rewards read: the
    scored ones, except under `shuffled` (table 3), where each card carries the utility the selection's
    permutation gave it (the same draw as `selection_for_query`'s)."""
    from dataclasses import replace

    if selection != "shuffled":
        return list(utils)
    out = []
    for task in sorted({c.task_id for c in candidates}):
        cs = [c for c in candidates if c.task_id == task]
        us = [u for u in utils if u.task_id == task]
        _, _, used = _select_query(benchmark, variant, task, cs, us, threshold, selection, gate)
        by = {u.candidate: u for u in us}
        out += [replace(by[c.candidate], utility=x) for c, x in zip(cs, used) if c.candidate in by]
    return out


# ----------------------------------------------------------------------------------------------------
# Validation experiment (section 5.4, figure 5) and exploration view (figure 6)

RULES = ("skill_free", "random_injection", "forced_top1", "gated_top1")


def decision_rules(utils: "Any", evals: "Any", threshold: float = 0.0) -> "Any":
    """Success rate of the four decision rules on the same query-candidate sets.

    `utils`: one row per (benchmark, variant, task_id, candidate) with utility, eligible.
    `evals`: downstream evaluation success rates per (benchmark, variant, task_id, candidate), candidate -1 =
    skill-free. Random injection is its expectation: the mean over a query's eligible candidates.
    Queries without any evaluated eligible candidate are left out of every rule so all rules share one set.
    """
    import pandas as pd

    rows = []
    keys = ["benchmark", "variant", "task_id"]
    merged = utils[utils.eligible].merge(evals, on=keys + ["candidate"], how="inner")
    base = evals[evals.candidate == -1].set_index(keys)["success_rate"]
    for (b, v, t), g in merged.groupby(keys):
        if (b, v, t) not in base.index:
            continue
        free = float(base.loc[(b, v, t)])
        top = g.sort_values(["utility", "candidate"], ascending=[False, True]).iloc[0]
        rows.append({"benchmark": b, "variant": v, "task_id": t,
                     "skill_free": free,
                     "random_injection": float(g.success_rate.mean()),
                     "forced_top1": float(top.success_rate),
                     "gated_top1": float(top.success_rate) if top.utility > threshold else free})
    per_query = pd.DataFrame(rows, columns=keys + list(RULES))
    out = []
    for (b, v), g in per_query.groupby(["benchmark", "variant"]):
        for r in RULES:
            out.append({"benchmark": b, "variant": v, "rule": r, "success_rate": float(g[r].mean()),
                        "n_queries": len(g)})
    return pd.DataFrame(out, columns=["benchmark", "variant", "rule", "success_rate", "n_queries"])


def utility_quintiles(utils: "Any", evals: "Any", n_bins: int = 5) -> "Any":
    """Mean measured gain over skill-free execution per utility quintile of the query-candidate pairs.

    Bins are equal-count by rank (so ties in utility never leave a bin empty); with fewer pairs than bins,
    there are as many bins as pairs."""
    import pandas as pd

    keys = ["benchmark", "variant", "task_id"]
    base = evals[evals.candidate == -1][keys + ["success_rate"]].rename(columns={"success_rate": "free"})
    pairs = utils[utils.eligible].merge(evals, on=keys + ["candidate"]).merge(base, on=keys)
    pairs["gain"] = pairs.success_rate - pairs.free
    out = []
    for (b, v), g in pairs.groupby(["benchmark", "variant"]):
        g = g.sort_values(["utility", "task_id", "candidate"]).reset_index(drop=True)
        k = min(n_bins, len(g))
        g["quintile"] = [1 + (i * k) // len(g) for i in range(len(g))]
        for q, h in g.groupby("quintile"):
            out.append({"benchmark": b, "variant": v, "quintile": int(q), "n_pairs": len(h),
                        "utility_min": float(h.utility.min()), "utility_max": float(h.utility.max()),
                        "utility_mean": float(h.utility.mean()), "mean_gain": float(h.gain.mean())})
    return pd.DataFrame(out, columns=["benchmark", "variant", "quintile", "n_pairs", "utility_min", "utility_max",
                                      "utility_mean", "mean_gain"])


def exploration_view(selections: "Any", post: "Any") -> "Any":
    """Figure 6: Scout vs Post-Scout success and injection rate per Scout-group kind.

    `selections`: SelectionRecord rows. `post`: Post-Scout episodes with benchmark, variant, task_id, success."""
    import pandas as pd

    keys = ["benchmark", "variant", "task_id"]
    p = post.groupby(keys).success.mean().rename("post_success").reset_index()
    s = selections.assign(scout_success=selections.n_success / selections.n_scouts,
                          injected=selections.selected >= 0).merge(p, on=keys, how="left")
    out = []
    for (b, v, k), g in s.groupby(["benchmark", "variant", "kind"]):
        out.append({"benchmark": b, "variant": v, "group": k, "n_queries": len(g),
                    "scout_success": float(g.scout_success.mean()),
                    "post_scout_success": float(g.post_success.mean()),
                    "injection_rate": float(g.injected.mean())})
    return pd.DataFrame(out, columns=["benchmark", "variant", "group", "n_queries", "scout_success",
                                      "post_scout_success", "injection_rate"])


# ----------------------------------------------------------------------------------------------------
# Pilot diagnostics (section 3, figures 2-3) from the validation experiment's downstream rollouts


def rollout_outcomes(free: Any, cand: Any, variants: Sequence[str]) -> Any:
    """One row per downstream rollout: benchmark, variant, task_id, candidate (-1: skill-free), k (the
    rollout's index within its condition), success. `free`/`cand` are evaluation episodes with a `k` column."""
    import pandas as pd

    cols = ["benchmark", "variant", "task_id", "candidate", "k", "success"]
    rows = [free.assign(variant=v, candidate=-1)[cols] for v in variants]
    if len(cand):
        parsed = cand.variant.str.extract(r"^(?P<v>[\w-]+)/eval/c(?P<c>\d+)$")
        rows.append(cand.assign(variant=parsed.v, candidate=parsed.c.astype(int))[cols])
    out = pd.concat(rows, ignore_index=True)
    return out.assign(success=out.success.astype(float)).sort_values(cols[:5], ignore_index=True)


def pilot_rollout_estimates(outcomes: Any, ks: Sequence[int] | None = None) -> Any:
    """Figure 2: rollout-based utility U_DR (eq. 4) at budget K per condition. Sign disagreement: two
    estimates from disjoint rollouts (indices 0..K-1 and K..2K-1) both non-zero with opposite signs, over
    all candidate-query pairs. Non-tied: a query's candidates do not all get the same estimate (first K
    rollouts). Cost: (M+1)K extra rollouts per query, against none for the likelihood utility."""
    import pandas as pd

    keys = ["benchmark", "variant", "task_id"]
    n_roll = int(outcomes.groupby(keys + ["candidate"]).k.nunique().min()) if len(outcomes) else 0
    ks = [k for k in (ks or [1, 2, 4, 8, 16]) if k <= n_roll]
    rows = []
    for (b, v), g in outcomes.groupby(["benchmark", "variant"]):
        for K in ks:
            def est(lo: int, hi: int) -> Any:
                m = g[(g.k >= lo) & (g.k < hi)].groupby(keys + ["candidate"]).success.mean().unstack("candidate")
                return m.drop(columns=-1).sub(m[-1], axis=0)  # U_DR per query x candidate

            first = est(0, K)
            n_m = first.notna().sum(axis=1)
            tied = first.nunique(axis=1) <= 1
            dis, pairs = math.nan, 0
            if 2 * K <= n_roll:
                second = est(K, 2 * K)
                both = first.notna() & second.notna()
                pairs = int(both.values.sum())
                opposite = (first * second < 0) & both
                dis = float(opposite.values.sum()) / pairs if pairs else math.nan
            rows.append({"benchmark": b, "variant": v, "K": K, "n_queries": len(first), "n_pairs_split": pairs,
                         "sign_disagreement": dis, "non_tied_fraction": float((~tied).mean()),
                         "extra_rollouts_per_query": float(((n_m + 1) * K).mean())})
    return pd.DataFrame(rows, columns=["benchmark", "variant", "K", "n_queries", "n_pairs_split", "sign_disagreement",
                                       "non_tied_fraction", "extra_rollouts_per_query"])


COMPETENCE_COLUMNS = ["benchmark", "variant", "probe_successes", "n_probes", "n_queries", "mean_effect",
                      "mean_effect_ci_low", "mean_effect_ci_high", "best_effect", "queries_with_mixed_signs"]


def split_probes(free: Any, n_eval: int) -> tuple[Any, Any]:
    """(baseline, probes) of the skill-free evaluation rollouts: rollouts k < n_eval are the skill-free baseline
    every candidate is compared with, k >= n_eval the competence probes of figure 3(b) (evaluation-only, never
    part of the baseline)."""
    return free[free.k < n_eval], free[free.k >= n_eval]


def pilot_competence(outcomes: Any, probes: Any, n_probes: int = 4, n_boot: int = 2000, seed: int = 0,
                     interval: str = "expanded") -> Any:
    """Figure 3: per query, candidate effects U_DR (each candidate's success rate minus the skill-free
    baseline's, `outcomes` as from `rollout_outcomes`) against skill-free competence: the number of
    successful probes among `n_probes` independent skill-free probe rollouts of the same policy (`probes`:
    benchmark, task_id, k, success; section 3: "four independent skill-free probe rollouts", never part
    of the baseline, which would tie a query's competence level to its baseline and bias every effect).
    Reports per competence level the mean effect with a 95 % query-level bootstrap interval, the best
    effect, and how many queries hold both a positive and a negative candidate (figure 3a). Queries with
    fewer than `n_probes` probes are left out."""
    import pandas as pd

    keys = ["benchmark", "variant", "task_id"]
    free = outcomes[outcomes.candidate == -1]
    same = free[["benchmark", "task_id", "k"]].drop_duplicates().merge(probes[["benchmark", "task_id", "k"]])
    if len(same):
        raise ValueError(f"probe rollouts {same.head(3).values.tolist()} are also skill-free baseline rollouts: "
                         "competence probes must be independent of the baseline")
    p = probes.sort_values("k").groupby(["benchmark", "task_id"]).head(n_probes)
    p = p.groupby(["benchmark", "task_id"]).success.agg(["sum", "size"]).reset_index()
    p = p[p["size"] >= n_probes].rename(columns={"sum": "probe_successes"})
    base = free.groupby(keys).success.mean().rename("free").reset_index()
    cand = outcomes[outcomes.candidate >= 0].groupby(keys + ["candidate"]).success.mean().reset_index()
    per = (cand.merge(base, on=keys).merge(p[["benchmark", "task_id", "probe_successes"]], on=["benchmark", "task_id"])
           .pivot_table(index=keys + ["free", "probe_successes"], columns="candidate", values="success")
           .reset_index())
    rows = []
    for (b, v), g in per.groupby(["benchmark", "variant"]):
        cands = g.drop(columns=keys + ["free", "probe_successes"]).to_numpy(float)
        for r in competence_levels(g.probe_successes.to_numpy(int), g.free.to_numpy(float), cands, n_boot, seed,
                                   interval):
            rows.append({"benchmark": b, "variant": v, "n_probes": n_probes, **r})
    return pd.DataFrame(rows, columns=COMPETENCE_COLUMNS)


def competence_levels(probe_successes: Any, free_rate: Any, cand_rate: Any, n_boot: int = 2000, seed: int = 0,
                      interval: str = "expanded") -> list[dict[str, Any]]:
    """Figure 3(b) from per-query arrays: probe successes (Q,), skill-free baseline success rate (Q,) and
    candidate success rates (Q, M; NaN where a candidate was not evaluated). One row per competence level."""
    import numpy as np

    levels = np.asarray(probe_successes, int)
    effects = np.asarray(cand_rate, float) - np.asarray(free_rate, float)[:, None]
    has = ~np.isnan(effects).all(axis=1)
    rows = []
    for level in sorted(set(levels[has].tolist())):
        e = effects[has & (levels == level)]
        mean = np.nanmean(e, axis=1)
        lo, hi = bootstrap_interval(mean, n_boot, seed, interval)
        rows.append({"probe_successes": int(level), "n_queries": len(e), "mean_effect": float(mean.mean()),
                     "mean_effect_ci_low": lo, "mean_effect_ci_high": hi,
                     "best_effect": float(np.nanmax(e, axis=1).mean()),
                     "queries_with_mixed_signs": int(((e > 0).any(axis=1) & (e < 0).any(axis=1)).sum())})
    return rows


# ----------------------------------------------------------------------------------------------------
# Configuration (the `scaffold:` section, checked by schemas/scaffold.schema.yaml)


@dataclass(frozen=True)
class Ablation:
    """A selection ablation of table 3 on top of utility variant `of`."""

    of: str = "grp"
    selection: str = "utility"  # utility | random | shuffled (see select_with)
    gate: bool = True  # False: inject the best card even when its utility is not positive
    # Trained as a chain (scaffold.training.ablations): table 3's "no Generator loss + random selection"
    generator_learning: bool = True


# ----------------------------------------------------------------------------------------------------
# Training settings (table 5) and the bootstrap interval the tables use


@dataclass(frozen=True)
class TrainSettings:
    """Table 5's settings that one update reads (config `scaffold.training`; `check_training` refuses the
    values it cannot honour)."""

    learning_rate: float = 1e-6
    adam_betas: tuple[float, float] = (0.9, 0.98)
    clip_low: float = 0.2
    clip_high: float = 0.28
    kl_coef: float = 0.0
    lambda_gen: float = 0.1
    generator_entropy_coef: float = 0.002
    executor_entropy_coef: float = 0.0
    generator_learning: bool = True
    queries_per_step: int = 1  # TRL groups (queries) per optimizer step
    micro_batch_size: int | None = None  # sequences per forward/backward (gradient accumulation); None: a step's all
    max_sequence_tokens: int | None = None  # longest sample (prompt + completion) an update accepts

    @classmethod
    def from_config(cls, training: dict[str, Any]) -> "TrainSettings":
        keys = {f for f in cls.__dataclass_fields__}
        t = {k: v for k, v in training.items() if k in keys}
        if "adam_betas" in t:
            t["adam_betas"] = tuple(t["adam_betas"])
        if "query_batch_size" in training:
            t["queries_per_step"] = int(training["query_batch_size"])
        return cls(**t)

    def accumulation(self, group_size: int) -> tuple[int, int]:
        """(sequences per micro-batch, micro-batches per optimizer step) for groups of `group_size`."""
        per_step = group_size * self.queries_per_step
        micro = self.micro_batch_size or per_step
        if per_step % micro:
            raise ValueError(f"config key scaffold.training.micro_batch_size: {micro} does not divide the "
                             f"{per_step} sequences of an optimizer step (query_batch_size x (N + L + M))")
        return micro, per_step // micro


# Keys of `scaffold.training` the workflow reads (the rules: model, steps, query_batch_size, inject,
# cohort_iterations, keep_optimizer_states; an update: TrainSettings) or checks (`check_training`).
TRAINING_KEYS = ("model", "steps", "optimizer", "learning_rate", "adam_betas", "query_batch_size",
                 "global_batch_size", "clip_low", "clip_high", "kl_coef", "executor_entropy_coef",
                 "max_sequence_tokens", "micro_batch_size", "lambda_gen", "generator_entropy_coef",
                 "generator_learning", "inject", "cohort_iterations", "keep_optimizer_states", "baseline",
                 "ablations")


def check_training(training: dict[str, Any], n_scouts: int, n_post: int, n_candidates: int) -> None:
    """Refuse, before any work starts, every `scaffold.training` value the update cannot honour, naming its key.

    optimizer: only adam (the update's AdamW with weight decay 0 is Adam; no weight decay is configurable).
    global_batch_size: the Executor trajectories of one optimizer step, query_batch_size x (N + L) (table 5's
    128 = 16 x (4 + 4)); the update takes one step per iteration, so any other value is refused.
    cohort_iterations: at most steps. micro_batch_size must divide a step's query_batch_size x (N + L + M)."""
    t = dict(training or {})
    unknown = sorted(set(t) - set(TRAINING_KEYS))
    if unknown:
        raise ValueError(f"config key scaffold.training.{unknown[0]}: not a training setting this workflow reads")
    if t.get("optimizer", "adam") != "adam":
        raise ValueError(f"config key scaffold.training.optimizer: {t['optimizer']!r} is not implemented; the update "
                         "uses Adam (torch AdamW with weight decay 0, table 5)")
    qbs = int(t.get("query_batch_size", 1))
    if "global_batch_size" in t and int(t["global_batch_size"]) != qbs * (n_scouts + n_post):
        raise ValueError(f"config key scaffold.training.global_batch_size: {t['global_batch_size']} is not "
                         f"implemented; an update takes one optimizer step over an iteration's query_batch_size x "
                         f"(N + L) = {qbs} x {n_scouts + n_post} = {qbs * (n_scouts + n_post)} Executor trajectories")
    steps = int(t.get("steps", 1))
    if int(t.get("cohort_iterations", 1)) > steps:
        raise ValueError(f"config key scaffold.training.cohort_iterations: {t['cohort_iterations']} exceeds steps "
                         f"({steps}); the later checkpoints must come after every cohort iteration")
    TrainSettings.from_config(t).accumulation(n_scouts + n_post + n_candidates)


INTERVALS = ("expanded", "percentile")


def bootstrap_interval(x: Any, n_boot: int = 10000, seed: int = 0, interval: str = "expanded",
                       level: float = 0.95) -> tuple[float, float]:
    """A `level` bootstrap interval for the mean of `x` (resampling its elements, the queries).

    percentile: the plain percentile interval, which is too narrow for few queries (about 93 % coverage at
    16, 90 % at 8). expanded: the same bootstrap distribution read at widened percentiles, alpha' / 2 =
    Phi(-sqrt(n / (n - 1)) t_{n-1}(1 - alpha / 2)) (Hesterberg 2015, "What teachers should know about the
    bootstrap"), which restores the nominal coverage for small n."""
    import numpy as np
    from scipy.special import stdtrit  # Student t quantile (scipy.stats takes a second to import)

    if interval not in INTERVALS:
        raise ValueError(f"config key scaffold.bootstrap_interval: {interval!r}; allowed: {', '.join(INTERVALS)}")
    x = np.asarray(x, float)
    n = len(x)
    if n < 2:  # one query says nothing about the spread
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    boots = x[rng.integers(0, n, size=(n_boot, n))].mean(axis=1)
    tail = (1 - level) / 2
    if interval == "expanded":
        z = math.sqrt(n / (n - 1)) * float(stdtrit(n - 1, 1 - tail))
        tail = 0.5 * math.erfc(z / math.sqrt(2))  # Phi(-z)
    lo, hi = np.percentile(boots, [100 * tail, 100 * (1 - tail)])
    return float(lo), float(hi)


@dataclass(frozen=True)
class HeldoutConfig:
    """Held-out evaluation (appendix A.1): every policy played skill-free on each benchmark's held-out pools.

    `splits`: benchmark -> held-out split -> number of tasks (None: the whole pool, as the paper evaluates);
    a benchmark not listed is evaluated on its own `test` split. A split is `test` (the benchmark's sampler:
    ALFWorld's valid_unseen with the official data) or a pool named in `scaffold.splits` (ScienceWorld's
    test_id / test_ood). `rollouts`: skill-free rollouts per task and policy (table 6's Pass@k needs k).
    `every`: the checkpoints evaluated, 0, every, 2 x every, ... and always the last."""

    splits: dict[str, dict[str, int | None]] = field(default_factory=dict)
    rollouts: int = 1
    every: int = 1

    def of(self, benchmark: str) -> dict[str, int | None]:
        return self.splits.get(benchmark) or {"test": None}

    def checkpoints(self, steps: int) -> list[int]:
        return sorted({k for k in range(0, steps + 1, self.every)} | {steps})


# The plain-GRPO training chain (table 1's GRPO row, the in-house baseline): the same query batches, Scouts and
# Post-Scouts as a SkillScaffold chain, with no Generator and no injection, so the Executor group is N + L
# skill-free trajectories.
BASELINE = "grpo"


@dataclass(frozen=True)
class Chain:
    """A GRPO training chain: `of` the utility variant whose cards it generates and scores (None: plain GRPO, no
    skill pathway at all); `generator_learning` / `inject` as in table 3's training ablations."""

    name: str
    of: str | None
    generator_learning: bool = True
    inject: bool = True
    selection: str = "utility"  # a trained selection ablation (Ablation)
    gate: bool = True

    @property
    def method(self) -> str:
        """The row label of the held-out tables."""
        if self.of is None:
            return "GRPO"
        label = f"SkillScaffold ({self.of})"
        if self.selection != "utility":
            label += f" {self.selection} selection"
        if not self.gate:
            label += " w/o gate"
        if not self.generator_learning:
            label += " w/o Generator learning"
        if not self.inject:
            label += " w/o injection"
        return label


@dataclass(frozen=True)
class ScaffoldConfig:
    benchmarks: tuple[str, ...]  # benchmark instance names from `benchmarks:`
    variants: tuple[str, ...] = ("grp",)
    n_queries: int = 2
    split: str = "train"
    n_scouts: int = 4  # N
    n_candidates: int = 4  # M
    n_post: int = 4  # L
    n_eval: int = 2  # downstream evaluation rollouts per condition (validation only)
    n_probes: int = 4  # figure 3(b): skill-free probe rollouts per query, separate from the n_eval baseline
    bootstrap_interval: str = "expanded"  # expanded | percentile (bootstrap_interval)
    threshold: float = 0.0
    evidence_max_chars: int = 6000
    evidence_max_tokens: int | None = None  # the budget in the Generator's tokens instead (evidence_max_chars unused)
    generator_max_tokens: int = 600
    generator_decoding: str = "auto"  # auto | grammar | json_schema | none (see generator_request)
    generator_prompts: dict[str, str] = field(default_factory=dict)  # benchmark env -> template file
    card: CardFormat = CardFormat()
    scorer_backend: str = "auto"  # auto | transformers | vllm
    scorer_model: str | None = None  # GGUF path or shipped name (transformers); served model id (vllm)
    scorer_batch_tokens: int = 8192
    # Selection ablations (table 3): name -> Ablation; each reuses its base variant's cards and utilities.
    ablations: dict[str, "Ablation"] = field(default_factory=dict)
    # ScienceWorld query pools per benchmark and split (appendix A.1): split -> ["task@partition", ...].
    splits: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    executor: dict[str, dict[str, Any]] = field(default_factory=dict)  # benchmark -> {max_tokens, temperature}
    training: dict[str, Any] = field(default_factory=dict)  # table 5's RL settings, read by the GRPO stage
    webshop_data: str | None = None  # WebShop's data folder: the category split of appendix A.1
    heldout: HeldoutConfig = HeldoutConfig()  # the held-out evaluation of every policy (tables 1-3, 6)

    @property
    def selection_variants(self) -> tuple[str, ...]:
        """Every variant the validation experiment selects and runs Post-Scouts for: the utility variants, then the
        ablations (but those without Generator learning, which differ only in training)."""
        return self.variants + tuple(n for n, a in self.ablations.items() if a.generator_learning)

    def ablation(self, variant: str) -> "Ablation":
        return self.ablations.get(variant) or Ablation(of=variant)

    @property
    def chains(self) -> tuple[Chain, ...]:
        """The GRPO training chains: one per utility variant (with table 3's training switches), then plain GRPO
        unless `training.baseline` is false."""
        t = self.training
        learn, inject = bool(t.get("generator_learning", True)), bool(t.get("inject", True))
        out = tuple(Chain(v, v, learn, inject) for v in self.variants)
        # table 3's selection ablations trained (`training.ablations`), each on its utility variant's cards
        out += tuple(Chain(n, a.of, learn and a.generator_learning, inject, a.selection, a.gate)
                     for n, a in ((n, self.ablations[n]) for n in t.get("ablations", ())))
        return out + ((Chain(BASELINE, None, False, False),) if t.get("baseline", True) else ())

    def chain(self, name: str) -> Chain:
        return next(c for c in self.chains if c.name == name)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "ScaffoldConfig":
        s = dict(config.get("scaffold") or {})
        card = s.pop("card", {}) or {}
        scorer = s.pop("scorer", {}) or {}
        names = s.pop("benchmarks", None) or list(config.get("benchmarks", {}))
        unknown = [b for b in names if b not in config.get("benchmarks", {})]
        if unknown:
            raise ValueError(f"config key scaffold.benchmarks: {', '.join(unknown)} not in benchmarks "
                             f"({', '.join(config.get('benchmarks', {}))})")
        bad = [v for v in s.get("variants", ["grp"]) if v not in VARIANTS]
        if bad:
            raise ValueError(f"config key scaffold.variants: {bad} not allowed; allowed: {', '.join(VARIANTS)}")
        ablations = {name: Ablation(**a) for name, a in (s.pop("ablations", {}) or {}).items()}
        for name, a in ablations.items():
            if name in VARIANTS or a.of not in s.get("variants", ["grp"]):
                raise ValueError(f"config key scaffold.ablations.{name}: the name must differ from grp/anc and "
                                 f"'of' ({a.of}) must be one of scaffold.variants")
        heldout = s.pop("heldout", {}) or {}
        s["heldout"] = HeldoutConfig({b: dict(d) for b, d in (heldout.get("splits") or {}).items()},
                                     int(heldout.get("rollouts", 1)), int(heldout.get("every", 1)))
        for name in (s.get("training") or {}).get("ablations", ()):
            if name not in ablations:
                raise ValueError(f"config key scaffold.training.ablations: {name!r} is not in scaffold.ablations")
            if name[-1].isdigit() or name == BASELINE:  # an instance is <benchmark>@<chain><iteration>
                raise ValueError(f"config key scaffold.training.ablations: a trained ablation's name may not end in a "
                                 f"digit or be {BASELINE!r} ({name!r})")
        splits = {b: {k: tuple(v) for k, v in d.items()} for b, d in (s.pop("splits", {}) or {}).items()}
        for b in list(splits) + list(s.get("executor", {}) or {}):
            if b not in names:
                raise ValueError(f"config key scaffold.splits/executor: {b!r} is not one of scaffold.benchmarks")
        s["splits"] = splits
        fmt = CardFormat(tuple(card.get("headings", CardFormat.headings)), card.get("max_words", 400),
                         card.get("min_words", 20))
        out = cls(benchmarks=tuple(names), variants=tuple(s.pop("variants", ("grp",))), card=fmt,
                  scorer_backend=scorer.get("backend", "auto"), scorer_model=scorer.get("model"),
                  scorer_batch_tokens=scorer.get("batch_tokens", 8192),
                  generator_prompts=dict(s.pop("generator_prompts", {}) or {}), ablations=ablations, **s)
        out.generator_request((config.get("llm") or {}).get("backend", "embedded"))  # fails early if impossible
        if out.bootstrap_interval not in INTERVALS:
            raise ValueError(f"config key scaffold.bootstrap_interval: {out.bootstrap_interval!r}; allowed: "
                             f"{', '.join(INTERVALS)}")
        check_training(out.training, out.n_scouts, out.n_post, out.n_candidates)
        check_heldout(out, config)
        if out.evidence_max_tokens and (config.get("llm") or {}).get("backend") == "openai":
            raise ValueError("config key scaffold.evidence_max_tokens: no tokenizer for llm.backend openai; "
                             "use scaffold.evidence_max_chars")
        return out

    def generator_request(self, backend: str) -> "GeneratorRequest":
        return generator_request(self.card, self.generator_decoding, backend, self.generator_max_tokens)


# ----------------------------------------------------------------------------------------------------
# Steps the workflow scripts call


def sample_queries(bench: Any, cfg: ScaffoldConfig, seed: int) -> list[str]:
    """The fixed queries of `bench`: from `scaffold.splits[bench][split]` when given (ScienceWorld
    "task@partition" pools, drawn uniformly from their union as the paper trains on it), else the
    benchmark's own sampler for `split` (train | test)."""
    return split_tasks(bench, cfg, cfg.split, cfg.n_queries, seed, key="scaffold.split")


def split_pool(bench: Any, cfg: ScaffoldConfig, split: str, key: str) -> list[str] | None:
    """Every task id of a pool named in `scaffold.splits[bench]` (None: `split` is the benchmark's own)."""
    spec = cfg.splits.get(bench.name, {}).get(split)
    if spec is None:
        if split not in ("train", "test"):
            raise ValueError(f"config key {key}: {split!r} is neither train/test nor a split in "
                             f"scaffold.splits.{bench.name}")
        return None
    if bench.env != "scienceworld":
        raise ValueError(f"config key scaffold.splits.{bench.name}: task pools exist for scienceworld only")
    # lazy: the benchmarks extra (scienceworld), for ScienceWorld's task pools only
    from skillrepro.benchmarks.scienceworld import TaskRef, partitions

    pool = []
    for item in spec:
        task, _, part = item.partition("@")
        if part not in ("train", "dev", "test"):
            raise ValueError(f"config key scaffold.splits.{bench.name}.{split}: {item!r} is not 'task@train|dev|test'")
        pool += [TaskRef(task, v).task_id for v in partitions(task)[part]]
    return pool


def split_tasks(bench: Any, cfg: ScaffoldConfig, split: str, n: int | None, seed: int, key: str) -> list[str]:
    """`n` tasks of `split` drawn with `seed` (None: the whole pool, in a seeded order)."""
    pool = split_pool(bench, cfg, split, key)
    if pool is None:
        b = load_benchmark(bench)
        if n is None:
            n = b.pool_size(split)
            if n is None:
                raise ValueError(f"config key {key}: {bench.name} cannot tell the size of its {split} pool "
                                 "without its data; give the number of tasks")
        return b.sample_tasks(split, n, seed)
    if n is None:
        n = len(pool)
    if n > len(pool):
        raise ValueError(f"config key {key}: scaffold.splits.{bench.name}.{split} has {len(pool)} tasks; asked for {n}")
    return random.Random(seed).sample(pool, n)


def check_heldout(cfg: ScaffoldConfig, config: dict[str, Any]) -> None:
    """Refuse, before any work starts, a held-out split that is not held out: the training split itself, an
    unknown split, or a ScienceWorld pool sharing a task@partition with the training pool."""
    h = cfg.heldout
    if h.rollouts < 1 or h.every < 1:
        raise ValueError("config key scaffold.heldout.rollouts/every: must be at least 1")
    for b, splits in h.splits.items():
        if b not in cfg.benchmarks:
            raise ValueError(f"config key scaffold.heldout.splits.{b}: not one of scaffold.benchmarks")
        if not splits:
            raise ValueError(f"config key scaffold.heldout.splits.{b}: no split")
    for b in cfg.benchmarks:
        train = set(cfg.splits.get(b, {}).get(cfg.split, ()))
        for split, n in h.of(b).items():
            key = f"scaffold.heldout.splits.{b}.{split}"
            if split == cfg.split or split == "train":
                raise ValueError(f"config key {key}: the training split is not held out")
            if split != "test" and split not in cfg.splits.get(b, {}):
                raise ValueError(f"config key {key}: neither test nor a split in scaffold.splits.{b}")
            shared = train & set(cfg.splits.get(b, {}).get(split, ()))
            if shared:
                raise ValueError(f"config key {key}: {sorted(shared)} is also in the training pool "
                                 f"scaffold.splits.{b}.{cfg.split}")
            if n is not None and int(n) < 1:
                raise ValueError(f"config key {key}: {n} tasks")


# ALFRED's task type (an official game's folder name starts with it) -> the benchmark's short name, which its
# generated games carry in their ids (gen:<short name>:<seed>); table 1's Pick, Look, Clean, Heat, Cool, Pick2.
ALFRED_TYPES = {"pick_and_place_simple": "pick_and_place", "look_at_obj_in_light": "look_at_obj_in_light",
                "pick_clean_then_place_in_recep": "clean", "pick_heat_then_place_in_recep": "heat",
                "pick_cool_then_place_in_recep": "cool", "pick_two_obj_and_place": "pick_two"}


def task_category(env: str, task_id: str) -> str:
    """The task category table 1 breaks success down by: ALFWorld's task type (pick, heat, ..., from the id),
    ScienceWorld's task name; "all" where a benchmark has none (BabyAI)."""
    task_id = str(task_id)
    if env == "alfworld":
        if task_id.startswith("gen:"):
            return task_id.split(":")[1]
        long_type = task_id.split("/")[1].split("-")[0] if task_id.count("/") >= 2 else ""
        return ALFRED_TYPES.get(long_type, "other")
    if env == "scienceworld":
        return task_id.rpartition(":")[0] or "all"
    return "all"


def parse_instance(name: str) -> tuple[str, str | None, int]:
    """(benchmark, training-chain variant or None, iteration) of a scaffold instance: `babyai` (the validation
    experiment) or `babyai@grp3` (iteration 3 of grp's GRPO chain)."""
    bench, _, chain = name.partition("@")
    if not chain:
        return bench, None, 0
    m = re.fullmatch(r"([a-z][a-z0-9_-]*[a-z_-])(\d+)", chain) or re.fullmatch(r"([a-z])(\d+)", chain)
    if not m:
        raise ValueError(f"scaffold instance {name!r}: expected <benchmark>@<variant><iteration>")
    return bench, m.group(1), int(m.group(2))


def training_iteration(cfg: ScaffoldConfig, chain: str | None, k: int) -> ScaffoldConfig:
    """The settings of iteration k of a GRPO chain: a batch of `training.query_batch_size` queries, scored by
    its own checkpoint (a configured scorer model is llm.model's, so it serves iteration 0 only)."""
    from dataclasses import replace

    if chain is None:
        return cfg
    return replace(cfg, n_queries=int(cfg.training.get("query_batch_size", cfg.n_queries)),
                   scorer_model=cfg.scorer_model if k == 0 else None)


def executor_llm(llm: Any, cfg: ScaffoldConfig, benchmark: str) -> Any:
    """The actor's LLM settings on `benchmark` (table 5 has tokens per turn per benchmark)."""
    from dataclasses import replace

    return replace(llm, **cfg.executor.get(benchmark, {}))


def episode_variant(variant: str, phase: str, candidate: int = -1) -> str:
    """Episode.variant of scaffold episodes: scout | eval/free | {grp,anc}/post | {grp,anc}/eval/c{j}."""
    if phase == "scout":
        return "scout"
    if phase == "eval_free":
        return "eval/free"
    if phase == "post":
        return f"{variant}/post"
    return f"{variant}/eval/c{candidate}"


def phase_seed(llm: Any, phase: str, index: int) -> Any:
    """Distinct sampling seeds, so the N Scouts (and L Post-Scouts, M candidates) of a query differ."""
    from dataclasses import replace

    base = {"scout": 0, "post": 1000, "eval": 2000, "generate": 3000, "cohort": 4000, "heldout": 5000}[phase]
    return replace(llm, seed=llm.seed + base + index)


@contextmanager
def policy_server(llm: Any, policy: str | None):
    """Serve a GRPO checkpoint's policy for this job (`llm.model` is its serving form); none for `policy` ""
    (the run's shared server plays llm.model)."""
    if not policy:
        yield
        return
    with own_server(llm):
        yield


def play(*, bench: Any, llm: Any, library_dir: str | Path, plan: Sequence[tuple[str, str, str]], run_id: str,
         cycle: int, out_dir: str | Path, wall_s: float = 1800.0, logger: Any = None, policy: str = "",
         split: str = "train") -> Path:
    """Play (task_id, notes, episode variant) items and merge their records into `out_dir`.

    Items with the same notes share one runner batch (the runner takes one notes text per batch).
    `policy`: a GRPO checkpoint that plays them on a server of this job's own. `split`: Episode.split (test for
    the held-out evaluation)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir = Path(out_dir)
    groups: dict[tuple[str, str], list[str]] = {}
    for task_id, notes, variant in plan:
        groups.setdefault((notes, variant), []).append(task_id)
    parts = []
    with policy_server(llm, policy if groups else ""):
        for g, ((notes, variant), tasks) in enumerate(groups.items()):
            spec = EpisodeSpec(run_id, bench.name, "skillscaffold", variant, llm.seed, split, cycle, 0)
            part = out_dir / f"part{g:03d}"
            run_batch(bench=bench, llm=llm, library_dir=library_dir, task_ids=tasks, spec=spec, out_dir=part,
                      wall_s=wall_s, notes=notes, logger=logger)
            parts.append(part)
    for name, cls in RECORD_TABLES.items():
        tables = [pq.read_table(p / f"{name}.parquet") for p in parts]
        table = pa.concat_tables(tables) if tables else pa.Table.from_pylist([], schema=record_schema(cls))
        write_table(out_dir / f"{name}.parquet", table)
    return out_dir


def actor_system_prompt(bench: Any, llm: Any, library_dir: str | Path, task_id: str, notes: str) -> str:
    """The system prompt the actor gets for `task_id` with `notes` (a skill card, or "" for none)."""
    benchmark = load_benchmark(bench)
    library = skills.Library.load(library_dir)
    env = benchmark.make(task_id)
    try:
        tools = primitive_tools(env) + skill_tools(library, env, lambda _frame: None, SandboxPolicy())
        actor = Actor(None, benchmark.describe(), call_budget(bench), tool_calling=llm.tool_calling,
                      prompts=Prompts(), notes=notes)  # type: ignore[arg-type]
        return actor.system_prompt(tools)
    finally:
        env.release()


def score_contexts(scorer: Any, scouts: Sequence[Trajectory], contexts: dict[int, str], *, bench: Any, llm: Any,
                   library_dir: str | Path, benchmark: str, variant: str) -> list[ScoreRecord]:
    """l(c; tau) for every Scout and every context (candidate index -> notes; -1 is no skill).

    The skill-free system prompt is rebuilt and must equal the recorded one: if the actor's prompt changed
    since the Scouts ran, candidate contexts would differ from the Scouts' in more than the skill."""
    # lazy: the scorer extra (torch, transformers)
    from skillrepro.llm.scorer import ScoringError, score_conversations

    prompts: dict[tuple[str, str], str] = {}  # building one makes an env: once per task and context

    def prompt(task_id: str, notes: str) -> str:
        if (task_id, notes) not in prompts:
            prompts[(task_id, notes)] = actor_system_prompt(bench, llm, library_dir, task_id, notes)
        return prompts[(task_id, notes)]

    convs, keys = [], []
    for t in scouts:
        if prompt(t.task_id, "") != t.messages[0]["content"]:
            raise ScoringError(f"episode {t.episode_id}: the recorded system prompt differs from the rebuilt "
                               "skill-free one; rerun the Scouts with the current actor prompt")
        for c, notes in contexts.items():
            convs.append(t.with_system(prompt(t.task_id, notes)))
            keys.append((t, c))
    scores = score_conversations(scorer, convs)
    return [ScoreRecord(benchmark, t.task_id, t.episode_id, variant, c, s.n_tokens, s.sum_logprob, s.mean_logprob,
                        s.n_forward_tokens, scorer.name, scorer.model)
            for (t, c), s in zip(keys, scores)]


def scorer_backend(cfg: ScaffoldConfig, llm: Any) -> str:
    if cfg.scorer_backend == "auto":
        return "vllm" if llm.backend == "vllm" else "transformers"
    return cfg.scorer_backend


def load_scorer(cfg: ScaffoldConfig, llm: Any) -> Any:
    """The configured scorer: transformers on the CPU from a GGUF file, or the vLLM server the run uses."""
    backend = scorer_backend(cfg, llm)
    # lazy: the scorer extra (torch, transformers)
    from skillrepro.llm import scorer as sc

    if backend == "transformers":
        model = cfg.scorer_model or llm.model
        if llm.backend == "openai" and not cfg.scorer_model:
            raise ValueError("config key scaffold.scorer.model: an API model cannot be scored; name a GGUF file "
                             "or a shipped model for the CPU scorer")
        return sc.TransformersScorer(resolve(model), batch_tokens=cfg.scorer_batch_tokens, threads=llm.threads,
                                     model_name=model)
    if backend == "vllm":
        import os

        from transformers import AutoTokenizer

        served = cfg.scorer_model or (MODELS[llm.model].hf_id if llm.model in MODELS else llm.model)
        url = llm.base_url or os.environ.get(URL_ENV)
        if not url:
            raise ValueError(f"scorer backend vllm: no server URL (llm.base_url or ${URL_ENV})")
        return sc.VLLMScorer(url, served, AutoTokenizer.from_pretrained(served), timeout_s=llm.timeout_s)
    raise ValueError(f"config key scaffold.scorer.backend: {backend!r}; allowed: auto, transformers, vllm")


def generate_candidates(client_for: Any, ev: EvidenceRecord, template: GeneratorTemplate, fmt: CardFormat,
                        n: int, max_tokens: int, request: GeneratorRequest = GeneratorRequest("", {}),
                        count: Callable[[str], int] | None = None) -> tuple[list[CandidateRecord], list[Any]]:
    """M independently sampled cards for one query; `client_for(j)` gives the LLM client for sample j.
    `request` adds the pre-fill and constrained decoding (`generator_request`); sectioned decoding counts the
    headings' tokens with `count` (default: `server_token_counter` of sample 0's server). A card's call_id is its
    first request's."""
    if ev.skip:
        return [], []
    messages = template.messages(ev, fmt)
    if request.prefill:
        messages.append({"role": "assistant", "content": request.prefill})
    cands, calls = [], []
    if request.parts and count is None:
        c = client_for(0)
        count = server_token_counter(c.base_url, c.cfg.backend, c.cfg.model)
    for j in range(n):
        session = f"scaffold/{ev.benchmark}/{ev.variant}/{ev.task_id}/gen{j}"
        if request.parts:
            text, records = sectioned_reply(client_for(j), messages, request, max_tokens, count, session)
        else:
            reply = client_for(j).chat(messages, role="generator", session_id=session, max_tokens=max_tokens,
                                       extra_body=request.extra_body or None)
            text, records = request.reply_text(reply.text), [reply.record]
        chk = check_card(text, fmt)
        cands.append(CandidateRecord(ev.benchmark, ev.variant, ev.task_id, j, text, chk.card, chk.name,
                                     chk.n_words, chk.valid, "; ".join(chk.problems), records[0].call_id))
        calls += records
    return cands, calls


def read_rows(path: str | Path, cls: type) -> list[Any]:
    return read_records(path, cls)


def eval_table(free: Any, cand: Any, variants: Sequence[str]) -> Any:
    """Downstream success rates per (benchmark, variant, task_id, candidate) from evaluation episodes.

    `free`: skill-free evaluation episodes (shared by the variants, candidate -1); `cand`: candidate
    episodes whose Episode.variant is '{variant}/eval/c{j}'."""
    import pandas as pd

    cols = ["benchmark", "variant", "task_id", "candidate", "success_rate", "n_rollouts"]
    rows = []
    for (b, t), g in free.groupby(["benchmark", "task_id"]):
        for v in variants:
            rows.append({"benchmark": b, "variant": v, "task_id": t, "candidate": -1,
                         "success_rate": float(g.success.mean()), "n_rollouts": len(g)})
    if len(cand):
        parsed = cand.variant.str.extract(r"^(?P<v>[\w-]+)/eval/c(?P<c>\d+)$")
        if parsed.v.isna().any():
            raise ValueError(f"evaluation episodes with an unexpected variant: {sorted(cand.variant[parsed.v.isna()].unique())}")
        cand = cand.assign(v=parsed.v, c=parsed.c.astype(int))
        for (b, v, t, c), g in cand.groupby(["benchmark", "v", "task_id", "c"]):
            rows.append({"benchmark": b, "variant": v, "task_id": t, "candidate": int(c),
                         "success_rate": float(g.success.mean()), "n_rollouts": len(g)})
    return pd.DataFrame(rows, columns=cols)


# ----------------------------------------------------------------------------------------------------
# Held-out evaluation (appendix A.1; tables 1, 2, 3 and 6, figures 1 and 7)

HELDOUT_COLUMNS = ["benchmark", "split", "category", "chain", "method", "checkpoint", "n_tasks", "n_episodes",
                   "success_pct"]


def heldout_variant(split: str, rollout: int) -> str:
    """Episode.variant of a held-out episode: heldout/{split}/r{rollout}."""
    return f"heldout/{split}/r{rollout}"


def parse_heldout_variant(variant: Any) -> Any:
    """(split, rollout) columns of a Series of held-out Episode.variant values."""
    parsed = variant.str.extract(r"^heldout/(?P<split>[\w-]+)/r(?P<rollout>\d+)$")
    if parsed.split.isna().any():
        raise ValueError(f"held-out episodes with an unexpected variant: {sorted(variant[parsed.split.isna()].unique())}")
    return parsed.assign(rollout=parsed.rollout.astype(int))


def _with_split(episodes: Any) -> Any:
    """Held-out episodes with their held-out split and rollout index (from Episode.variant; Episode.split is just
    "test" for every one of them)."""
    return episodes.drop(columns=["split"], errors="ignore").reset_index(drop=True).join(
        parse_heldout_variant(episodes.variant.reset_index(drop=True)))


def heldout_policies(chains: Sequence[Chain], checkpoints: Sequence[int]) -> list[tuple[str, str, int]]:
    """(policy folder, chain, checkpoint) of every evaluated policy: `base` (llm.model, checkpoint 0 of every
    chain, played once) and `{chain}/ckpt{k}`."""
    return [("base", "", 0)] + [(f"{c.name}/ckpt{k}", c.name, k) for c in chains for k in checkpoints if k > 0]


def heldout_table(episodes: Any, env_of: dict[str, str], chains: Sequence[Chain]) -> Any:
    """Success per benchmark x split x category x policy, long form. `episodes`: held-out Episode rows with
    `chain` ("" for the base model) and `checkpoint`. Category `all` pools a split's episodes, split `all` a
    benchmark's held-out episodes (the paper's ScienceWorld Avg. is the pooled 230 + 155 episodes: 77.1 from
    96.2 and 48.8). The base model's row stands for checkpoint 0 of every chain."""
    import pandas as pd

    e = _with_split(episodes)
    e = e.assign(category=[task_category(env_of[b], t) for b, t in zip(e.benchmark, e.task_id)],
                 success=e.success.astype(float))
    label = {c.name: c.method for c in chains}
    rows = []

    def add(g: Any, b: str, split: str, cat: str) -> None:
        for (chain, k), h in g.groupby(["chain", "checkpoint"]):
            rows.append({"benchmark": b, "split": split, "category": cat, "chain": chain,
                         "method": label.get(chain, "base model"), "checkpoint": int(k),
                         "n_tasks": h.task_id.nunique(), "n_episodes": len(h), "success_pct": 100 * h.success.mean()})

    for b, g in e.groupby("benchmark"):
        add(g, b, "all", "all")
        for split, h in g.groupby("split"):
            add(h, b, split, "all")
            if h.category.nunique() > 1:
                for cat, c in h.groupby("category"):
                    add(c, b, split, cat)
    return pd.DataFrame(rows, columns=HELDOUT_COLUMNS)


def final_rows(table: Any) -> Any:
    """The rows of each chain's last evaluated checkpoint, and the base model's."""
    last = table.groupby("chain").checkpoint.transform("max")
    return table[table.checkpoint == last]


def table_by_category(table: Any) -> Any:
    """Tables 1 (WebShop, ALFWorld): success per task category and overall, one row per benchmark x split x
    method at the final checkpoints; category columns are the benchmark's own (NaN elsewhere)."""
    t = final_rows(table[table.split != "all"])
    wide = t.pivot_table(index=["benchmark", "split", "method", "checkpoint"], columns="category",
                         values="success_pct").reset_index()
    n = t[t.category == "all"].set_index(["benchmark", "split", "method"]).n_tasks
    wide["n_tasks"] = [n.get((b, s, m)) for b, s, m in zip(wide.benchmark, wide.split, wide.method)]
    cats = sorted(c for c in wide.columns if c not in ("benchmark", "split", "method", "checkpoint", "all", "n_tasks"))
    wide = wide.rename(columns={"all": "avg"})
    return wide[["benchmark", "split", "method", "checkpoint", "n_tasks"] + cats + ["avg"]]


def table_by_split(table: Any) -> Any:
    """Table 2 (ScienceWorld ID / OOD): success per held-out split and pooled (avg), final checkpoints."""
    t = final_rows(table[table.category == "all"])
    wide = t.pivot_table(index=["benchmark", "method", "checkpoint"], columns="split", values="success_pct").reset_index()
    splits = sorted(c for c in wide.columns if c not in ("benchmark", "method", "checkpoint", "all"))
    return wide.rename(columns={"all": "avg"})[["benchmark", "method", "checkpoint"] + splits + ["avg"]]


def table_variants(table: Any, chains: Sequence[Chain]) -> Any:
    """Table 3's metric: each trained chain's pooled held-out success at its last checkpoint, per benchmark,
    beside the chain's settings (which ablation it is)."""
    import pandas as pd

    t = final_rows(table[(table.split == "all") & (table.chain != "")])
    by = {c.name: c for c in chains}
    rows = [{"benchmark": r.benchmark, "chain": r.chain, "method": r.method, "utility_variant": by[r.chain].of or "",
             "selection": by[r.chain].selection if by[r.chain].of else "", "gate": by[r.chain].gate,
             "generator_learning": by[r.chain].generator_learning, "inject": by[r.chain].inject,
             "checkpoint": r.checkpoint, "n_episodes": r.n_episodes, "success_pct": r.success_pct}
            for r in t.itertuples()]
    return pd.DataFrame(rows, columns=["benchmark", "chain", "method", "utility_variant", "selection", "gate",
                                       "generator_learning", "inject", "checkpoint", "n_episodes", "success_pct"])


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased Pass@k estimate from n rollouts of which c succeeded: 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} from {n} rollouts")
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def table_pass_at_k(episodes: Any, ks: Sequence[int] = (1, 4, 8)) -> Any:
    """Table 6: Pass@k (%) per benchmark x split x policy, the mean over tasks of `pass_at_k` from the task's
    held-out rollouts, for every k up to the rollouts per task; split `macro` averages the splits (the paper's
    tau2 Average columns are macro averages over its domains)."""
    import pandas as pd

    e = _with_split(episodes)
    per = e.groupby(["benchmark", "split", "chain", "method", "checkpoint", "task_id"]).success.agg(["size", "sum"])
    rows = []
    for (b, split, chain, method, ckpt), g in per.groupby(level=[0, 1, 2, 3, 4]):
        for k in ks:
            if k <= g["size"].min():
                rows.append({"benchmark": b, "split": split, "chain": chain, "method": method, "checkpoint": int(ckpt),
                             "k": k, "n_tasks": len(g),
                             "pass_at_k_pct": 100 * float(sum(pass_at_k(n, c, k) for n, c in zip(g["size"], g["sum"])) / len(g))})
    out = pd.DataFrame(rows, columns=["benchmark", "split", "chain", "method", "checkpoint", "k", "n_tasks", "pass_at_k_pct"])
    macro = (out.groupby(["benchmark", "chain", "method", "checkpoint", "k"])
             .agg(n_tasks=("n_tasks", "sum"), pass_at_k_pct=("pass_at_k_pct", "mean")).reset_index().assign(split="macro"))
    return pd.concat([out, macro[out.columns]], ignore_index=True)


def training_curve(scouts: Any, smoothing: float = 0.6) -> Any:
    """Figure 7's training success-rate curves: per chain and iteration, the success rate of the iteration's
    skill-free Scouts (the one training rollout every chain, plain GRPO included, plays the same way), raw and
    smoothed by an exponential moving average (`smoothing`: the weight of the past). `scouts`: Scout episodes
    with benchmark, chain, iteration, success."""
    import pandas as pd

    rows = []
    for (b, chain), g in scouts.groupby(["benchmark", "chain"]):
        ema = None
        for j, h in g.groupby("iteration"):
            raw = float(h.success.astype(float).mean())
            ema = raw if ema is None else smoothing * ema + (1 - smoothing) * raw
            rows.append({"benchmark": b, "chain": chain, "iteration": int(j), "n_episodes": len(h),
                         "success_pct": 100 * raw, "smoothed_pct": 100 * ema})
    return pd.DataFrame(rows, columns=["benchmark", "chain", "iteration", "n_episodes", "success_pct", "smoothed_pct"])


def injection_rates(selections: Any) -> Any:
    """Figure 1's "injecting skills for only a small fraction of training queries": per benchmark and chain, the
    share of training queries (all iterations) whose Post-Scouts got a skill. `selections`: SelectionRecord rows
    with `chain`."""
    import pandas as pd

    cols = ["benchmark", "chain", "n_queries", "injection_pct"]
    if not len(selections):
        return pd.DataFrame(columns=cols)
    g = selections.assign(injected=selections.selected >= 0).groupby(["benchmark", "chain"]).injected
    return pd.DataFrame({"n_queries": g.size(), "injection_pct": 100 * g.mean()}).reset_index()[cols]
