"""Prompt formats from the shipped skill bank: structure, reuse boundaries (Qwen2.5 tokens), bank errors."""
from __future__ import annotations

import json
import shutil

import pytest

from skillrepro.studies.kvcache import formats as F
from skillrepro.studies.kvcache.tokenizers import get_tokenizer
from repo import DATA

BANK = F.load_bank()
TOK = get_tokenizer("qwen2.5")
ROOM = "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, a sinkbasin 1."
ACTS = ["go to cabinet 1", "go to countertop 1", "go to sinkbasin 1", "inventory", "look"]


def episode(task: str, steps: int) -> list[F.Turn]:
    obs = [f"{ROOM}\n\nYour task is to: {task}"] + [f"You arrive at place {i}. Nothing happens." for i in range(1, steps)]
    return [F.Turn(o, ACTS[i % 3], ACTS, f"<think>step {i}</think>\n<action>{ACTS[i % 3]}</action>")
            for i, o in enumerate(obs)]


def prompt_ids(fmt: str, task: str, step: int, **kw) -> list[int]:
    hist = episode(task, step + 1)
    msgs = F.build_messages(fmt, BANK, task, None, hist[:step], hist[step].observation, ACTS, **kw)
    return TOK.encode(F.render_chatml(msgs))


def text(fmt: str, task: str, step: int) -> str:
    hist = episode(task, step + 1)
    return F.render_chatml(F.build_messages(fmt, BANK, task, None, hist[:step], hist[step].observation, ACTS))


@pytest.mark.parametrize("task,cat", [
    ("look at bowl under the desklamp.", "look_at_obj_in_light"),
    ("put a clean cloth in cabinet.", "clean"),
    ("heat some egg and put it in garbagecan.", "heat"),
    ("cool some apple and put it in fridge.", "cool"),
    ("examine the book with the desklamp.", "examine"),
    ("find two pen and put them in drawer.", "examine"),
    ("put a hot mug in cabinet.", "pick_and_place"),  # SkillRL's rule misses "hot"
    ("put some spraybottle on toilet.", "pick_and_place"),
])
def test_detect_category_in_skillrl_order(task, cat):
    assert F.detect_category(task) == cat


def test_default_bank_has_every_category():
    assert set(BANK.task_specific_skills) == set(F.CATEGORIES)
    assert len(BANK.general_skills) > F.N_GENERAL and len(BANK.common_mistakes) > F.N_MISTAKES


def test_skillrl_sections():
    assert "Retrieved Relevant Experience" not in text("skillrl", "put a clean cloth in cabinet.", 0)
    t = text("skillrl", "put a clean cloth in cabinet.", 3)
    general = t.split("### General Principles\n")[1].split("\n\n")[0]
    assert general.count("- **") == 6
    clean = t.split("### Clean Skills\n")[1].split("\n\n")[0]
    assert clean.count("- **") == len(BANK.task_specific_skills["clean"]) and "_Apply when:" in clean
    assert t.split("### Mistakes to Avoid\n")[1].split("\n\n")[0].count("- **Don't**") == 5
    assert "already taken 3 step(s)" in t and "[Observation 2:" in t and "[Observation 3:" in t
    assert "[Observation 1:" not in t  # only the last two pairs
    assert "You are now at step 4" in t and t.endswith("</action> tags.\n<|im_end|>\n<|im_start|>assistant\n")


def test_same_episode_reuse_stops_at_the_step_count():
    a, b = prompt_ids("skillrl", "put a clean cloth in cabinet.", 2), prompt_ids("skillrl", "put a clean cloth in cabinet.", 3)
    t = text("skillrl", "put a clean cloth in cabinet.", 2)
    head = t[: t.index("already taken 2") + len("already taken ")]  # up to the step number
    assert F.shared_prefix_tokens(a, b) == len(TOK.encode(head))


