"""Skill cards (seed 002, section 4.2, appendix D): the format and its check, constrained decoding (a valid
structure by construction; the words stay the model's), the Generator's prompt templates and its requests.

Long because the card format, its check and its decoding grammar must agree, so they live together.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from skillrepro.config import ConfigError
from skillrepro.llm.tokenize import server_root, tokenize
from skillrepro.studies.scaffold.records import CandidateRecord, EvidenceRecord


PROMPTS = Path(__file__).resolve().parents[2] / "prompts"


# A free name's bound, in the grammar and in check_card: at most this many words of at most 20 characters (the
# paper's longest, tau2's "Exchange item for same product type in delivered order", has nine).
FREE_NAME_WORDS = 12


@dataclass(frozen=True)
class NameForm:
    """How a card's `# Skill:` name may be written, for each part of the study that reads or writes one.
    `hint`: what a template's {headings} (and the json form's instruction) shows as the name. `max_words`:
    check_card's bound (a kebab name is one word). `rule`: the grammar's `name` rule, bounded in characters too
    and holding no '#', '<', quote or backslash, so the name stays one title line and valid JSON. `pattern`: the
    JSON schema's (which leaves word bounds to validation), and check_card's for a kebab name. `max_tokens`: the
    most that sectioned decoding's name request may write (the paper's longest free name, nine words, takes about
    10 tokens)."""

    hint: str
    max_words: int
    rule: str
    pattern: str
    max_tokens: int


# Appendix D's two forms: `kebab` (ALFWorld's "<short-kebab-case-name>" and WebShop's mechanism names) and `free`
# (ScienceWorld's "short reusable mechanism name" and tau2's cards: words with spaces and capitals, "Test
# Conductivity Using Available Setup"; single spaces between words).
NAME_FORMS = {
    "kebab": NameForm("<short-kebab-case-name>", 1,
                      'name ::= [a-z] [a-z0-9]{0,15} ("-" [a-z0-9] [a-z0-9]{0,15}){0,5}',
                      "[a-z0-9]+(-[a-z0-9]+)*", 16),
    "free": NameForm("<short reusable mechanism name>", FREE_NAME_WORDS,
                     "name ::= [A-Za-z0-9] [A-Za-z0-9'-]{0,19} (\" \" [A-Za-z0-9] [A-Za-z0-9'-]{0,19})"
                     f"{{0,{FREE_NAME_WORDS - 1}}}",
                     "[A-Za-z0-9][A-Za-z0-9'-]*( [A-Za-z0-9][A-Za-z0-9'-]*)*", 32),
}


@dataclass(frozen=True)
class CardFormat:
    """What a valid card looks like: a `# Skill: <name>` title (the name of form `name`, NAME_FORMS), then exactly
    these `##` headings in order, each with some text, and a word count within limits, in a reply of form `reply`.
    The paper's differs per benchmark (PAPER_CARDS); configurable per env through `scaffold.card`."""

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
    reply: str = "tagged"  # how the Generator's reply holds the card: a name in REPLY_FORMS
    name: str = "kebab"  # how the title's name is written: one of NAME_FORMS


# Each benchmark env's card as its appendix D template asks for it (the reply form is PAPER_REPLY's). The
# household/laboratory cards state only a ceiling ("within 400 English words"); their 20-word floor is ours. Every
# other env (BabyAI, Crafter: no template in the paper) takes ALFWorld's.
PAPER_CARDS = {
    "alfworld": CardFormat(),
    "scienceworld": CardFormat(name="free"),
    "webshop": CardFormat(("When to Use", "Inputs to Identify", "Workflow", "Decision Rules"), 150, 50),
    "tau2": CardFormat(("When to apply", "Policy and tool checks", "Procedure", "Decision rules",
                        "Verification and recovery", "Stop or escalation conditions"), 240, 120, name="free"),
}


def paper_card(env: str) -> CardFormat:
    """The paper's card format on `env`, with the env's paper reply form."""
    return replace(PAPER_CARDS.get(env, PAPER_CARDS["alfworld"]), reply=paper_reply(env))


@dataclass(frozen=True)
class ReplyForm:
    """How a Generator reply holds its card (appendix D's templates): it starts with `opening` (the text up to the
    card's name, what constrained decoding pre-fills), the card's sections follow, then `closing`; `escaped`: the
    card is a JSON string (newlines written as \\n)."""

    name: str
    opening: str
    closing: str
    escaped: bool

    def text(self, raw: str) -> str:
        """`raw` card text as the reply writes it."""
        return json.dumps(raw)[1:-1] if self.escaped else raw


