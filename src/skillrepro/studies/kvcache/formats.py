"""ALFWorld actor prompt formats built from a skill bank (seed 001, sections 1-1, 2-2 and 2-3).

Long because every format the seminar compares is a function here over the same bank, history and template helpers.

A format is a function of (bank, task sentence, category, history, observation, admissible actions, step)
returning chat messages. The wording lives in template files (`templates/*.txt`, `string.Template` syntax:
`$name`); pass `templates_dir` to use a copy you edited. Skill banks follow SkillRL's JSON schema.

Formats:
- `skillrl`: one user message rebuilt every step; the retrieved skills (first 6 general principles, every
  skill of the task's category, first 5 mistakes) come after the task sentence; no skills at step 0.
- `skillrl_skills_first`: the skills before the task sentence (general, category, mistakes).
- `skillrl_common_first`: general principles and mistakes first, the category skills last before the task.
- `skillrl_instruction_first`: like skills_first, with the reply instruction right after the role sentence.
- `skillrl_split_actions`: like skills_first, with the `go to` actions listed once after the task (they do
  not change within an episode) and only the other actions at the end.
- `wikiskill_front` / `wikiskill_back`: the whole SKILL.md documents after the role sentence, before / after
  the task sentence, at every step.
- `noskill`: the baseline without skills (seed 001's no-skill rows): SkillRL's prompt with no retrieved
  experience, the same step-0 prompt.
- `skillrl_cache_aware`: SkillRL's skills, task sentence, observations, admissible actions and instruction laid
  out for the prefix cache: the reply instruction and the retrieved skills in a system message (general
  principles and mistakes, which every task shares, then the category's skills), the episode as a conversation
  that only grows (each step one user turn with its observation and admissible actions; each reply an
  assistant turn). The step's prompt extends the last one's, so only the last reply and the new turn are computed. It
  shows what SkillRL shows and more: the skills from step 0, and every earlier turn where SkillRL keeps the
  last two.
- `evoskill`: skill names and descriptions in the system message; after the first reply, a Skill tool
  result brings the category's SKILL.md (with the core sections) into the conversation, which is never
  truncated. `evoskill_common_top`: the always-loaded core document sits in the system message instead.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Callable, Sequence

import numpy as np

from skillrepro.store import write_text
from skillrepro.studies.kvcache.sim import common_prefix

TEMPLATES_DIR = Path(__file__).parent / "templates"
DEFAULT_BANK = Path(__file__).parent / "banks" / "alfworld_default.json"

CATEGORIES = ("pick_and_place", "look_at_obj_in_light", "clean", "heat", "cool", "examine")
CATEGORY_TITLES = {
    "pick_and_place": "Pick and Place", "look_at_obj_in_light": "Look at Object in Light", "clean": "Clean",
    "heat": "Heat", "cool": "Cool", "examine": "Examine",
}
SKILLRL_FORMATS = ("skillrl", "skillrl_skills_first", "skillrl_common_first", "skillrl_instruction_first",
                   "skillrl_split_actions", "skillrl_cache_aware")
# formats whose prompt is a conversation that only grows (no progress header, no history window)
CONVERSATION_FORMATS = ("skillrl_cache_aware", "evoskill", "evoskill_common_top")
FORMATS = SKILLRL_FORMATS + ("wikiskill_front", "wikiskill_back", "evoskill", "evoskill_common_top", "noskill")
# SkillRL's retrieval: how many general principles and mistakes go into a prompt
N_GENERAL, N_MISTAKES, N_HISTORY = 6, 5, 2
# Qwen's chat template adds this system message when a conversation has none.
QWEN_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


# -- skill banks ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Skill:
    skill_id: str
    title: str
    principle: str
    when_to_apply: str


@dataclass(frozen=True)
class Mistake:
    mistake_id: str
    description: str
    why_it_happens: str
    how_to_avoid: str


@dataclass(frozen=True)
class SkillBank:
    general_skills: tuple[Skill, ...]
    task_specific_skills: dict[str, tuple[Skill, ...]]
    common_mistakes: tuple[Mistake, ...]
    source: str = ""


def _records(items, cls, where: str):
    """The entries of one bank list, each checked for the fields SkillRL's prompt code reads (non-empty
    strings); other fields (SkillRL's evolution adds some) are kept out of the prompt and not checked."""
    if not isinstance(items, list):
        raise ValueError(f"{where}: expected a list, got {type(items).__name__}")
    if not items:
        raise ValueError(f"{where}: empty (SkillRL's prompt draws entries from every list)")
    keys = list(cls.__dataclass_fields__)
    out = []
    for i, it in enumerate(items):
        w = f"{where}[{i}]"
        if not isinstance(it, dict):
            raise ValueError(f"{w}: expected an object, got {type(it).__name__}")
        for k in keys:
            if k not in it:
                raise ValueError(f"{w}: missing key {k!r}")
            if not isinstance(it[k], str):
                raise ValueError(f"{w}.{k}: expected a string, got {type(it[k]).__name__}")
            if not it[k].strip():
                raise ValueError(f"{w}.{k}: empty")
        out.append(cls(**{k: it[k] for k in keys}))
    return tuple(out)


def _unique_ids(records, id_key: str, where: str) -> None:
    seen: dict[str, str] = {}
    for name, rec in records:
        i = getattr(rec, id_key)
        if i in seen:
            raise ValueError(f"{where}: {id_key} {i!r} appears twice ({seen[i]} and {name})")
        seen[i] = name


def load_bank(path: str | Path | None = None, categories: Sequence[str] = CATEGORIES) -> SkillBank:
    """Load a skill bank in SkillRL's JSON schema (its `memory_data/alfworld/claude_style_skills.json`):

        {"general_skills": [{skill_id, title, principle, when_to_apply}, ...],
         "task_specific_skills": {<category>: [{skill_id, title, principle, when_to_apply}, ...], ...},
         "common_mistakes": [{mistake_id, description, why_it_happens, how_to_avoid}, ...]}

    Checked before any use: the three top-level keys; `task_specific_skills` has exactly the ALFWorld
    categories SkillRL's keyword rule picks (`categories`), none empty; every entry has SkillRL's fields as
    non-empty strings; ids are unique. Every violation names the file and the key path."""
    path = Path(path) if path else DEFAULT_BANK
    where = f"skill bank {path}"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{where}: file not found") from None
    except IsADirectoryError:
        raise ValueError(f"{where}: is a folder, not a JSON file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{where}: not JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a JSON object at the top")
    for k in ("general_skills", "task_specific_skills", "common_mistakes"):
        if k not in data:
            raise ValueError(f"{where}: missing key {k!r}")
    ts = data["task_specific_skills"]
    if not isinstance(ts, dict):
        raise ValueError(f"{where}: task_specific_skills must map a category to a list of skills")
    unknown = sorted(set(ts) - set(categories))
    if unknown:
        raise ValueError(f"{where}: task_specific_skills has unknown categor{'y' if len(unknown) == 1 else 'ies'} "
                         f"{', '.join(map(repr, unknown))} (SkillRL's ALFWorld categories: {', '.join(categories)})")
    missing = [c for c in categories if c not in ts]
    if missing:
        raise ValueError(f"{where}: task_specific_skills lacks categor{'y' if len(missing) == 1 else 'ies'} "
                         f"{', '.join(map(repr, missing))} (every ALFWorld task falls in one of {', '.join(categories)})")
    bank = SkillBank(
        general_skills=_records(data["general_skills"], Skill, f"{where}: general_skills"),
        task_specific_skills={c: _records(ts[c], Skill, f"{where}: task_specific_skills.{c}") for c in categories},
        common_mistakes=_records(data["common_mistakes"], Mistake, f"{where}: common_mistakes"),
        source=str(path),
    )
    skills = [(f"general_skills[{i}]", s) for i, s in enumerate(bank.general_skills)]
    skills += [(f"task_specific_skills.{c}[{i}]", s) for c, v in bank.task_specific_skills.items() for i, s in enumerate(v)]
    _unique_ids(skills, "skill_id", where)
    _unique_ids([(f"common_mistakes[{i}]", m) for i, m in enumerate(bank.common_mistakes)], "mistake_id", where)
    return bank


def bank_summary(bank: SkillBank) -> str:
    """One line naming a bank and its sizes, for logs and tables ("12 general, 32 task-specific, 11 mistakes")."""
    n_task = sum(len(v) for v in bank.task_specific_skills.values())
    return (f"{bank.source}: {len(bank.general_skills)} general, {n_task} task-specific "
            f"({len(bank.task_specific_skills)} categories), {len(bank.common_mistakes)} mistakes, "
            f"{len(bank.general_skills) + n_task + len(bank.common_mistakes)} entries")


def detect_category(task: str) -> str:
    """SkillRL's keyword rule, checked in order (so 'put a hot mug in cabinet' is pick_and_place)."""
    t = task.lower()
    if "look at" in t and "under" in t:
        return "look_at_obj_in_light"
    for word in ("clean", "heat", "cool"):
        if word in t:
            return word
    if "examine" in t or "find" in t:
        return "examine"
    return "pick_and_place"


def _category_skills(bank: SkillBank, category: str) -> tuple[Skill, ...]:
    if category not in bank.task_specific_skills:
        raise ValueError(f"skill bank {bank.source}: no task_specific_skills for category {category!r} "
                         f"(has {sorted(bank.task_specific_skills)})")
    return bank.task_specific_skills[category]


def _title(category: str) -> str:
    return CATEGORY_TITLES.get(category, category.replace("_", " ").title())


# -- rendered skill sections ----------------------------------------------------------------------------


def general_section(bank: SkillBank) -> str:
    lines = [f"- **{s.title}**: {s.principle}" for s in bank.general_skills[:N_GENERAL]]
    return "### General Principles\n" + "\n".join(lines)


def category_section(bank: SkillBank, category: str) -> str:
    lines = [f"- **{s.title}**: {s.principle}\n  _Apply when: {s.when_to_apply}_" for s in _category_skills(bank, category)]
    return f"### {_title(category)} Skills\n" + "\n".join(lines)


def mistakes_section(bank: SkillBank) -> str:
    lines = [f"- **Don't**: {m.description}\n  **Instead**: {m.how_to_avoid}" for m in bank.common_mistakes[:N_MISTAKES]]
    return "### Mistakes to Avoid\n" + "\n".join(lines)


# -- SKILL.md documents ---------------------------------------------------------------------------------


def _front(name: str, description: str) -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n"


def core_body(bank: SkillBank) -> str:
    general = "\n".join(f"- **{s.title}**: {s.principle}\n  _When: {s.when_to_apply}_" for s in bank.general_skills)
    mistakes = "\n".join(f"- **Don't**: {m.description}\n  **Instead**: {m.how_to_avoid}" for m in bank.common_mistakes)
    return f"## General Principles\n{general}\n\n## Mistakes to Avoid\n{mistakes}"


def instructions_body(bank: SkillBank, category: str) -> str:
    skills = _category_skills(bank, category)
    return f"## {_title(category)} Instructions\n" + "\n".join(
        f"{i}. **{s.title}**: {s.principle}" for i, s in enumerate(skills, 1))


def skill_name(category: str) -> str:
    return "alfworld-" + category.replace("_", "-")


def skill_docs(bank: SkillBank, always_loaded_core: bool = False) -> dict[str, str]:
    """SKILL.md documents generated from a bank: `alfworld-core` (general principles and mistakes),
    `alfworld-tasks` (every category's instructions) and one `alfworld-<category>` per category (when to
    apply + instructions, followed by the core sections unless the core is always loaded)."""
    core_desc = ("Principles and mistakes for every ALFWorld task (always loaded)." if always_loaded_core
                 else "Exploration principles and mistakes for every ALFWorld task.")
    docs = {
        "alfworld-core": _front("alfworld-core", core_desc) + "\n" + core_body(bank),
        "alfworld-tasks": _front("alfworld-tasks", "Step-by-step instructions per ALFWorld task type.") + "\n"
        + "\n\n".join(instructions_body(bank, c) for c in bank.task_specific_skills),
    }
    for c, skills in bank.task_specific_skills.items():
        when = "\n".join(f"- {s.when_to_apply}" for s in skills)
        body = f"## When to Apply\n{when}\n\n{instructions_body(bank, c)}"
        if not always_loaded_core:
            body += "\n\n" + core_body(bank)
        docs[skill_name(c)] = _front(skill_name(c), f"How to solve ALFWorld {_title(c)} tasks.") + "\n" + body
    return docs


def write_skill_docs(bank: SkillBank, out_dir: str | Path, always_loaded_core: bool = False) -> list[Path]:
    """Write each document as out_dir/<name>/SKILL.md (the layout skill-loading agents expect)."""
    return [write_text(Path(out_dir) / name / "SKILL.md", text + "\n")
            for name, text in skill_docs(bank, always_loaded_core).items()]


# -- templates and messages -----------------------------------------------------------------------------


@dataclass
class Turn:
    """One earlier step of the episode: what the agent saw, what it could do, what it did and said."""

    observation: str
    action: str
    admissible: list[str] = field(default_factory=list)
    reply: str = ""  # the model's whole reply; defaults to an <action> tag around `action`

    def reply_text(self) -> str:
        return self.reply or f"<action>{self.action}</action>"


class Templates:
    def __init__(self, directory: str | Path | None = None):
        self.dir = Path(directory) if directory else TEMPLATES_DIR
        if not self.dir.is_dir():
            raise ValueError(f"templates folder {self.dir} does not exist")

    def raw(self, name: str) -> str:
        path = self.dir / f"{name}.txt"
        if not path.exists():
            raise ValueError(f"template {path} is missing")
        text = path.read_text()
        return text[:-1] if text.endswith("\n") else text

    def has(self, name: str) -> bool:
        return (self.dir / f"{name}.txt").exists()

    def fill(self, name: str, **values: str) -> str:
        try:
            return Template(self.raw(name)).substitute(values)
        except KeyError as e:
            raise ValueError(f"template {self.dir / (name + '.txt')}: unknown placeholder ${e.args[0]} "
                             f"(available: {', '.join(sorted(values))})") from None
        except ValueError as e:
            raise ValueError(f"template {self.dir / (name + '.txt')}: {e}") from None


def format_actions(actions: list[str]) -> str:
    """The admissible list as SkillRL prints it (a numpy array of strings: one per line, no commas)."""
    return "[" + "\n ".join(f"'{a}'" for a in actions) + "]"


def history_items(history: list[Turn]) -> list[str]:
    """The recent history as SkillRL prints it: one `[Observation k: '...', Action k: '...']` item per
    turn (the last N_HISTORY turns); an item spans several lines when its observation does."""
    recent = history[-N_HISTORY:]
    first = len(history) - len(recent)
    return [f"[Observation {first + i + 1}: '{t.observation}', Action {first + i + 1}: '{t.action}']"
            for i, t in enumerate(recent)]


def format_progress(history: list[Turn], step: int) -> str:
    items = history_items(history)
    return (f"Prior to this step, you have already taken {step} step(s). Below are the most recent "
            f"{len(items)} observations and the corresponding actions you took: {chr(10).join(items)}")


def build_messages(fmt: str, bank: SkillBank, task: str, category: str | None, history: list[Turn],
                   observation: str, admissible: list[str], step: int | None = None,
                   templates: Templates | None = None) -> list[dict]:
    """The chat messages the actor sends at `step` (default: len(history)) in format `fmt`."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown prompt format {fmt!r}; choose one of {FORMATS}")
    tpl = templates or Templates()
    step = len(history) if step is None else step
    category = category or detect_category(task)
    instruction = tpl.raw("instruction")
    common = dict(task=task, observation=observation, actions=format_actions(admissible), instruction=instruction,
                  step=str(step), step_next=str(step + 1))
    if fmt.startswith("evoskill"):
        return _evoskill(fmt, bank, category, history, observation, admissible, tpl, instruction)
    if fmt == "skillrl_cache_aware":
        return _cache_aware(bank, category, history, observation, admissible, tpl, instruction)
    if step == 0:
        name = f"{fmt}_step0" if tpl.has(f"{fmt}_step0") else "skillrl_step0"
        extra = {}
        if fmt.startswith("wikiskill"):
            extra["documents"] = _wiki_documents(bank)
        return [{"role": "user", "content": tpl.fill(name, **common, **extra)}]
    values = dict(common, progress=format_progress(history, step))
    if fmt.startswith("wikiskill"):
        values["documents"] = _wiki_documents(bank)
    elif fmt == "noskill":
        pass
    else:
        values.update(general=general_section(bank), category=category_section(bank, category),
                      mistakes=mistakes_section(bank))
        goto = [a for a in admissible if a.startswith("go to ")]
        values.update(goto_actions=format_actions(goto),
                      other_actions=format_actions([a for a in admissible if not a.startswith("go to ")]))
    return [{"role": "user", "content": tpl.fill(fmt, **values)}]


def _wiki_documents(bank: SkillBank) -> str:
    docs = skill_docs(bank)
    return docs["alfworld-core"] + "\n\n" + docs["alfworld-tasks"]


def _evoskill(fmt: str, bank: SkillBank, category: str, history: list[Turn], observation: str,
              admissible: list[str], tpl: Templates, instruction: str) -> list[dict]:
    common_top = fmt == "evoskill_common_top"
    docs = skill_docs(bank, always_loaded_core=common_top)
    listing = "\n".join(f"- {skill_name(c)}: How to solve ALFWorld {_title(c)} tasks."
                        for c in bank.task_specific_skills)
    values = dict(instruction_oneline=instruction.replace("\n", " "), skill_list=listing)
    if common_top:
        values["core_document"] = docs["alfworld-core"]
    msgs = [{"role": "system", "content": tpl.fill(f"{fmt}_system", **values)}]
    # the first user message is the step-0 prompt; later observations arrive as short turns
    turns = [(t.observation, t.admissible) for t in history] + [(observation, admissible)]
    first_obs, first_actions = turns[0]
    msgs.append({"role": "user", "content": tpl.fill("skillrl_step0", observation=first_obs,
                                                     actions=format_actions(first_actions), instruction=instruction)})
    for i, t in enumerate(history):
        msgs.append({"role": "assistant", "content": t.reply_text()})
        if i == 0:  # the Skill tool loads the task's category document after the first reply
            msgs.append({"role": "user", "content": tpl.fill("evoskill_tool", document=docs[skill_name(category)])})
        obs, acts = turns[i + 1]
        msgs.append({"role": "user", "content": tpl.fill("evoskill_turn", observation=obs, actions=format_actions(acts))})
    return msgs


def _cache_aware(bank: SkillBank, category: str, history: list[Turn], observation: str, admissible: list[str],
                 tpl: Templates, instruction: str) -> list[dict]:
    system = tpl.fill("skillrl_cache_aware_system", general=general_section(bank), mistakes=mistakes_section(bank),
                      category=category_section(bank, category), instruction=instruction)
    msgs = [{"role": "system", "content": system}]
    # the first observation carries the task sentence, as at SkillRL's step 0
    turns = [(t.observation, t.admissible) for t in history] + [(observation, admissible)]
    for i, (obs, acts) in enumerate(turns):
        if i:
            msgs.append({"role": "assistant", "content": history[i - 1].reply_text()})
        msgs.append({"role": "user", "content": tpl.fill("skillrl_cache_aware_turn", observation=obs,
                                                         actions=format_actions(acts), step_next=str(i + 1))})
    return msgs


def _conversation_pieces(fmt: str, bank: SkillBank, view: "EpisodeView", tpl: Templates) -> list[tuple[str, str]]:
    """The named parts of a growing conversation after the system message's (for `prompt_segments`): the first
    step's actions, then each earlier reply and the turn after it; the last turn is the current observation and
    actions."""
    history = list(view.history)
    if not history:
        return []
    # the first observation quotes the task sentence (found first, as `task`); its actions list is history
    out = [("history_1", format_actions(list(history[0].admissible)))]
    for i, t in enumerate(history):
        out.append((f"history_{i + 1}", t.reply_text()))
        if i == 0 and fmt.startswith("evoskill"):
            out.append(("documents", skill_docs(bank, always_loaded_core=fmt == "evoskill_common_top")[
                skill_name(view.category)]))
        if i + 1 < len(history):
            nxt = history[i + 1]
            turn = (tpl.fill("evoskill_turn", observation=nxt.observation, actions=format_actions(list(nxt.admissible)))
                    if fmt.startswith("evoskill") else
                    tpl.fill("skillrl_cache_aware_turn", observation=nxt.observation,
                             actions=format_actions(list(nxt.admissible)), step_next=str(i + 2)))
            out.append((f"history_{i + 2}", turn))
    return out


def _evoskill_pieces(fmt: str, bank: SkillBank, view: "EpisodeView", tpl: Templates) -> list[tuple[str, str]]:
    """The named parts of an evoskill conversation in order (for `prompt_segments`): the system message's skill
    list and always-loaded core document (evoskill_common_top), the first step's actions, then each earlier
    reply and the observation turn after it, with the category's SKILL.md (the Skill tool's result) after the first reply;
    the last turn is the current observation and actions."""
    docs = skill_docs(bank, always_loaded_core=fmt == "evoskill_common_top")
    listing = "\n".join(f"- {skill_name(c)}: How to solve ALFWorld {_title(c)} tasks."
                        for c in bank.task_specific_skills)
    out = [("skill_list", listing)]  # the system message's skill names and descriptions
    if fmt == "evoskill_common_top":
        out.append(("core_document", docs["alfworld-core"]))
    return out + _conversation_pieces(fmt, bank, view, tpl)


def render_chatml(messages: list[dict], default_system: str | None = QWEN_DEFAULT_SYSTEM) -> str:
    """The prompt text Qwen2.5's chat template produces (no tools), ending with the assistant header."""
    parts = []
    if messages and messages[0]["role"] != "system" and default_system is not None:
        parts.append(f"<|im_start|>system\n{default_system}<|im_end|>\n")
    for m in messages:
        parts.append(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n")
    return "".join(parts) + "<|im_start|>assistant\n"


# -- static analysis ------------------------------------------------------------------------------------


def shared_prefix_tokens(a: list[int], b: list[int]) -> int:
    """How many leading tokens two prompts share: what one episode's cache can give the other."""
    return common_prefix(np.asarray(a), np.asarray(b))


@dataclass(frozen=True)
class EpisodeView:
    """One episode at the step the static analysis looks at: enough to build its prompt in any format."""

    episode: str
    task: str  # the task sentence as the prompt quotes it
    history: tuple[Turn, ...]
    observation: str
    admissible: tuple[str, ...]

    @property
    def category(self) -> str:
        return detect_category(self.task)


@dataclass(frozen=True)
class SharedPrefixRow:
    format: str
    relation: str  # same_category | different_category
    pairs: int
    shared_tokens_mean: float
    shared_tokens_min: int
    shared_tokens_max: int
    prompt_tokens_mean: float
    shared_fraction_mean: float  # shared tokens / the shorter prompt of the pair


def shared_prefix_table(formats: Sequence[str], bank: SkillBank, views: Sequence[EpisodeView],
                        encode: Callable[[str], list[int]], templates: Templates | None = None,
                        render: Callable[[list[dict]], str] = render_chatml) -> list[SharedPrefixRow]:
    """Static analysis (seed 001, 2-2): for every pair of episodes, how many leading tokens their prompts
    share in each format, split by whether the two tasks fall in the same SkillRL category. The longer this
    prefix, the more of one episode's cache another can use. No LLM involved: prompts are rendered
    (`render`, default Qwen2.5's chat template) and tokenised (`encode`)."""
    if len(views) < 2:
        raise ValueError("shared-prefix analysis needs at least two episodes")
    rows = []
    for fmt in formats:
        ids = [encode(render(build_messages(fmt, bank, v.task, None, list(v.history), v.observation,
                                            list(v.admissible), templates=templates))) for v in views]
        by_rel: dict[str, list[tuple[int, int, int]]] = {"same_category": [], "different_category": []}
        for i in range(len(views)):
            for j in range(i + 1, len(views)):
                rel = "same_category" if views[i].category == views[j].category else "different_category"
                by_rel[rel].append((shared_prefix_tokens(ids[i], ids[j]), len(ids[i]), len(ids[j])))
        for rel, got in by_rel.items():
            if not got:
                continue
            shared = [g[0] for g in got]
            rows.append(SharedPrefixRow(
                fmt, rel, len(got), sum(shared) / len(got), min(shared), max(shared),
                sum(a + b for _, a, b in got) / (2 * len(got)),
                sum(s / min(a, b) for s, a, b in got) / len(got)))
    return rows


# -- per-segment token breakdown (seed 001, 1-1 and the 2-3 prompt figure) ---------------------------------


# What an episode's prompt gains at every step (with the history items, history_<i>): the denominator that
# turns the seminar's 920 shared tokens into its "87 %" leaves these out
STEP_SEGMENTS = ("observation", "actions")


@dataclass(frozen=True)
class ShareRow:
    """One same-category pair of episodes (seed 001, 2-2: "920 tokens, 87 % of the prompt, are shared")."""

    format: str
    episode_a: str
    episode_b: str
    shared_tokens: int
    prompt_tokens: int  # episode a's prompt
    step_tokens: int  # a's per-step parts: history items, current observation, admissible actions
    share_of_prompt: float  # shared / prompt: what one episode's cache gives the other
    share_of_fixed_part: float  # shared / (prompt - step parts)


def share_of_prompt(fmt: str, bank: SkillBank, views: Sequence[EpisodeView], encode: Callable[[str], list[int]],
                    templates: Templates | None = None) -> list[ShareRow]:
    """Every same-category pair of `views` in `fmt`: the tokens their prompts share from the start, as a share
    of a's whole prompt and of a's prompt without the parts that change every step. On the seminar's step-2
    example (SkillRL's bank, skills first) the shared prefix is 920 of 1,421 tokens (0.647); 920 is 87 % only of
    the 1,058 tokens left without the history, observation and admissible actions."""
    tpl = templates or Templates()
    ids = [encode(render_chatml(build_messages(fmt, bank, v.task, None, list(v.history), v.observation,
                                               list(v.admissible), templates=tpl))) for v in views]
    rows = []
    for i, a in enumerate(views):
        step = sum(t for name, _, t in prompt_segments(fmt, bank, a, encode, tpl)
                   if name in STEP_SEGMENTS or name.startswith("history_"))
        for j in range(i + 1, len(views)):
            if views[j].category != a.category:
                continue
            shared = shared_prefix_tokens(ids[i], ids[j])
            rows.append(ShareRow(fmt, a.episode, views[j].episode, shared, len(ids[i]), step,
                                 shared / len(ids[i]), shared / max(len(ids[i]) - step, 1)))
    return rows


def prompt_segments(fmt: str, bank: SkillBank, view: EpisodeView, encode: Callable[[str], list[int]],
                    templates: Templates | None = None,
                    render: Callable[[list[dict]], str] = render_chatml) -> list[tuple[str, int, int]]:
    """(segment, characters, tokens) in prompt order for one request: the named parts the prompt is built
    from (system sentence, task, general / category / mistakes sections, progress header, each history item,
    observation, actions, instruction, SKILL.md documents) where they occur, and `template` for the text
    between them (chat markers, headings, the role sentence's frame). A segment's tokens are those its end
    adds to the prompt's tokenisation (len(encode(prompt[:end])) minus the previous end's), so the tokens sum
    to the prompt's exactly; a token that straddles a boundary counts in the later segment."""
    tpl = templates or Templates()
    history = list(view.history)
    prompt = render(build_messages(fmt, bank, view.task, None, history, view.observation, list(view.admissible),
                                   templates=tpl))
    items = history_items(history)
    header = format_progress(history, len(history))
    header = header[: header.index(items[0])] if items else header
    pieces = [("system", QWEN_DEFAULT_SYSTEM), ("task", view.task)]
    if fmt.startswith("evoskill"):
        pieces += _evoskill_pieces(fmt, bank, view, tpl)
    else:
        pieces += [("general", general_section(bank)), ("category", category_section(bank, view.category)),
                   ("mistakes", mistakes_section(bank))]
    if fmt == "skillrl_cache_aware":
        pieces += _conversation_pieces(fmt, bank, view, tpl)
    if fmt.startswith("wikiskill"):
        pieces.append(("documents", _wiki_documents(bank)))
    conversation = fmt in CONVERSATION_FORMATS
    pieces += [("progress_header", header) if items and not conversation else ("", "")]
    pieces += [(f"history_{i + 1}", t) for i, t in enumerate(items) if not conversation]
    pieces += [("observation", view.observation), ("actions", format_actions(list(view.admissible))),
               ("instruction", tpl.raw("instruction"))]
    spans = []
    cursor = 0  # a conversation's turns (evoskill) are found in order: a short reply may repeat
    for name, text in pieces:
        if not name or not text:
            continue
        ordered = name.startswith(("history", "documents", "core_document", "skill_list"))
        at = (prompt.rfind(text) if name in ("observation", "actions", "instruction")
              else prompt.find(text, cursor) if ordered else prompt.find(text))
        if at >= 0 and not any(a < at + len(text) and at < b for _, a, b in spans):
            spans.append((name, at, at + len(text)))
            if ordered:
                cursor = at + len(text)
    spans.sort(key=lambda s: s[1])
    bounds, pos = [], 0
    for name, a, b in spans:
        if a > pos:
            bounds.append(("template", a))
        bounds.append((name, b))
        pos = b
    if pos < len(prompt):
        bounds.append(("template", len(prompt)))
    out, prev_c, prev_t = [], 0, 0
    for name, end in bounds:
        n = len(encode(prompt[:end]))
        out.append((name, end - prev_c, n - prev_t))
        prev_c, prev_t = end, n
    return out