def test_cross_episode_prefix_per_format():
    same = ("put a clean cloth in cabinet.", "clean some soapbar and put it in toilet.")
    other = ("put a clean cloth in cabinet.", "heat some egg and put it in garbagecan.")
    share = {f: (F.shared_prefix_tokens(prompt_ids(f, same[0], 2), prompt_ids(f, same[1], 2)),
                 F.shared_prefix_tokens(prompt_ids(f, other[0], 2), prompt_ids(f, other[1], 2)))
             for f in ("skillrl", "skillrl_skills_first", "skillrl_common_first", "wikiskill_front", "wikiskill_back")}
    t = text("skillrl", same[0], 2)
    role = len(TOK.encode(t[: t.index(" put a clean")]))
    assert share["skillrl"] == (role, role) == (44, 44)  # the task sentence comes first; seed 001 also finds 44
    skills = len(TOK.encode(text("skillrl_skills_first", same[0], 2).split("Your task is to")[0]))
    assert share["skillrl_skills_first"][0] >= skills - 1  # same category: the whole skill block
    assert share["skillrl_skills_first"][1] < share["skillrl_common_first"][1] < share["skillrl_common_first"][0]
    assert share["wikiskill_front"][0] == share["wikiskill_front"][1] > 1000  # documents do not depend on the task
    assert share["wikiskill_back"] == share["skillrl"]


def test_split_actions_lists_go_to_once_before_the_progress():
    t = text("skillrl_split_actions", "put a clean cloth in cabinet.", 2)
    head, tail = t.split("## Current Progress")
    assert "'go to sinkbasin 1'" in head and "'go to sinkbasin 1'" not in tail and "'inventory'" in tail


def test_instruction_first_moves_the_reply_instruction_up():
    t = text("skillrl_instruction_first", "put a clean cloth in cabinet.", 2)
    assert t.index("<think>") < t.index("## Retrieved Relevant Experience")
    assert t.count("<action> </action>") == 1


def test_evoskill_conversation_only_grows():
    task = "put a clean cloth in cabinet."
    t2, t3 = text("evoskill", task, 2), text("evoskill", task, 3)
    assert t3.startswith(t2.removesuffix("<|im_start|>assistant\n"))
    sys_msg = t2.split("<|im_end|>")[0]
    assert "- alfworld-clean: How to solve ALFWorld Clean tasks." in sys_msg and "## General Principles" not in sys_msg
    tool = t2.split("<tool_response>\n")[1].split("</tool_response>")[0]
    assert tool.startswith("---\nname: alfworld-clean\n") and "## General Principles" in tool
    top = text("evoskill_common_top", task, 2)
    assert "## General Principles" in top.split("<|im_end|>")[0]
    assert "## General Principles" not in top.split("<tool_response>\n")[1].split("</tool_response>")[0]
    assert "<tool_response>" not in text("evoskill", task, 0)


def test_cache_aware_keeps_skillrls_content_in_a_conversation_that_only_grows():
    task = "put a clean cloth in cabinet."
    t2, t3, t0 = (text("skillrl_cache_aware", task, k) for k in (2, 3, 0))
    assert t3.startswith(t2.removesuffix("<|im_start|>assistant\n"))  # each step extends the last
    system = t3.split("<|im_end|>")[0]
    skillrl = text("skillrl", task, 3)
    # SkillRL's retrieved sections and reply instruction, shared sections first (the category's last)
    for section in (F.general_section(BANK), F.mistakes_section(BANK), F.category_section(BANK, "clean"),
                    open(F.TEMPLATES_DIR / "instruction.txt").read().strip()):
        assert section in system and section in skillrl
    assert system.index("### Mistakes to Avoid") < system.index("### Clean Skills")
    assert system == t0.split("<|im_end|>")[0]  # the skills from step 0 on
    # every observation and the whole admissible list of each step, with SkillRL's step count
    assert t3.count(F.format_actions(ACTS)) == 4 and "You are now at step 4 and" in t3
    assert all(f"You arrive at place {i}." in t3 for i in (1, 2, 3)) and "Your task is to: " + task in t3


def test_cache_aware_lifts_per_step_reuse_in_the_simulator():
    """The moonshot's first check: one episode's requests through the vLLM simulator, each step after the first
    reusing the whole previous prompt, against SkillRL's break at the step count."""
    from skillrepro.studies.kvcache import sim

    def reuse(fmt: str) -> float:
        hist = episode("put a clean cloth in cabinet.", 8)
        reqs = [sim.Request("e", k, TOK.encode(F.render_chatml(F.build_messages(
            fmt, BANK, "put a clean cloth in cabinet.", None, hist[:k], hist[k].observation, ACTS))))
            for k in range(len(hist))]
        _, results = sim.simulate(reqs, sim.CacheConfig(capacity_tokens=1 << 16, block_size=16, schedule="sequential"))
        late = [r for r in results if r.step >= 2]
        return sum(r.cached_tokens for r in late) / sum(r.prompt_tokens for r in late)

    assert reuse("skillrl_cache_aware") >= 0.85 > reuse("skillrl")