REPLY_FORMS = {
    # ALFWorld's and ScienceWorld's templates: "Return only <skill>...</skill>"
    "tagged": ReplyForm("tagged", "<skill>\n# Skill: ", "\n</skill>", False),
    # WebShop's "strict serialization contract": one JSON object with one key, "skill"
    "json": ReplyForm("json", '{"skill":"# Skill: ', '"}', True),
    # tau2-bench's: the card directly as Markdown, beginning with '# Skill:', no JSON, no code fence
    "markdown": ReplyForm("markdown", "# Skill: ", "", False),
}


# The reply form of each benchmark env whose template appendix D gives; every other env (BabyAI, Crafter) takes
# the tagged form of the two household/laboratory templates.
PAPER_REPLY = {"alfworld": "tagged", "scienceworld": "tagged", "webshop": "json", "tau2": "markdown"}


def paper_reply(env: str) -> str:
    return PAPER_REPLY.get(env, "tagged")


# The longest reply the parser reads (a 400-word card is about 3,000 characters): a longer one is invalid unread.
MAX_REPLY_CHARS = 32_000


# What each form asks for, filled into a template's {reply} placeholder.
REPLY_INSTRUCTIONS = {
    "tagged": "Return only the card enclosed by <skill> and </skill>, {min_words} to {max_words} words; no code "
              "fence, no text before <skill> or after </skill>.",
    "json": "Answer with exactly one JSON object with one key, \"skill\", whose value is the card as Markdown "
            "(newlines escaped as \\n), {min_words} to {max_words} words; no code fence, no text before or after "
            "it. Your reply begins exactly like this: {\"skill\":\"# Skill: {name}\\n",
    "markdown": "Return the card directly as Markdown, beginning with '# Skill:', {min_words} to {max_words} words; "
                "do not wrap it in JSON or a code fence, no text before or after it.",
}


@dataclass(frozen=True)
class CardCheck:
    card: str  # the card inside the reply (parse_reply); "" if the reply is malformed
    name: str
    n_words: int
    problems: tuple[str, ...]

    @property
    def valid(self) -> bool:
        return not self.problems


# A word as the card's word limits count it.
_WORD = re.compile(r"[A-Za-z0-9][\w'-]*")


def _heading_words(fmt: CardFormat) -> int:
    return sum(len(_WORD.findall(h)) for h in fmt.headings)


_TITLE = re.compile(r"^#\s*Skill\s*:\s*(.*)$", re.IGNORECASE)


_HEADING = re.compile(r"^(#{1,6})\s*(.*?)\s*#*\s*$")


def parse_reply(text: str, reply: str) -> tuple[str, str]:
    """(card, "") from a Generator reply of form `reply` (REPLY_FORMS), or ("", why the reply is malformed). The
    reply is the form and nothing else, after at most one leading <think>...</think> block (Qwen3's generation
    prefix). tagged: one <skill>...</skill>; json: exactly one object with one string key "skill"; markdown: the
    card itself. Inside, the card starts with a '# Skill:' line."""
    if len(text) > MAX_REPLY_CHARS:
        return "", f"reply of {len(text)} characters, more than {MAX_REPLY_CHARS}"
    body = text.strip()
    if body.startswith("<think>"):
        end = body.find("</think>")
        if end < 0:
            return "", "a <think> block without </think>"
        body = body[end + len("</think>"):].strip()
    if reply == "json":
        try:
            obj = json.loads(body)
        except json.JSONDecodeError:
            obj = None
        if not (isinstance(obj, dict) and list(obj) == ["skill"] and isinstance(obj["skill"], str)):
            return "", 'not one JSON object with exactly one string key "skill"'
        body = obj["skill"].strip()
    elif reply == "tagged":
        if not body.startswith("<skill>") or not body.endswith("</skill>"):
            return "", "not one card enclosed by <skill> and </skill> (nothing before or after them)"
        body = body[len("<skill>"):-len("</skill>")]
        if "<skill>" in body or "</skill>" in body:
            return "", "more than one <skill> block"
        body = body.strip()
    elif reply != "markdown":
        raise ValueError(f"reply form {reply!r}; allowed: {', '.join(REPLY_FORMS)}")
    if not _TITLE.match(body.split("\n", 1)[0].strip()):
        return "", "no card: expected the card to start with a line '# Skill: <name>'"
    return body, ""


def check_card(text: str, fmt: CardFormat = CardFormat()) -> CardCheck:
    """Extract the card from a Generator reply (of form `fmt.reply`) and list every way it breaks `fmt` (none:
    valid). A malformed reply is one problem, and no card."""
    card, malformed = parse_reply(text, fmt.reply)
    if malformed:
        return CardCheck("", "", 0, (malformed,))
    lines = card.splitlines()
    problems: list[str] = []
    name = _TITLE.match(lines[0].strip()).group(1).strip()
    if not name:
        problems.append("the '# Skill:' title has no name")
    elif fmt.name == "kebab" and not re.fullmatch(NAME_FORMS["kebab"].pattern, name):
        problems.append(f"the name {name!r} is not kebab-case (lowercase words joined by '-')")
    elif len(_WORD.findall(name)) > NAME_FORMS[fmt.name].max_words:
        problems.append(f"the name has more than {NAME_FORMS[fmt.name].max_words} words")
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
    n_words = len(_WORD.findall(card))
    if n_words > fmt.max_words:
        problems.append(f"{n_words} words, more than the limit of {fmt.max_words}")
    if n_words < fmt.min_words:
        problems.append(f"{n_words} words, fewer than the minimum of {fmt.min_words}")
    return CardCheck(card, name, n_words, tuple(problems))


# Constrained decoding pre-fills a reply with its form's opening (the text up to the card's name).
DECODINGS = ("auto", "grammar", "grammar_single", "json_schema", "prompt", "none")