def test_skill_docs_written_as_skill_md(tmp_path):
    paths = F.write_skill_docs(BANK, tmp_path)
    names = {p.parent.name for p in paths}
    assert {"alfworld-core", "alfworld-tasks", "alfworld-look-at-obj-in-light"} <= names
    core = (tmp_path / "alfworld-core" / "SKILL.md").read_text()
    assert core.startswith("---\nname: alfworld-core\n") and BANK.general_skills[-1].title in core


def test_user_templates_replace_the_shipped_ones(tmp_path):
    shutil.copytree(F.TEMPLATES_DIR, tmp_path / "t")
    (tmp_path / "t" / "skillrl.txt").write_text("TASK=$task\n$general\n")
    msgs = F.build_messages("skillrl", BANK, "put a clean cloth in cabinet.", None, episode("x", 2), "obs", ACTS,
                            templates=F.Templates(tmp_path / "t"))
    assert msgs[0]["content"].startswith("TASK=put a clean cloth in cabinet.\n### General Principles")
    (tmp_path / "t" / "skillrl.txt").write_text("$nonsense")
    with pytest.raises(ValueError, match=r"skillrl.txt: unknown placeholder \$nonsense"):
        F.build_messages("skillrl", BANK, "t", None, episode("x", 2), "obs", ACTS, templates=F.Templates(tmp_path / "t"))


@pytest.mark.parametrize("mutate,msg", [
    (lambda b: b.pop("common_mistakes"), "missing key 'common_mistakes'"),
    (lambda b: b["general_skills"][1].pop("principle"), r"general_skills\[1\]: missing key 'principle'"),
    (lambda b: b["task_specific_skills"]["heat"][0].update(title=3), r"task_specific_skills.heat\[0\].title: expected a string"),
    (lambda b: b.update(task_specific_skills=[]), "task_specific_skills must map"),
])
def test_bank_schema_violations_are_named(tmp_path, mutate, msg):
    data = json.loads(F.DEFAULT_BANK.read_text())
    mutate(data)
    p = tmp_path / "bank.json"
    p.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=msg) as e:
        F.load_bank(p)
    assert str(p) in str(e.value)


def test_missing_category_and_unknown_format_are_named():
    bank = F.SkillBank(BANK.general_skills, {"clean": BANK.task_specific_skills["clean"]}, BANK.common_mistakes, "b.json")
    with pytest.raises(ValueError, match="b.json: no task_specific_skills for category 'heat'"):
        F.build_messages("skillrl", bank, "heat some egg.", None, episode("x", 1), "o", ACTS)
    with pytest.raises(ValueError, match="unknown prompt format 'skilrl'"):
        F.build_messages("skilrl", BANK, "t", None, [], "o", ACTS)


SMALL_BANK = DATA / "kvcache_bank_small.json"


def test_skillrl_format_bank_loads_and_builds_prompts():
    bank = F.load_bank(SMALL_BANK)
    assert F.bank_summary(bank).endswith("2 general, 6 task-specific (6 categories), 1 mistakes, 9 entries")
    assert bank.task_specific_skills["heat"][0].skill_id == "hea_001"  # an extra field ("source") is ignored
    t = F.build_messages("skillrl", bank, "heat some egg and put it in fridge.", None, episode("x", 2), "o", ACTS)
    body = t[0]["content"]
    assert "- **Microwave Warm-up**" in body and "Fridge Chill" not in body and body.count("**Don't**") == 1


@pytest.mark.parametrize("mutate,msg", [
    (lambda b: b["task_specific_skills"].update(pick_place=b["task_specific_skills"].pop("pick_and_place")),
     r"unknown category 'pick_place'"),
    (lambda b: b["task_specific_skills"].pop("cool"), r"lacks category 'cool'"),
    (lambda b: b["task_specific_skills"].update(clean=[]), r"task_specific_skills.clean: empty"),
    (lambda b: b.update(general_skills=[]), r"general_skills: empty"),
    (lambda b: b["common_mistakes"][0].update(how_to_avoid="  "), r"common_mistakes\[0\].how_to_avoid: empty"),
    (lambda b: b["common_mistakes"][0].pop("why_it_happens"), r"common_mistakes\[0\]: missing key 'why_it_happens'"),
    (lambda b: b["task_specific_skills"]["cool"][0].update(skill_id="gen_001"),
     r"skill_id 'gen_001' appears twice \(general_skills\[0\] and task_specific_skills.cool\[0\]\)"),
    (lambda b: b["general_skills"].append("a string"), r"general_skills\[2\]: expected an object, got str"),
])
def test_skillrl_bank_violations_name_file_and_field(tmp_path, mutate, msg):
    data = json.loads(SMALL_BANK.read_text())
    mutate(data)
    p = tmp_path / "bank.json"
    p.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=msg) as e:
        F.load_bank(p)
    assert str(e.value).startswith(f"skill bank {p}: ")
    p.write_text("{not json")
    with pytest.raises(ValueError, match=f"skill bank {p}: not JSON"):
        F.load_bank(p)


def test_prompt_segments_cover_the_prompt_in_order():
    task = "put a clean cloth in cabinet."
    hist = episode(task, 3)
    view = F.EpisodeView("e", task, tuple(hist[:2]), hist[2].observation, tuple(ACTS))
    for fmt, order in [("skillrl", ["task", "general", "category", "mistakes", "history_1"]),
                       ("skillrl_skills_first", ["general", "category", "mistakes", "task", "history_1"])]:
        segs = F.prompt_segments(fmt, BANK, view, TOK.encode)
        names = [n for n, _, _ in segs if n != "template"]
        assert [n for n in names if n in order] == order, fmt
        assert sum(t for _, _, t in segs) == len(prompt_ids(fmt, task, 2))
        prompt = F.render_chatml(F.build_messages(fmt, BANK, task, None, hist[:2], hist[2].observation, ACTS))
        assert sum(c for _, c, _ in segs) == len(prompt)
        seg = dict((n, t) for n, _, t in segs)
        # the first history item carries the whole first observation (the room, then the task line); a
        # token merging across a boundary moves one token to the later segment
        assert abs(seg["history_1"] - len(TOK.encode(F.history_items(hist[:2])[0]))) <= 1 and seg["history_1"] > 30
        assert abs(seg["general"] - len(TOK.encode(F.general_section(BANK)))) <= 1
    # evoskill's conversation: the skill list, then its turns in order with the category's SKILL.md (the Skill
    # tool's result) after the first reply: skills between the history, as the seminar's 2-3 example shows
    for fmt in ("evoskill", "evoskill_common_top"):
        segs = F.prompt_segments(fmt, BANK, view, TOK.encode)
        names = list(dict.fromkeys(n for n, _, _ in segs if n != "template"))
        want = ["skill_list", *(["core_document"] if fmt.endswith("top") else []), "task", "history_1", "instruction",
                "documents", "history_2", "observation", "actions"]
        assert names == want, fmt
        assert sum(t for _, _, t in segs) == len(prompt_ids(fmt, task, 2)), fmt
        doc = F.skill_docs(BANK, fmt.endswith("top"))[F.skill_name(view.category)]
        assert abs(dict((n, t) for n, _, t in segs)["documents"] - len(TOK.encode(doc))) <= 1, fmt


def test_share_of_prompt_counts_the_shared_prefix_against_the_whole_and_the_fixed_part():
    from skillrepro.studies.kvcache.replay import read_trajectories, views_at

    v = views_at(read_trajectories(DATA / "kvcache_trajectories.json"), 2)[0]
    # the same game as another same-category episode with another task sentence of that category
    other = F.EpisodeView("b", v.task.replace(v.task.split()[-1], "shelf."), v.history, v.observation, v.admissible)
    assert other.category == v.category and other.task != v.task
    bank = F.load_bank()
    (first,) = F.share_of_prompt("skillrl_skills_first", bank, [v, other], TOK.encode)
    (orig,) = F.share_of_prompt("skillrl", bank, [v, other], TOK.encode)
    segs = F.prompt_segments("skillrl_skills_first", bank, v, TOK.encode)
    step = sum(t for n, _, t in segs if n in ("observation", "actions") or n.startswith("history_"))
    prompt = sum(t for _, _, t in segs)
    assert (first.prompt_tokens, first.step_tokens) == (prompt, step) and step > 0
    assert first.share_of_prompt == first.shared_tokens / prompt
    assert first.share_of_fixed_part == first.shared_tokens / (prompt - step) > first.share_of_prompt
    # skills first: the skills are shared, up to the task sentence; the original order parts at the task
    assert first.shared_tokens > 500 > 60 > orig.shared_tokens
    # a pair of different categories is not a pair of this analysis
    far = F.EpisodeView("c", "heat some egg and put it in garbagecan.", v.history, v.observation, v.admissible)
    assert far.category != v.category and F.share_of_prompt("skillrl", bank, [v, far], TOK.encode) == []