def _gbnf(text: str) -> str:
    """`text` exactly, as a GBNF string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def section_word_bounds(fmt: CardFormat, max_tokens: int | None = None) -> tuple[int, int]:
    """(lo, hi) words per section such that any card the grammar allows has min_words..max_words words
    (as check_card counts them: title word, name, heading words and section words) and, when
    `max_tokens` is given, fits in it (about 2 tokens per word and separator, 12 per heading line), so
    the reply is never cut off before its closing."""
    if fmt.name not in NAME_FORMS:
        raise ValueError(f"card format: name {fmt.name!r}; allowed: {', '.join(NAME_FORMS)}")
    k = len(fmt.headings)
    headings = _heading_words(fmt)
    name_words = NAME_FORMS[fmt.name].max_words
    fixed = 1 + name_words + headings  # "Skill", the longest name, the headings
    hi = (fmt.max_words - fixed) // k
    if max_tokens is not None:
        hi = min(hi, (max_tokens - 16 - 2 * (name_words - 1) - 12 * k) // (2 * k))
    lo = max(1, -(-(fmt.min_words - (2 + headings)) // k))  # with the shortest name, one word
    if hi < lo:
        raise ValueError(f"card format: {k} sections need {lo}..{hi} words each, impossible with max_words "
                         f"{fmt.max_words}, min_words {fmt.min_words}" + (f" and {max_tokens} generator tokens"
                                                                         if max_tokens else ""))
    return lo, hi


def _body_rules(lo: int, hi: int, form: ReplyForm) -> list[str]:
    return [
        f'body ::= "- "? word (sep word){{{lo - 1},{hi - 1}}} "."?',
        "word ::= [A-Za-z0-9] [A-Za-z0-9'-]{0,19}",
        # A separator holds no letter or digit, so each `word` is exactly one word for check_card; none holds
        # '#', '<', a quote or a backslash, so no heading or tag can appear and a JSON string stays valid.
        'sep ::= " " | ", " | ". " | "; " | ": " | " (" | ") " | "), " | "/" | ' + _gbnf(form.text("\n- ")),
    ]


def heading_literal(heading: str, reply: str) -> str:
    """A heading line as a reply of form `reply` writes it (inside a JSON string, newlines escaped)."""
    return REPLY_FORMS[reply].text("\n## " + heading + "\n")


def card_grammar(fmt: CardFormat, max_tokens: int | None = None) -> str:
    """GBNF (llama.cpp; vLLM's xgrammar reads the same syntax) for the Generator's reply after its form's opening
    (`ReplyForm.opening`, the pre-fill): a kebab-case name, then every heading of `fmt` in order, each followed by
    lo..hi words (see `section_word_bounds`), then the form's closing (`</skill>`, `"}` or nothing).
    One request under this grammar can still be cut by its token limit before the closing (a word
    costs one to twenty tokens), and it caps every section alike; sectioned decoding (`Sections`) bounds the reply
    in tokens and the card's words as a whole instead."""
    form = REPLY_FORMS[fmt.reply]
    lo, hi = section_word_bounds(fmt, max_tokens)
    parts = " ".join(f"{_gbnf(heading_literal(h, fmt.reply))} body" for h in fmt.headings)
    closing = f" {_gbnf(form.closing)}" if form.closing else ""
    return "\n".join([f"root ::= name {parts}{closing}", NAME_FORMS[fmt.name].rule] + _body_rules(lo, hi, form))


@dataclass(frozen=True)
class Sections:
    """Sectioned decoding's plan (`generator_request`): the name under `name_grammar` (at most `name_tokens`
    tokens), then each heading's line (`literals`, as the reply writes them) and a body of at least `lo` words,
    then `closing`. The bound on words is the card's, not a section's: the name and the bodies share `words`
    (max_words less "Skill" and the headings' words), so one long section (the paper's 76-word ScienceWorld
    Procedure) may take what shorter ones leave, while every later section keeps its `lo`."""

    name_grammar: str
    lo: int
    words: int
    reply: str
    literals: tuple[str, ...]
    closing: str
    name_tokens: int

    def body_grammar(self, hi: int) -> str:
        """A section body of lo..hi words."""
        return "\n".join(["root ::= body"] + _body_rules(self.lo, hi, REPLY_FORMS[self.reply]))

    def n_words(self, piece: str) -> int:
        """Words of a name or body as check_card counts them (an escaped reply's newlines unescaped first)."""
        return len(_WORD.findall(piece.replace("\\n", "\n") if REPLY_FORMS[self.reply].escaped else piece))


def sections(fmt: CardFormat) -> Sections:
    """The sectioned plan of `fmt` (its lo per section from `section_word_bounds`, which also refuses an
    impossible format)."""
    lo, _ = section_word_bounds(fmt)
    form = REPLY_FORMS[fmt.reply]
    name = NAME_FORMS[fmt.name]
    return Sections("\n".join(["root ::= name", name.rule]), lo, fmt.max_words - 1 - _heading_words(fmt), fmt.reply,
                    tuple(heading_literal(h, fmt.reply) for h in fmt.headings), form.closing, name.max_tokens)


# What a body or a name cut by its token limit may end with that the grammar does not let it end with: a
# separator, or part of one (a cut can fall inside the two characters of an escaped newline, or after a newline).
_CUT_TAIL = re.compile(r"(?:\\n- |\\n-|\\n|\\|\n- |\n-|\n|[ ,;:(/)-]|\.(?= ))+$")


def close_cut(text: str) -> str:
    """A body (or name) cut by the token limit, made a complete one: its trailing separator dropped. A word cut in
    the middle is still a word (any prefix of one is), so nothing the policy wrote besides the separator goes."""
    return _CUT_TAIL.sub("", text)


def card_json_schema(fmt: CardFormat) -> dict[str, Any]:
    """JSON schema of the reply for servers without grammars (OpenAI-style structured outputs): one
    object with one string key "skill" whose headings come in order; the word bounds are not expressible
    here and are left to validation. Only the json reply form is a JSON object."""
    pattern = "^# Skill: " + NAME_FORMS[fmt.name].pattern + "".join(
        "\\n## " + re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", h) + "\\n[^#]+" for h in fmt.headings) + "$"
    return {"type": "object", "additionalProperties": False, "required": ["skill"],
            "properties": {"skill": {"type": "string", "pattern": pattern}}}


# Sectioned decoding: the tokens a section body is sure to get (so it holds a word).
SECTION_MIN_TOKENS = 4


@dataclass(frozen=True)
class GeneratorRequest:
    """What to send with the Generator's messages: an assistant pre-fill (the reply continues it) and
    the request fields the backend needs for it and for constrained decoding; `sections`: sectioned decoding's
    plan (one request per part of the card, each under its grammar in `grammar_field`)."""

    prefill: str
    extra_body: dict[str, Any]
    sections: Sections | None = None
    grammar_field: str = "grammar"

    def reply_text(self, continuation: str, prefill: str | None = None) -> str:
        """The whole reply. llama.cpp returns the pre-fill with the continuation, vLLM without it."""
        prefill = self.prefill if prefill is None else prefill
        return continuation if continuation.startswith(prefill) else prefill + continuation

    def with_grammar(self, grammar: str) -> dict[str, Any]:
        return {**self.extra_body, self.grammar_field: {"grammar": grammar} if self.grammar_field == "structured_outputs"
                else grammar}


def generator_request(fmt: CardFormat, decoding: str, backend: str, max_tokens: int | None,
                      reply_key: str = "scaffold.generator_reply") -> GeneratorRequest:
    """The request for a reply of form `fmt.reply` (`reply_key` names the setting in errors).

    `grammar`: pre-fill the form's opening (`<skill>\\n# Skill: `, `{"skill":"# Skill: ` or `# Skill: `) and decode
    the card in parts, the name and then each section's body under `sections(fmt)` (llama.cpp's `grammar`, vLLM's
    `structured_outputs.grammar`), each request limited to the tokens the card has left, the headings and the
    form's closing written in between: the reply fits `max_tokens` and always closes (`sectioned_reply`).
    `grammar_single`: one request under `card_grammar`, bounded in words only (a long reply is cut before its
    closing). `json_schema`: `response_format` with `card_json_schema`, no pre-fill (a schema covers the whole
    reply); the json form only. `prompt`: no pre-fill, free decoding: the format asked by the prompt alone, as
    the paper does. `none`: pre-fill only, free decoding. `auto`: grammar; on the openai backend (API servers
    neither continue a pre-filled reply nor take grammars) json_schema for the json form, else prompt."""
    if decoding not in DECODINGS:
        raise ConfigError(f"config key scaffold.generator_decoding: {decoding!r}; allowed: {', '.join(DECODINGS)}")
    if fmt.reply not in REPLY_FORMS:
        raise ConfigError(f"config key {reply_key}: {fmt.reply!r}; allowed: {', '.join(REPLY_FORMS)}")
    form = REPLY_FORMS[fmt.reply]
    if decoding == "auto":
        decoding = ("json_schema" if form.escaped else "prompt") if backend == "openai" else "grammar"
    if decoding == "prompt":
        return GeneratorRequest("", {})
    if decoding == "json_schema":
        if not form.escaped:
            raise ConfigError(f"config key scaffold.generator_decoding: json_schema decodes one JSON object, not the "
                              f"{fmt.reply} reply of {reply_key}; use grammar (or prompt), or set {reply_key} to json")
        return GeneratorRequest("", {"response_format": {"type": "json_schema", "json_schema": {
            "name": "skill_card", "strict": True, "schema": card_json_schema(fmt)}}})
    if backend == "openai":
        raise ConfigError(f"config key scaffold.generator_decoding: {decoding!r} pre-fills the assistant reply, "
                          "which OpenAI-style APIs do not continue; use prompt (or json_schema with the json reply) "
                          "for llm.backend openai")
    extra: dict[str, Any] = {}
    if backend == "vllm":  # vLLM continues a final assistant message only when asked to
        extra.update(continue_final_message=True, add_generation_prompt=False)
    field_name = "structured_outputs" if backend == "vllm" else "grammar"
    if decoding == "grammar":
        return GeneratorRequest(form.opening, extra, sections(fmt), field_name)
    req = GeneratorRequest(form.opening, extra, grammar_field=field_name)
    if decoding == "grammar_single":
        return GeneratorRequest(form.opening, req.with_grammar(card_grammar(fmt, max_tokens)), grammar_field=field_name)
    return req


def _part_budgets(max_tokens: int, literal_tokens: Sequence[int], closing_tokens: int,
                  name_max: int) -> tuple[int, int]:
    """(tokens the model may write in all, of which at most this many for the name): `max_tokens` less the
    headings and the closing written between the requests, and a token per seam where re-tokenising
    could merge two pieces."""
    k = len(literal_tokens)
    free = max_tokens - sum(literal_tokens) - closing_tokens - (2 * k + 2)
    if free < SECTION_MIN_TOKENS * (k + 1):
        raise ConfigError(f"config key scaffold.generator_max_tokens: {max_tokens} tokens leave {free} for the model's "
                          f"own text after the {k} headings; a card needs at least {SECTION_MIN_TOKENS * (k + 1)}")
    return free, min(name_max, free - SECTION_MIN_TOKENS * k)


def server_token_counter(base_url: str, backend: str, model: str) -> Callable[[str], int]:
    """Counts tokens as the server that plays the Generator does (its /tokenize: llama.cpp and vLLM both have
    one), remembering texts it has counted (the headings repeat for every card)."""
    root = server_root(base_url)
    seen: dict[str, int] = {}

    def count(text: str) -> int:
        if text not in seen:  # parse_special not sent to llama.cpp: the server's default
            seen[text] = len(tokenize(root, backend, text=text, model=model, timeout_s=60))
        return seen[text]

    return count


def sectioned_reply(client: Any, messages: Sequence[dict[str, Any]], request: GeneratorRequest, max_tokens: int,
                    count: Callable[[str], int], session_id: str) -> tuple[str, list[Any]]:
    """One card by sectioned decoding (see `generator_request`): (the whole reply, every request's LLM record).

    Each request continues the reply so far (the pre-fill grows). A body may write an equal share of the tokens
    the card has left (what a short section leaves over goes to the later ones), so the model's tokens plus the
    headings stay within `max_tokens` and a small model's rambling first section cannot leave the others a word
    each; and the words the card has left less `lo` for every later section, so the card keeps its word limits.
    A part cut by its token limit loses only a trailing separator (`close_cut`)."""
    plan = request.sections
    free, name_max = _part_budgets(max_tokens, [count(x) for x in plan.literals],
                                   count(plan.closing) if plan.closing else 0, plan.name_tokens)
    text, records, words = request.prefill, [], plan.words

    def part(grammar: str, limit: int) -> tuple[int, int]:
        """(tokens, words) the part wrote."""
        nonlocal text
        reply = client.chat(list(messages[:-1]) + [{"role": "assistant", "content": text}], role="generator",
                            session_id=session_id, max_tokens=limit, extra_body=request.with_grammar(grammar))
        records.extend(reply.records)
        piece = request.reply_text(reply.text, text)[len(text):]
        if reply.finish_reason == "length":
            piece = close_cut(piece)
        text += piece
        return int(getattr(reply.record, "completion_tokens", 0) or count(piece)), plan.n_words(piece)

    tokens, n = part(plan.name_grammar, name_max)
    free, words = free - tokens, words - n
    for i, lit in enumerate(plan.literals):
        text += lit
        later = len(plan.literals) - i - 1
        hi = max(plan.lo, words - plan.lo * later)
        share = min(free // (later + 1), free - SECTION_MIN_TOKENS * later)
        tokens, n = part(plan.body_grammar(hi), max(1, share))
        free, words = free - tokens, words - n
    return text + plan.closing, records


GROUP_GUIDANCE = {
    "all_success": "Every attempt succeeded: extract the reusable decisions that made them work.",
    "all_failure": "Every attempt failed: diagnose the recurring errors and give conditional corrections, "
                   "without presenting an unobserved complete solution as verified.",
    "mixed": "Some attempts succeeded and some failed: contrast the decisions that separate them.",
    "anchor": "This attempt succeeded: extract the single most reusable decision mechanism it shows.",
}


@dataclass(frozen=True)
class GeneratorTemplate:
    """A generator prompt file: a system part and a user part separated by a line '=== user ==='.
    Placeholders: {task}, {attempts}, {n_attempts}, {guidance}, {headings}, {min_words}, {max_words}, {reply} (what
    the card format's reply form asks for, its word limits included: REPLY_INSTRUCTIONS)."""

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
            "headings": "\n".join([f"# Skill: {NAME_FORMS[fmt.name].hint}"] + [f"## {h}" for h in fmt.headings]),
            "min_words": str(fmt.min_words),
            "max_words": str(fmt.max_words),
            "reply": REPLY_INSTRUCTIONS[fmt.reply].replace("{max_words}", str(fmt.max_words))
                                                  .replace("{min_words}", str(fmt.min_words))
                                                  .replace("{name}", NAME_FORMS[fmt.name].hint.strip("<>")),
        }

        # Only known placeholders are replaced, so braces elsewhere in a user's template stay as written.
        def fill(s: str) -> str:
            return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), s)

        return [{"role": "system", "content": fill(self.system)}, {"role": "user", "content": fill(self.user)}]


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
    if request.sections and count is None:
        c = client_for(0)
        count = server_token_counter(c.base_url, c.cfg.backend, c.cfg.model)
    for j in range(n):
        session = f"scaffold/{ev.benchmark}/{ev.variant}/{ev.task_id}/gen{j}"
        if request.sections:
            text, records = sectioned_reply(client_for(j), messages, request, max_tokens, count, session)
        else:
            reply = client_for(j).chat(messages, role="generator", session_id=session, max_tokens=max_tokens,
                                       extra_body=request.extra_body or None)
            text, records = request.reply_text(reply.text), reply.records
        chk = check_card(text, fmt)
        cands.append(CandidateRecord(ev.benchmark, ev.variant, ev.task_id, j, text, chk.card, chk.name,
                                     chk.n_words, chk.valid, "; ".join(chk.problems), records[0].call_id))
        calls += records
    return cands, calls
