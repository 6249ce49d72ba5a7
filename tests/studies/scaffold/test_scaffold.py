"""SkillScaffold's pure decisions on hand-made numbers and cards (no model, no env)."""
from __future__ import annotations

import json
import math
from dataclasses import replace
import random
import re

import pandas as pd
import pytest

from skillrepro.studies.scaffold.cards import (FREE_NAME_WORDS, MAX_REPLY_CHARS, NAME_FORMS, PAPER_CARDS, REPLY_FORMS,
                                               CardFormat,
                                               GeneratorTemplate, card_grammar, card_json_schema, check_card,
                                               generate_candidates, generator_request, paper_card, sections,
                                               section_word_bounds)
from skillrepro.studies.scaffold.evidence import build_evidence
from skillrepro.studies.scaffold.records import CandidateRecord, Trajectory, TrajectoryStep
from skillrepro.studies.scaffold.rollouts import sample_queries
from skillrepro.studies.scaffold.selection import (group_kind, select, select_with, selection_for_query,
                                                   utilities_for_query, utility)
from skillrepro.studies.scaffold.settings import Ablation, ScaffoldConfig, executor_llm
from skillrepro.studies.scaffold.validation import (decision_rules, exploration_view, pilot_competence,
                                                    pilot_rollout_estimates, rollout_outcomes, utility_quintiles)
from repo import ROOT, study_workflow

# ---------------------------------------------------------------- utility, every branch of eq. 8 and 9


def test_grp_all_success_is_mean_of_successes():
    assert utility([0.2, 0.4], []) == pytest.approx(0.3)


def test_grp_all_failure_is_minus_mean_of_failures():
    assert utility([], [0.1, 0.5]) == pytest.approx(-0.3)


def test_grp_mixed_weighs_each_class_one_half_whatever_its_size():
    # 3 successes (mean 0.2) and 1 failure (-0.4): 0.5*0.2 - 0.5*(-0.4) = 0.3
    assert utility([0.1, 0.2, 0.3], [-0.4]) == pytest.approx(0.3)
    # Same means with other counts give the same utility (Proposition 1).
    assert utility([0.2], [-0.4, -0.4, -0.4]) == pytest.approx(0.3)


def test_grp_one_element_groups():
    assert utility([0.7], []) == pytest.approx(0.7)
    assert utility([], [0.7]) == pytest.approx(-0.7)
    assert utility([0.7], [0.1]) == pytest.approx(0.3)


def test_grp_undefined_and_nan_inputs():
    assert math.isnan(utility([], []))
    assert math.isnan(utility([0.1, float("nan")], []))
    assert math.isnan(utility([0.1], [float("inf")]))


def test_anc_is_d_on_the_first_success_and_ignores_failures():
    assert utility([0.5, -1.0], [9.0], variant="anc") == pytest.approx(0.5)
    assert math.isnan(utility([], [0.3], variant="anc"))
    assert math.isnan(utility([float("nan"), 0.2], [], variant="anc"))


def test_unknown_variant_is_named():
    with pytest.raises(ValueError, match="'best'"):
        utility([0.1], [], variant="best")


# ---------------------------------------------------------------- select (eq. 10)


def test_select_argmax_over_valid_finite():
    assert select([0.1, 0.9, 0.3], [True, False, True]) == 2
    assert select([float("nan"), 0.2, 0.1], [True, True, True]) == 1
    assert select([0.2, 0.2], [True, True]) == 0  # ties: the earlier candidate


def test_select_abstains_when_best_is_not_above_threshold():
    assert select([-0.1, 0.0], [True, True]) is None
    assert select([0.05, 0.02], [True, True], threshold=0.05) is None
    assert select([0.06, 0.02], [True, True], threshold=0.05) == 0


def test_select_abstains_when_no_candidate_is_valid_or_finite():
    assert select([0.5, 0.7], [False, False]) is None
    assert select([float("nan"), float("inf") * 0], [True, True]) is None
    assert select([], []) is None


def test_select_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="2 utilities but 1"):
        select([0.1, 0.2], [True])


def test_group_kind():
    assert group_kind([True, True]) == "all_success"
    assert group_kind([False]) == "all_failure"
    assert group_kind([False, True]) == "mixed"


# ---------------------------------------------------------------- card validation

GOOD = """<think>let me see</think>
<skill>
# Skill: pick-then-go
## When to apply
The mission asks to pick up one object and then go to another.
## Success-preserving strategy
Keep the object you picked up; do not drop it before the second goal.
## Failure patterns to suppress
Walking into walls; turning in circles without moving forward.
## Procedure
1. Face the first object. 2. Step next to it. 3. Pick it up. 4. Go to the second object.
## Decision rules
If the object is to your left, turn left; if it is ahead, go forward.
## Verification and recovery
After pick_up, check that you carry it; if not, step closer and retry.
## Stop conditions
Stop when standing next to the second object while facing it.
</skill>"""


def test_valid_card_is_accepted_and_extracted():
    c = check_card(GOOD)
    assert c.valid, c.problems
    assert c.name == "pick-then-go"
    assert c.card.startswith("# Skill: pick-then-go") and "</skill>" not in c.card and "think" not in c.card


def _reply(card: str, reply: str) -> str:
    """`card` in a Generator reply of form `reply`, as appendix D's templates ask for it."""
    return {"tagged": f"<skill>\n{card}\n</skill>", "json": json.dumps({"skill": card}), "markdown": card}[reply]


INNER = GOOD.split("<skill>")[1].split("</skill>")[0].strip()


def test_every_reply_form_parses_into_the_same_card():
    want = check_card(GOOD)
    assert want.card == INNER
    for reply in REPLY_FORMS:
        for text in (_reply(INNER, reply), "<think> </think>\n" + _reply(INNER, reply)):  # Qwen3's empty think
            c = check_card(text, CardFormat(reply=reply))
            assert c.valid and (c.card, c.name, c.n_words) == (want.card, want.name, want.n_words), (reply, c.problems)


def test_a_reply_not_in_its_form_is_a_format_invalid_card():
    tagged = CardFormat(reply="tagged")
    malformed = [
        INNER,  # untagged
        "Here is the card:\n" + _reply(INNER, "tagged"),  # text before <skill>
        _reply(INNER, "tagged") + "\nHope this helps.",  # text after </skill>
        "<skill>\n" + INNER,  # never closed (cut by the token limit)
        _reply(INNER, "tagged") + "\n" + _reply(INNER, "tagged"),  # two cards
        "<skill>\nA preface.\n" + INNER + "\n</skill>",  # the card does not start with its title
        "<think>still thinking " + _reply(INNER, "tagged"),  # an unclosed think block
        _reply(INNER, "json"),  # another form
        "<skill>\n" + INNER + " " + "word " * MAX_REPLY_CHARS + "\n</skill>",  # too long to read
    ]
    for text in malformed:
        c = check_card(text, tagged)
        assert not c.valid and c.card == "" and c.name == "" and len(c.problems) == 1, (text[:80], c.problems)
    assert "more than 32000" in check_card(malformed[-1], tagged).problems[0]
    # markdown is the card alone; json one object with one key "skill"
    assert not check_card("Here is the card:\n" + INNER, CardFormat(reply="markdown")).valid
    assert not check_card(_reply(INNER, "tagged"), CardFormat(reply="markdown")).valid
    assert not check_card(_reply(INNER, "tagged"), CardFormat(reply="json")).valid


def test_card_missing_heading_is_rejected():
    bad = GOOD.replace("## Decision rules\n", "")
    c = check_card(bad)
    assert not c.valid and any("missing heading(s): Decision rules" in p for p in c.problems)


def test_card_headings_out_of_order_rejected():
    a, b = "## Procedure", "## Decision rules"
    bad = GOOD.replace(a, "@@").replace(b, a).replace("@@", b)
    c = check_card(bad)
    assert not c.valid and any("out of order" in p for p in c.problems)


def test_card_extra_heading_empty_section_and_no_title_rejected():
    assert any("unexpected heading(s): Notes" in p for p in check_card(GOOD.replace("</skill>", "## Notes\nx\n</skill>")).problems)
    empty = GOOD.replace("Stop when standing next to the second object while facing it.", "")
    assert any("section 'Stop conditions' is empty" in p for p in check_card(empty).problems)
    assert check_card("I cannot help with that.", CardFormat(reply="markdown")).problems == (
        "no card: expected the card to start with a line '# Skill: <name>'",)
    assert any("no name" in p for p in check_card(GOOD.replace("# Skill: pick-then-go", "# Skill:")).problems)


def test_card_word_limits():
    long = GOOD.replace("Walking into walls;", "word " * 400 + "Walking into walls;")
    assert any("more than the limit of 400" in p for p in check_card(long).problems)
    assert any("fewer than the minimum" in p for p in check_card(GOOD, CardFormat(min_words=500, max_words=900)).problems)


def test_custom_headings_from_config():
    fmt = CardFormat(headings=("When to Use", "Workflow"), max_words=150, min_words=1, reply="json")
    ok = json.dumps({"skill": "# Skill: x\n## When to Use\nAlways.\n## Workflow\nDo it."})
    assert check_card(ok, fmt).valid
    assert not check_card(GOOD, fmt).valid


# ---------------------------------------------------------------- evidence, utilities per query, selection


def traj(i: int, success: bool, task: str = "7") -> Trajectory:
    msgs = ({"role": "system", "content": "S"}, {"role": "user", "content": f"Mission: task {task}"},
            {"role": "assistant", "content": "Thought: go\nAction: go_forward()"})
    return Trajectory(f"ep{i}", task, success, i, msgs,
                      (TrajectoryStep("go", "go_forward", "[]", f"obs {i}"),))


def test_group_evidence_has_every_attempt_with_its_outcome():
    ev = build_evidence("babyai", "grp", [traj(1, True), traj(0, False)])
    assert ev.kind == "mixed" and ev.n_success == 1 and not ev.skip
    assert ev.evidence.index("index=0 outcome=FAILURE") < ev.evidence.index("index=1 outcome=SUCCESS")
    assert ev.task == "Mission: task 7"


def test_anchor_evidence_is_first_success_in_sampling_order_or_skips():
    ev = build_evidence("babyai", "anc", [traj(2, True), traj(0, False), traj(1, True)])
    assert ev.anchor_episode_id == "ep1" and "obs 1" in ev.evidence and "obs 2" not in ev.evidence
    ev = build_evidence("babyai", "anc", [traj(0, False), traj(1, False)])
    assert ev.skip and ev.anchor_episode_id == "" and ev.kind == "all_failure"


def test_long_attempts_are_elided_in_the_middle():
    from skillrepro.studies.scaffold.evidence import render_attempt

    steps = tuple(TrajectoryStep(f"t{i}", "go_forward", "[]", "x" * 50) for i in range(40))
    t = Trajectory("e", "1", False, 0, traj(0, False).messages, steps)
    text = render_attempt(t, 1000)
    assert "Turn 0." in text and "Turn 39." in text and "turns omitted]" in text and len(text) < 1200


def test_evidence_budget_in_tokens_is_recorded_where_it_binds():
    steps = tuple(TrajectoryStep(f"t{i}", "go_forward", "[]", "x " * 20) for i in range(40))
    long = Trajectory("e", "1", False, 0, traj(0, False).messages, steps)
    words = lambda text: len(text.split())  # noqa: E731  (a stand-in token counter)
    ev = build_evidence("babyai", "grp", [long, traj(1, True)], 400, words)
    assert ev.budget_unit == "tokens" and ev.n_turns_omitted > 0 and "turns omitted]" in ev.evidence
    assert ev.evidence_size == words(ev.evidence) and ev.evidence_size <= 400 + 20
    short = build_evidence("babyai", "grp", [traj(0, False), traj(1, True)], 400, words)
    assert short.n_turns_omitted == 0 and "omitted" not in short.evidence
    chars = build_evidence("babyai", "grp", [long], 1000)
    assert chars.budget_unit == "chars" and chars.n_turns_omitted > 0 and chars.evidence_size == len(chars.evidence)


def test_template_fills_known_placeholders_only(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("sys {max_words} {json}\n=== user ===\nTask: {task}\n{attempts}\n{headings}")
    ev = build_evidence("babyai", "grp", [traj(0, True)])
    msgs = GeneratorTemplate.load("babyai", p).messages(ev, CardFormat())
    assert msgs[0]["content"] == "sys 400 {json}"
    assert "Task: Mission: task 7" in msgs[1]["content"] and "## Stop conditions" in msgs[1]["content"]
    p.write_text("no separator")
    with pytest.raises(ValueError, match="=== user ==="):
        GeneratorTemplate.load("babyai", p)


def test_shipped_templates_load():
    for env in ("babyai", "alfworld", "scienceworld"):
        t = GeneratorTemplate.load(env)
        assert "{attempts}" in t.user


def cand(j: int, valid: bool = True) -> CandidateRecord:
    return CandidateRecord("babyai", "grp", "7", j, "raw", f"# Skill: c{j}", f"c{j}", 30, valid, "", "id")


def test_utilities_and_selection_for_one_query():
    scouts = [traj(0, True), traj(1, False)]
    l_none = {"ep0": -1.0, "ep1": -2.0}
    l_cand = {(0, "ep0"): -0.8, (0, "ep1"): -2.4,   # supports success, suppresses failure: U = 0.1 + 0.2
              (1, "ep0"): -1.5, (1, "ep1"): -1.5}   # U = 0.5*(-0.5) - 0.5*(0.5) = -0.5
    cands = [cand(0), cand(1), cand(2, valid=False)]
    us = utilities_for_query("babyai", "grp", scouts, cands, l_none, l_cand)
    assert us[0].utility == pytest.approx(0.3) and us[1].utility == pytest.approx(-0.5)
    assert math.isnan(us[2].utility) and not us[2].eligible
    sel = selection_for_query("babyai", "grp", scouts, cands, us, 0.0)
    assert sel.selected == 0 and sel.card == "# Skill: c0" and sel.kind == "mixed"
    sel = selection_for_query("babyai", "grp", scouts, cands, us, 0.5)
    assert sel.selected == -1 and sel.card == "" and sel.best_utility == pytest.approx(0.3)


# ---------------------------------------------------------------- validation tables


def _frames():
    utils = pd.DataFrame([
        # query a: candidate 0 is best (U>0) and helps; candidate 1 hurts.
        dict(benchmark="b", variant="grp", task_id="a", candidate=0, utility=0.4, eligible=True),
        dict(benchmark="b", variant="grp", task_id="a", candidate=1, utility=-0.1, eligible=True),
        # query c: the best candidate has U<0: gated stays skill-free, forced injects it and it hurts.
        dict(benchmark="b", variant="grp", task_id="c", candidate=0, utility=-0.2, eligible=True),
        dict(benchmark="b", variant="grp", task_id="c", candidate=1, utility=-0.3, eligible=True),
        dict(benchmark="b", variant="grp", task_id="c", candidate=2, utility=0.9, eligible=False),
    ])
    evals = pd.DataFrame([
        dict(benchmark="b", variant="grp", task_id="a", candidate=-1, success_rate=0.5),
        dict(benchmark="b", variant="grp", task_id="a", candidate=0, success_rate=1.0),
        dict(benchmark="b", variant="grp", task_id="a", candidate=1, success_rate=0.0),
        dict(benchmark="b", variant="grp", task_id="c", candidate=-1, success_rate=0.5),
        dict(benchmark="b", variant="grp", task_id="c", candidate=0, success_rate=0.0),
        dict(benchmark="b", variant="grp", task_id="c", candidate=1, success_rate=0.5),
    ])
    return utils, evals


def test_decision_rules_on_hand_made_sets():
    utils, evals = _frames()
    r = decision_rules(utils, evals).set_index("rule").success_rate
    assert r["skill_free"] == pytest.approx(0.5)
    assert r["random_injection"] == pytest.approx((0.5 + 0.25) / 2)
    assert r["forced_top1"] == pytest.approx((1.0 + 0.0) / 2)
    assert r["gated_top1"] == pytest.approx((1.0 + 0.5) / 2)


def test_quintiles_rise_with_utility_on_hand_made_pairs():
    utils, evals = _frames()
    q = utility_quintiles(utils, evals)
    assert list(q.quintile) == [1, 2, 3, 4] and q.n_pairs.sum() == 4  # 4 eligible pairs, 4 bins
    assert list(q.mean_gain) == pytest.approx([0.0, -0.5, -0.5, 0.5])


def test_exploration_view_groups_by_scout_outcomes():
    sel = pd.DataFrame([
        dict(benchmark="b", variant="grp", task_id="a", kind="all_failure", n_success=0, n_scouts=4, selected=1),
        dict(benchmark="b", variant="grp", task_id="c", kind="all_success", n_success=4, n_scouts=4, selected=-1),
    ])
    post = pd.DataFrame([dict(benchmark="b", variant="grp", task_id="a", success=s) for s in (True, False)]
                        + [dict(benchmark="b", variant="grp", task_id="c", success=True)])
    v = exploration_view(sel, post).set_index("group")
    assert v.loc["all_failure", "post_scout_success"] == 0.5 and v.loc["all_failure", "injection_rate"] == 1.0
    assert v.loc["all_success", "scout_success"] == 1.0 and v.loc["all_success", "injection_rate"] == 0.0


# ---------------------------------------------------------------- constrained decoding of cards


def _card_at(fmt: CardFormat, words_per_section: int) -> str:
    """A card of the shape the grammar allows, with the given number of words in every section."""
    body = " ".join(["step"] * words_per_section)
    return "# Skill: probe-card\n" + "\n".join(f"## {h}\n{body}." for h in fmt.headings)


def test_grammar_word_bounds_keep_every_allowed_card_valid():
    for fmt, max_tokens in [(CardFormat(), None), (CardFormat(), 500), (CardFormat(), 160),
                            (CardFormat(("A b", "C"), max_words=60, min_words=30), None)]:
        lo, hi = section_word_bounds(fmt, max_tokens)
        assert 1 <= lo <= hi
        for n in (lo, hi):  # both extremes of what the grammar allows pass validation
            chk = check_card(_reply(_card_at(fmt, n), fmt.reply), fmt)
            assert chk.valid, (fmt, n, chk.problems)
        assert not check_card(_reply(_card_at(fmt, hi + (fmt.max_words - hi * len(fmt.headings))), fmt.reply), fmt).valid
    assert section_word_bounds(CardFormat(), 500)[1] * 2 * 7 + 16 + 12 * 7 <= 500


def test_impossible_card_format_is_named():
    with pytest.raises(ValueError, match="impossible"):
        section_word_bounds(CardFormat(max_words=25, min_words=20), None)
    with pytest.raises(ValueError, match="40 generator tokens"):
        section_word_bounds(CardFormat(), 40)
    with pytest.raises(ValueError, match="name 'snake'; allowed: kebab, free"):
        section_word_bounds(CardFormat(name="snake"), None)


def test_grammar_lists_headings_in_order_and_closes_the_json():
    fmt = CardFormat(("When to use", 'Say "x"'), reply="json")
    g = card_grammar(fmt, 300)
    root = g.splitlines()[0]
    assert root.index('"\\\\n## When to use\\\\n"') < root.index('"\\\\n## Say \\\\\\"x\\\\\\"\\\\n"')
    assert root.endswith('"\\"}"')
    lo, hi = section_word_bounds(fmt, 300)
    assert f"(sep word){{{lo - 1},{hi - 1}}}" in g
    sep = next(line for line in g.splitlines() if line.startswith("sep ::="))
    assert not re.search(r"[A-Za-z0-9]", sep.split("::=")[1].replace("\\\\n", ""))  # no word inside a separator


_GBNF_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|(\[(?:[^\]\\]|\\.)*\])|([a-z][a-z0-9_-]*)|(\{\d*,?\d*\}|[()|?*+]))')


def gbnf_regex(grammar: str) -> re.Pattern:
    """The language of a GBNF grammar of the subset card grammars use (literals, character classes, groups,
    alternatives, ?, *, +, {m,n}, rules that do not recurse) as a Python regex, to check what it accepts."""
    rules = dict(line.split(" ::= ", 1) for line in grammar.splitlines() if line.strip())

    def unescape(lit: str) -> str:
        return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), lit)

    def expr(name: str) -> str:
        body, pos, out = rules[name].strip(), 0, []
        while pos < len(body):
            m = _GBNF_TOKEN.match(body, pos)
            assert m, f"unsupported GBNF at {body[pos:]!r}"
            pos = m.end()
            lit, cls, ref, op = m.groups()
            out.append(f"(?:{re.escape(unescape(lit))})" if lit is not None else cls or (f"(?:{expr(ref)})" if ref else op))
        return "".join(out)

    return re.compile(expr("root"), re.DOTALL)


def test_the_tagged_grammar_accepts_a_tagged_reply_and_rejects_an_untagged_one():
    fmt = CardFormat()  # the tagged form, the default
    opening = REPLY_FORMS["tagged"].opening
    whole = gbnf_regex(card_grammar(fmt, 500))
    lo, hi = section_word_bounds(fmt, 500)
    for n in (lo, hi):
        reply = _reply(_card_at(fmt, n), "tagged")
        assert reply.startswith(opening) and whole.fullmatch(reply[len(opening):]), n
        assert check_card(reply, fmt).valid
    after = _reply(_card_at(fmt, lo), "tagged")[len(opening):]
    for bad in (after.removesuffix("\n</skill>"),  # untagged: the card alone
                after + "\nMore text.",  # text after </skill>
                json.dumps(after)[1:-1],  # the card as a JSON string, newlines escaped
                after.replace("## Procedure", "## Notes"),  # another heading
                after.replace("step", "step </skill>", 1)):  # a tag inside a section
        assert not whole.fullmatch(bad), bad[-60:]
    # sectioned decoding: a name, then section bodies that can hold neither a heading nor a tag
    plan = sections(fmt)
    name_g, body_g = gbnf_regex(plan.name_grammar), gbnf_regex(plan.body_grammar(hi))
    assert name_g.fullmatch("probe-card") and not name_g.fullmatch("Probe card")
    assert body_g.fullmatch("- step, step\n- step.") and body_g.fullmatch("step " * (lo - 1) + "step.")
    for bad in ("step\n## Notes", "step </skill>", "step\\n- step", 'say "step"'):
        assert not body_g.fullmatch(bad), bad
    # the json form's grammar closes the JSON string and object instead, newlines escaped
    js = gbnf_regex(card_grammar(replace(fmt, reply="json"), 500))
    reply = json.dumps({"skill": _card_at(fmt, lo)}, separators=(",", ":"))
    assert js.fullmatch(reply[len(REPLY_FORMS["json"].opening):]) and not js.fullmatch(after)


# The paper's selected ScienceWorld card (appendix D.4), verbatim but for one curly apostrophe ("task’s") made
# straight, and its numbered steps written as the grammar's "- " bullets without their periods (a bullet
# may not end in one).
SW_PAPER_CARD = """# Skill: Test Conductivity Using Available Setup
## When to apply
A material is suspected to be electrically conductive, and a test setup involving a power source and a light bulb is available.
## Success-preserving strategy
Maintain the material in the inventory, confirm the presence of a power source and light bulb, and ensure the setup is connected correctly. Use the task's specified destination for classification.
## Failure patterns to suppress
Using unverified equipment, attempting to use non-existent tools like a conductivity tester, or connecting the material without a complete circuit.
## Procedure
- Focus on the metal fork to examine its properties
- Pick up the metal fork to place it in the inventory
- Check for the presence of a power source and light bulb in the environment
- Connect the metal fork to the power source and light bulb to form a circuit
- Observe if the light bulb illuminates to determine conductivity
- If the light bulb lights up, place the metal fork in the destination specified by the current task
## Decision rules
If the light bulb does not illuminate, check the connections and ensure the circuit is complete. If the power source or light bulb is not available, do not proceed with the test. If the connection command is rejected, verify the presence of the required objects before retrying.
## Verification and recovery
Confirm that the light bulb lights up as a clear signal of conductivity. If the light bulb does not respond, check the setup for errors without assuming a material property. If the setup is confirmed but the signal is absent, retain uncertainty and avoid classification.
## Stop conditions
Stop when the light bulb illuminates, confirming conductivity, or when the setup is confirmed to be incomplete and no further actions can be taken."""


def test_each_envs_default_card_is_the_papers():
    alf = ("When to apply", "Success-preserving strategy", "Failure patterns to suppress", "Procedure",
           "Decision rules", "Verification and recovery", "Stop conditions")
    want = {  # appendix D's templates: (headings, name form, min, max words, reply form); the 20-word floor is ours
        "alfworld": (alf, "kebab", 20, 400, "tagged"),
        "scienceworld": (alf, "free", 20, 400, "tagged"),
        "webshop": (("When to Use", "Inputs to Identify", "Workflow", "Decision Rules"), "kebab", 50, 150, "json"),
        "tau2": (("When to apply", "Policy and tool checks", "Procedure", "Decision rules", "Verification and recovery",
                  "Stop or escalation conditions"), "free", 120, 240, "markdown"),
        "babyai": (alf, "kebab", 20, 400, "tagged"), "crafter": (alf, "kebab", 20, 400, "tagged"),
    }
    for env, (headings, name, lo, hi, reply) in want.items():
        f = paper_card(env)
        assert (f.headings, f.name, f.min_words, f.max_words, f.reply) == (headings, name, lo, hi, reply), env
    cfg = ScaffoldConfig.from_config({"llm": {"backend": "embedded"}, "benchmarks": {
        e: {"env": e} for e in want}, "scaffold": {"benchmarks": list(want)}})
    assert all(cfg.card_format(e) == paper_card(e) for e in want)
    # the template's {headings} shows the env's name form
    ev = build_evidence("scienceworld", "grp", [traj(0, True)])
    sw = GeneratorTemplate.load("scienceworld").messages(ev, paper_card("scienceworld"))
    alf_msgs = GeneratorTemplate.load("alfworld").messages(ev, paper_card("alfworld"))
    assert "# Skill: <short reusable mechanism name>\n## When to apply" in sw[1]["content"] + sw[0]["content"]
    assert "# Skill: <short-kebab-case-name>\n## When to apply" in alf_msgs[1]["content"] + alf_msgs[0]["content"]


@pytest.mark.parametrize("env", sorted(set(PAPER_CARDS) | {"babyai", "crafter"}))
def test_every_env_has_a_generator_template_asking_for_its_card(env):
    fmt = paper_card(env)
    system, user = (m["content"] for m in GeneratorTemplate.load(env).messages(
        build_evidence(env, "grp", [traj(0, True)]), fmt))
    text = system + "\n" + user
    assert all(f"## {h}" in text for h in fmt.headings) and NAME_FORMS[fmt.name].hint in text
    assert f"{fmt.min_words} to {fmt.max_words} words" in text and "{" + "reply}" not in text


def test_a_generator_template_is_checked_before_any_work(tmp_path):
    bad = tmp_path / "no_user_part.txt"
    bad.write_text("{task} {attempts}")
    for prompts, match in (({"babyai": str(tmp_path / "missing.txt")}, r"generator_prompts.babyai: .*missing.txt does not exist"),
                           ({"babyai": str(bad)}, r"generator_prompts.babyai: .*no '=== user ===' line"),
                           ({"webshop": str(bad)}, r"generator_prompts.webshop: not the env of any benchmark")):
        with pytest.raises(ValueError, match=match):
            ScaffoldConfig.from_config(_cfg(generator_prompts=prompts))


def test_a_free_name_is_valid_exactly_where_the_envs_rule_allows_it():
    sw, alf = paper_card("scienceworld"), paper_card("alfworld")
    ok = check_card(_reply(SW_PAPER_CARD, "tagged"), sw)
    assert ok.valid and ok.name == "Test Conductivity Using Available Setup", ok.problems
    bad = check_card(_reply(SW_PAPER_CARD, "tagged"), alf)  # the same card under ALFWorld's kebab-case rule
    assert bad.problems == ("the name 'Test Conductivity Using Available Setup' is not kebab-case "
                            "(lowercase words joined by '-')",)
    kebab = SW_PAPER_CARD.replace("Test Conductivity Using Available Setup", "test-conductivity-using-available-setup")
    assert check_card(_reply(kebab, "tagged"), alf).valid and check_card(_reply(kebab, "tagged"), sw).valid
    long = SW_PAPER_CARD.replace("Setup", "Setup" + " Now" * FREE_NAME_WORDS, 1)
    assert check_card(_reply(long, "tagged"), sw).problems == (f"the name has more than {FREE_NAME_WORDS} words",)
    # tau2's selected card name (appendix D.5) is free too; WebShop's is kebab-case
    tau2 = paper_card("tau2")
    card = "# Skill: Exchange item for same product type in delivered order\n" + "\n".join(
        f"## {h}\n" + "check " * 20 for h in tau2.headings)
    assert check_card(card, tau2).valid and not check_card(card, replace(tau2, name="kebab")).valid


def test_a_free_name_grammar_parses_the_papers_card_and_stays_bounded():
    fmt = paper_card("scienceworld")
    opening = REPLY_FORMS["tagged"].opening
    reply = _reply(SW_PAPER_CARD, "tagged")
    assert check_card(reply, fmt).valid
    # The grammar caps every section at the same number of words (52 here, so that 7 sections and the longest name
    # stay within 400): the paper's 76-word Procedure is over it, its first four steps (48 words) are not.
    whole = gbnf_regex(card_grammar(fmt))
    assert section_word_bounds(fmt)[1] == 52 and not whole.fullmatch(reply[len(opening):])
    steps = "\n- Observe if the light bulb illuminates to determine conductivity\n- If the light bulb lights up, place "
    cut = reply.replace(steps + "the metal fork in the destination specified by the current task", "")
    assert cut != reply
    assert check_card(cut, fmt).valid and whole.fullmatch(cut[len(opening):])
    assert not gbnf_regex(card_grammar(paper_card("alfworld"))).fullmatch(cut[len(opening):])  # its name
    name_g = gbnf_regex(sections(fmt).name_grammar)
    assert name_g.fullmatch("Test Conductivity Using Available Setup") and name_g.fullmatch("probe-card")
    assert name_g.fullmatch(" ".join(["Word"] * FREE_NAME_WORDS))
    for bad in (" ".join(["Word"] * (FREE_NAME_WORDS + 1)), "W" * 21, "Two  spaces", "A #b", "A\n## B", 'Say "x"'):
        assert not name_g.fullmatch(bad), bad
    # every card the free-name grammar allows, its longest name included, keeps the word limits
    lo, hi = section_word_bounds(fmt, 600)
    longest = _card_at(fmt, hi).replace("probe-card", " ".join(["Word"] * FREE_NAME_WORDS))
    assert check_card(_reply(longest, "tagged"), fmt).valid and check_card(_reply(_card_at(fmt, lo), "tagged"), fmt).valid
    # sectioned decoding lets a free name take more tokens than a kebab one; the JSON schema follows the name form
    assert generator_request(fmt, "grammar", "embedded", 600).sections.name_tokens > generator_request(
        paper_card("alfworld"), "grammar", "embedded", 600).sections.name_tokens
    for f, name in ((replace(fmt, reply="json"), "Test Conductivity"), (paper_card("webshop"), "probe-card")):
        pattern = card_json_schema(f)["properties"]["skill"]["pattern"]
        card = _card_at(f, 3).replace("probe-card", name)
        assert re.fullmatch(pattern[1:-1], card) and not re.fullmatch(
            pattern[1:-1], card.replace(name, "Probe card" if f.name == "kebab" else "A  b"))


class _CardClient:
    """A grammar-keeping server for sectioned decoding that wants to write `card`'s name and sections: each body
    is cut at the most words its grammar allows, as a server decoding under it would end the body there, and at
    its token limit (4 characters a token)."""

    def __init__(self, card: str):
        self.name = card.split("\n", 1)[0].removeprefix("# Skill: ")
        self.bodies = [part.split("\n", 1)[1] for part in card.split("\n## ")[1:]]
        self.his = []

    def chat(self, messages, **kw):
        from types import SimpleNamespace

        grammar = kw["extra_body"]["grammar"]
        if grammar.startswith("root ::= name"):
            out = self.name
        else:
            hi = int(re.search(r"\(sep word\)\{\d+,(\d+)\}", grammar).group(1)) + 1
            body = self.bodies[len(self.his)]
            self.his.append(hi)
            words = list(re.finditer(r"[A-Za-z0-9][\w'-]*", body))
            out = body if len(words) <= hi else body[:words[hi - 1].end()]
        cut = out[:4 * kw["max_tokens"]]
        record = SimpleNamespace(call_id="c", completion_tokens=-(-len(cut) // 4))
        return SimpleNamespace(text=messages[-1]["content"] + cut, finish_reason="stop" if cut == out else "length",
                               record=record, records=[record])


def test_sectioned_decoding_bounds_the_cards_words_not_each_sections():
    fmt = paper_card("scienceworld")
    req = generator_request(fmt, "grammar", "embedded", 900)
    ev = build_evidence("scienceworld", "grp", [traj(0, True)])
    # the paper's own card decodes as written: its 76-word Procedure is over one grammar's uniform cap (52)
    client = _CardClient(SW_PAPER_CARD)
    (card,), _ = generate_candidates(lambda j: client, ev, GeneratorTemplate.load("scienceworld"), fmt, 1, 900, req,
                                     count=len)
    assert card.valid and card.card == SW_PAPER_CARD, card.problems
    assert min(client.his) > section_word_bounds(fmt)[1] >= 52
    # a model that would write 100 words in every section: early sections take more than the uniform cap, every
    # later one keeps its floor, and the card stays within max_words
    long = "# Skill: probe card\n" + "\n".join(f"## {h}\n" + "step " * 99 + "step." for h in fmt.headings)
    client = _CardClient(long)
    (card,), _ = generate_candidates(lambda j: client, ev, GeneratorTemplate.load("scienceworld"), fmt, 1, 900, req,
                                     count=len)
    assert card.valid and card.n_words == fmt.max_words, card.problems
    assert client.his[0] > 52 and client.his[-1] == section_word_bounds(fmt)[0]


def test_card_format_per_env_config():
    # the flat form applies to every env (over each env's paper default); an env's own key overrides it there
    cfg = ScaffoldConfig.from_config(_cfg(card={"max_words": 300, "babyai": {"name": "free", "min_words": 30}}))
    sw, ba = cfg.card_format("scienceworld"), cfg.card_format("babyai")
    assert (sw.max_words, sw.min_words, sw.name) == (300, 20, "free")
    assert (ba.max_words, ba.min_words, ba.name, ba.headings) == (300, 30, "free", paper_card("babyai").headings)
    own = ScaffoldConfig.from_config(_cfg(card={"scienceworld": {"headings": ["Use", "Steps"], "name": "kebab"}}))
    assert own.card_format("scienceworld").headings == ("Use", "Steps") and own.card_format("babyai") == paper_card("babyai")
    with pytest.raises(ValueError, match=r"scaffold.card.webshop: neither a card key .* nor the env of a benchmark"):
        ScaffoldConfig.from_config(_cfg(card={"webshop": {"name": "free"}}))
    with pytest.raises(ValueError, match=r"scaffold.card.babyai.name: 'snake' is not allowed"):
        ScaffoldConfig.from_config(_cfg(card={"babyai": {"name": "snake"}}))
    with pytest.raises(ValueError, match=r"scaffold.card.babyai: unknown key\(s\) words"):
        ScaffoldConfig.from_config(_cfg(card={"babyai": {"words": 3}}))
    with pytest.raises(ValueError, match=r"config key scaffold.card.scienceworld \(the card on scienceworld\): .*impossible"):
        ScaffoldConfig.from_config(_cfg(card={"scienceworld": {"max_words": 30}}))


def test_json_reply_is_the_papers_contract():
    card = _card_at(CardFormat(), 3)
    ok = check_card(json.dumps({"skill": card}), CardFormat(reply="json"))
    assert ok.valid and ok.card == card and ok.name == "probe-card"
    for bad in ('{"skill": "# Skill: x', json.dumps({"skill": card, "extra": 1}), json.dumps({"card": card}),
                json.dumps({"skill": 3})):
        chk = check_card(bad, CardFormat(reply="json"))
        assert not chk.valid and "JSON object" in chk.problems[0]


def test_generator_request_per_backend():
    fmt = CardFormat(reply="json")
    emb = generator_request(fmt, "grammar", "embedded", 500)
    plan = emb.sections
    assert emb.prefill == '{"skill":"# Skill: ' and plan.name_grammar.startswith("root ::= name")
    assert plan.body_grammar(9).startswith("root ::= body")
    assert plan.literals == tuple(json.dumps(f"\n## {h}\n")[1:-1] for h in fmt.headings) and plan.closing == '"}'
    assert emb.with_grammar("g") == {"grammar": "g"} and emb.extra_body == {}
    vl = generator_request(fmt, "grammar", "vllm", 500)
    assert vl.extra_body["continue_final_message"] and not vl.extra_body["add_generation_prompt"]
    assert vl.with_grammar("g")["structured_outputs"] == {"grammar": "g"} and vl.sections == emb.sections
    single = generator_request(fmt, "grammar_single", "embedded", 500)
    assert single.sections is None and single.extra_body["grammar"] == card_grammar(fmt, 500)
    js = generator_request(fmt, "json_schema", "openai", 500)
    assert js.prefill == "" and js.extra_body["response_format"]["type"] == "json_schema"
    pattern = js.extra_body["response_format"]["json_schema"]["schema"]["properties"]["skill"]["pattern"]
    assert re.fullmatch(pattern[1:-1], _card_at(fmt, 2)) and not re.fullmatch(pattern[1:-1], "# Skill: x\n## Procedure\nx")
    assert generator_request(fmt, "none", "embedded", 500).extra_body == {}
    with pytest.raises(ValueError, match="json_schema"):
        generator_request(fmt, "grammar", "openai", 500)
    with pytest.raises(ValueError, match="generator_decoding"):
        generator_request(fmt, "regex", "embedded", 500)
    # The pre-fill is added once, whether the server echoes it (llama.cpp) or not (vLLM).
    assert emb.reply_text('{"skill":"# Skill: a"}') == emb.reply_text('a"}') == '{"skill":"# Skill: a"}'


def test_generator_request_per_reply_form():
    tagged = generator_request(CardFormat(), "grammar", "embedded", 500)  # the default: the paper's <skill> tags
    assert tagged.prefill == "<skill>\n# Skill: " and tagged.sections.closing == "\n</skill>"
    assert tagged.sections.literals[0] == "\n## When to apply\n"  # raw newlines: the card is not inside a JSON string
    md = generator_request(CardFormat(reply="markdown"), "grammar", "vllm", 500)
    assert md.prefill == "# Skill: " and md.sections.closing == "" and md.extra_body["continue_final_message"]
    # the paper's own decoding: the prompt asks for the form, nothing is pre-filled or constrained
    for backend in ("embedded", "openai"):
        assert generator_request(CardFormat(), "prompt", backend, 500) == generator_request(CardFormat(), "auto", "openai", 500)
    assert generator_request(CardFormat(), "prompt", "embedded", 500).prefill == ""
    assert generator_request(CardFormat(reply="json"), "auto", "openai", 500).extra_body["response_format"]
    # a JSON schema cannot give a tagged or a bare Markdown reply: refused, naming both keys
    for reply in ("tagged", "markdown"):
        with pytest.raises(ValueError, match=r"scaffold.generator_decoding: json_schema .* scaffold.generator_reply.ba"):
            generator_request(CardFormat(reply=reply), "json_schema", "vllm", 500, "scaffold.generator_reply.ba")
    with pytest.raises(ValueError, match="scaffold.generator_reply: 'xml'"):
        generator_request(CardFormat(reply="xml"), "grammar", "embedded", 500)


class _SectionClient:
    """A server for sectioned decoding: echoes the pre-fill as llama.cpp does, writes `words` words per body
    (one token per character), and cuts a part at its token limit as a server does (finish_reason length)."""

    def __init__(self, words: int = 2):
        self.words, self.seen = words, []

    def chat(self, messages, **kw):
        from types import SimpleNamespace

        self.seen.append((messages, kw))
        prefill = messages[-1]["content"]
        grammar = kw["extra_body"]["grammar"]
        full = "probe-card-long" if grammar.startswith("root ::= name") else \
            "- " + ", ".join(["stepping"] * self.words) + "."
        out = full[:kw["max_tokens"]]
        record = SimpleNamespace(call_id=f"c{len(self.seen)}", completion_tokens=len(out))
        return SimpleNamespace(text=prefill + out, finish_reason="length" if len(out) < len(full) else "stop",
                               record=record, records=[record])


def test_generate_candidates_decodes_sections_and_sends_prefill_and_grammar():
    fmt = CardFormat(reply="json")
    req = generator_request(fmt, "grammar", "embedded", 500)
    client = _SectionClient()
    ev = build_evidence("babyai", "grp", [traj(0, True)])
    cands, calls = generate_candidates(lambda j: client, ev, GeneratorTemplate.load("babyai"), fmt, 2, 500, req, count=len)
    assert [c.valid for c in cands] == [True, True], cands[0].problems
    assert cands[0].name == "probe-card-long" and cands[0].raw.endswith('."}')
    k = len(fmt.headings)
    assert len(calls) == 2 * (k + 1) and [c.call_id for c in cands] == ["c1", f"c{k + 2}"]  # a card's first request
    messages, kw = client.seen[0]
    assert messages[-1] == {"role": "assistant", "content": req.prefill} and kw["extra_body"]["grammar"] == req.sections.name_grammar
    # every later request continues the reply so far, under the body grammar
    messages, kw = client.seen[1]
    assert messages[-1]["content"] == req.prefill + "probe-card-long\\n## When to apply\\n"
    assert kw["extra_body"]["grammar"].startswith("root ::= body") and messages[:-1] == client.seen[0][0][:-1]


@pytest.mark.parametrize("reply", list(REPLY_FORMS))
def test_sectioned_cards_fit_the_token_limit_and_close_when_cut(reply):
    fmt = CardFormat(reply=reply)
    req = generator_request(fmt, "grammar", "embedded", 400)
    ev = build_evidence("babyai", "grp", [traj(0, True)])
    # 40 words per section would need ~3,000 tokens: every body is cut, and each still closes
    client = _SectionClient(words=40)
    (card,), calls = generate_candidates(lambda j: client, ev, GeneratorTemplate.load("babyai"), fmt, 1, 400, req, count=len)
    assert card.valid, card.problems
    assert card.raw.startswith(REPLY_FORMS[reply].opening) and card.raw.endswith(REPLY_FORMS[reply].closing)
    if reply == "json":
        assert json.loads(card.raw)["skill"] == card.card
    else:  # the card is the reply's own text, newlines unescaped
        assert card.card in card.raw and "\\n" not in card.raw and card.card.count("\n## ") == len(fmt.headings)
    assert len(card.raw) - len(req.prefill) <= 400  # one token per character: the reply's tokens
    assert sum(c.completion_tokens for c in calls) <= 400
    limits = [kw["max_tokens"] for _, kw in client.seen][1:]
    assert limits[-1] >= 4  # the last section kept its reserve
    assert max(limits) - min(limits) <= 1  # every body got an equal share: the first did not take the card's tokens
    with pytest.raises(ValueError, match="generator_max_tokens: 150 tokens"):
        generate_candidates(lambda j: client, ev, GeneratorTemplate.load("babyai"), fmt, 1, 150, req, count=len)


def test_close_cut_drops_only_a_trailing_separator():
    from skillrepro.studies.scaffold.cards import close_cut

    assert close_cut("turn left, ") == close_cut("turn left\\n- ") == close_cut("turn left\\") == "turn left"
    assert close_cut("turn left\n- ") == close_cut("turn left\n-") == close_cut("turn left\n") == "turn left"  # unescaped
    assert close_cut("turn lef") == "turn lef" and close_cut("turn left.") == "turn left." and close_cut("a-") == "a"


# ---------------------------------------------------------------- selection ablations (table 3)


def test_select_with_paper_rule_is_eq_10():
    assert select_with([0.1, 0.5, -0.2], [True, True, True]) == (1, [0.1, 0.5, -0.2])
    assert select_with([-0.1, -0.5], [True, True])[0] is None


def test_no_gate_injects_the_best_even_when_not_positive():
    assert select_with([-0.1, -0.5, 0.9], [True, True, False], gate=False)[0] == 0
    assert select_with([float("nan")], [True], gate=False)[0] is None  # nothing eligible: still skill-free


def test_shuffled_keeps_whether_but_pairs_utilities_with_other_cards():
    us, ok = [0.3, -0.2, 0.1, float("nan")], [True, True, True, True]
    picks = set()
    for seed in range(40):
        j, used = select_with(us, ok, selection="shuffled", rng=random.Random(seed))
        assert sorted(used[:3]) == sorted(us[:3]) and math.isnan(used[3])  # a permutation of the eligible ones
        assert j is not None and used[j] == 0.3
        picks.add(j)
    assert picks == {0, 1, 2}  # the card injected is not tied to its own utility
    assert select_with([-0.3, -0.1], [True, True], selection="shuffled", rng=random.Random(1))[0] is None


def test_random_selection_draws_among_eligible_when_the_gate_opens():
    us, ok = [0.3, -0.2, 0.1], [True, True, False]
    picks = {select_with(us, ok, selection="random", rng=random.Random(s))[0] for s in range(40)}
    assert picks == {0, 1}
    assert select_with([-0.3, -0.1], [True, True], selection="random")[0] is None
    with pytest.raises(ValueError, match="'best'"):
        select_with(us, ok, selection="best")


def test_selection_for_query_applies_the_ablation_reproducibly():
    scouts = [traj(0, True), traj(1, False)]
    cands = [CandidateRecord("b", "grp", "7", j, "", "c", "n", 30, True, "", "") for j in range(3)]
    utils = utilities_for_query("b", "grp", scouts, cands, {"ep0": -1.0, "ep1": -1.0},
                                {(0, "ep0"): -0.9, (0, "ep1"): -1.0, (1, "ep0"): -1.2, (1, "ep1"): -0.9,
                                 (2, "ep0"): -1.1, (2, "ep1"): -1.0})
    assert [round(u.utility, 3) for u in utils] == [0.05, -0.15, -0.05]
    assert selection_for_query("b", "grp", scouts, cands, utils, 0.0).selected == 0
    a = selection_for_query("b", "grp-random", scouts, cands, utils, 0.0, "random")
    assert a.selected == selection_for_query("b", "grp-random", scouts, cands, utils, 0.0, "random").selected
    assert a.utility == utils[a.selected].utility  # the record keeps the card's own utility
    ng = [u for u in utils]
    for u in ng:
        u.utility -= 1.0
    assert selection_for_query("b", "grp", scouts, cands, ng, 0.0).selected == -1
    assert selection_for_query("b", "grp-no_gate", scouts, cands, ng, 0.0, gate=False).selected == 0


# ---------------------------------------------------------------- configuration


def _cfg(**scaffold):
    return {"llm": {"backend": "embedded"}, "benchmarks": {"sw": {"env": "scienceworld"}, "ba": {"env": "babyai"}},
            "scaffold": {"benchmarks": ["sw", "ba"], "variants": ["grp"], **scaffold}}


def test_config_ablations_splits_and_executor():
    cfg = ScaffoldConfig.from_config(_cfg(ablations={"grp-random": {"of": "grp", "selection": "random"}},
                                          splits={"sw": {"test_ood": ["power-component@test"]}},
                                          executor={"sw": {"max_tokens": 384}}))
    assert cfg.selection_variants == ("grp", "grp-random")
    assert cfg.ablation("grp-random").selection == "random" and cfg.ablation("grp") == Ablation(of="grp")
    assert cfg.splits["sw"]["test_ood"] == ("power-component@test",)
    from skillrepro.config import LLMConfig
    llm = LLMConfig(max_tokens=512)
    assert executor_llm(llm, cfg, "sw").max_tokens == 384 and executor_llm(llm, cfg, "ba").max_tokens == 512
    with pytest.raises(ValueError, match="ablations.anc-x"):
        ScaffoldConfig.from_config(_cfg(ablations={"anc-x": {"of": "anc"}}))
    with pytest.raises(ValueError, match="'nope'"):
        ScaffoldConfig.from_config(_cfg(splits={"nope": {"train": ["power-component@train"]}}))
    with pytest.raises(ValueError, match="json_schema"):  # an API does not continue a pre-filled reply
        ScaffoldConfig.from_config({**_cfg(generator_decoding="grammar"), "llm": {"backend": "openai"}})
    # on an API the default decodes the paper's way, the prompt alone; the json form gets its JSON schema
    auto = ScaffoldConfig.from_config({**_cfg(generator_reply={"babyai": "json"}), "llm": {"backend": "openai"}})
    assert auto.generator_request("openai", "scienceworld") == generator_request(CardFormat(), "prompt", "openai", 600)
    assert "response_format" in auto.generator_request("openai", "babyai").extra_body
    assert not auto.generator_request("openai", "babyai").prefill
    with pytest.raises(ValueError, match="impossible"):
        ScaffoldConfig.from_config(_cfg(card={"max_words": 25}))


def test_figure2_keeps_every_point_n_eval_supports():
    """Figure 2(b) (groups not tied) needs K rollouts a condition, 2(a) (sign disagreement of two disjoint halves)
    2K: for every n_eval, every power of two up to it is a 2(b) point and those with 2K <= n_eval are 2(a)'s; a K
    over n_eval is refused naming the key. The paper preset reaches the paper's points: 2(a) to K = 8, 2(b) from
    5 to 40 extra rollouts a query."""
    from skillrepro.config import ConfigError, load_yaml

    for n_eval in range(1, 21):
        ks = ScaffoldConfig.from_config(_cfg(n_eval=n_eval)).figure2_ks
        assert set(ks) == {2 ** i for i in range(6) if 2 ** i <= n_eval}, n_eval
        o = _outcomes({(q, c): [int((i + len(q) + c) % 3 == 0) for i in range(n_eval)]
                       for q in ("q1", "q22") for c in (-1, 0, 1)})
        est = pilot_rollout_estimates(o, ks)
        assert est.K.tolist() == list(ks) and est.non_tied_fraction.notna().all()
        assert set(est.K[est.sign_disagreement.notna()]) == {k for k in ks if 2 * k <= n_eval}, n_eval
    assert ScaffoldConfig.from_config(_cfg(n_eval=9, pilot_ks=[4, 2])).figure2_ks == (4, 2)
    with pytest.raises(ConfigError, match=r"scaffold.pilot_ks: K = 16 needs K rollouts .*scaffold.n_eval is 8"):
        ScaffoldConfig.from_config(_cfg(n_eval=8, pilot_ks=[1, 16]))
    paper = load_yaml(ROOT / "configs/scaffold-paper.yaml")["scaffold"]
    ks = ScaffoldConfig.from_config(_cfg(n_eval=paper["n_eval"])).figure2_ks
    assert max(k for k in ks if 2 * k <= paper["n_eval"]) >= 8  # 2(a) at K = 8
    assert {(paper["n_candidates"] + 1) * k for k in ks} >= {5, 40}  # 2(b) at 5 and 40 extra rollouts


def test_generator_reply_is_the_papers_per_benchmark_unless_configured():
    cfg = ScaffoldConfig.from_config(_cfg())
    assert cfg.generator_reply == {"babyai": "tagged", "scienceworld": "tagged"}  # appendix D: <skill> tags
    assert cfg.card_format("scienceworld") == replace(paper_card("scienceworld"), reply="tagged")
    assert cfg.generator_request("embedded", "scienceworld").prefill == "<skill>\n# Skill: "
    own = ScaffoldConfig.from_config(_cfg(generator_reply={"babyai": "json"}))
    assert own.card_format("babyai").reply == "json" and own.card_format("scienceworld").reply == "tagged"
    assert own.generator_request("embedded", "babyai").sections.closing == '"}'
    with pytest.raises(ValueError, match="scaffold.generator_reply.webshop: not the env of any benchmark"):
        ScaffoldConfig.from_config(_cfg(generator_reply={"webshop": "json"}))
    with pytest.raises(ValueError, match="scaffold.generator_reply.babyai: 'xml' is not allowed"):
        ScaffoldConfig.from_config(_cfg(generator_reply={"babyai": "xml"}))
    # json_schema decodes only the json form: refused before any work, naming the benchmark's reply key
    with pytest.raises(ValueError, match=r"generator_decoding: json_schema .* scaffold.generator_reply.babyai"):
        ScaffoldConfig.from_config(_cfg(generator_decoding="json_schema", generator_reply={"scienceworld": "json"}))
    assert ScaffoldConfig.from_config(_cfg(generator_decoding="json_schema",
                                           generator_reply={"scienceworld": "json", "babyai": "json"}))


def test_shipped_templates_ask_for_their_reply_form():
    ev = build_evidence("babyai", "grp", [traj(0, True)])
    for env in ("babyai", "alfworld", "scienceworld"):
        for reply in REPLY_FORMS:
            system = GeneratorTemplate.load(env).messages(ev, CardFormat(reply=reply))[0]["content"]
            assert "{reply}" not in system and "{max_words}" not in system
            assert ("<skill>" in system) == (reply == "tagged") and ("JSON object" in system) == (reply == "json")


def test_sample_queries_rejects_unknown_split_before_any_work():
    from skillrepro.config import BenchmarkConfig

    cfg = ScaffoldConfig.from_config(_cfg(split="test_ood"))
    with pytest.raises(ValueError, match="scaffold.split"):
        sample_queries(BenchmarkConfig("ba", "babyai", 3), cfg, 0)
    cfg = ScaffoldConfig.from_config(_cfg(splits={"ba": {"train": ["x@train"]}}))
    with pytest.raises(ValueError, match="scienceworld only"):
        sample_queries(BenchmarkConfig("ba", "babyai", 3), cfg, 0)


@pytest.mark.integration
def test_paper_scienceworld_pools_have_the_papers_sizes():
    """Appendix A.1: 460 training variations, 230 Test-ID, 155 Test-OOD (real ScienceWorld partitions)."""
    import yaml

    from skillrepro.config import BenchmarkConfig

    paper = yaml.safe_load((ROOT / "configs/scaffold-paper.yaml").read_text())
    bench = BenchmarkConfig("sciworld", "scienceworld", 50, {"family": "electricity"})
    # Each pool drawn as the training split in turn (so without the held-out section, which holds two of them).
    own = {k: v for k, v in paper["scaffold"].items() if k != "heldout"}
    for split, size in (("train", 460), ("test_id", 230), ("test_ood", 155)):
        cfg = ScaffoldConfig.from_config({"llm": paper["llm"], "benchmarks": paper["benchmarks"],
                                          "scaffold": {**own, "split": split, "n_queries": size}})
        tasks = sample_queries(bench, cfg, 0)
        assert len(set(tasks)) == size
        with pytest.raises(ValueError, match=f"has {size} tasks"):
            sample_queries(bench, replace(cfg, n_queries=size + 1), 0)
    assert {t.rsplit(":", 1)[0] for t in tasks} == {"test-conductivity-of-unknown-substances",
                                                    "power-component-renewable-vs-nonrenewable-energy"}


# ---------------------------------------------------------------- pilot diagnostics (figures 2-3)


def _outcomes(table):
    """{(task, candidate): [successes by rollout index]} -> the rollout_outcomes frame."""
    return pd.DataFrame([{"benchmark": "b", "variant": "grp", "task_id": t, "candidate": c, "k": k, "success": float(x)}
                         for (t, c), xs in table.items() for k, x in enumerate(xs)])


def test_pilot_sign_disagreement_and_ties_by_hand():
    o = _outcomes({("q1", -1): [0, 0, 1, 1], ("q1", 0): [1, 0, 0, 1], ("q1", 1): [0, 0, 0, 0],
                   ("q2", -1): [1, 1, 1, 1], ("q2", 0): [1, 1, 1, 1], ("q2", 1): [1, 1, 1, 1]})
    t = pilot_rollout_estimates(o, [1, 2, 4]).set_index("K")
    # K=1: q1 c0 estimates +1 (k=0) and 0 (k=1), c1 0 and 0: none both non-zero; q2: all 0.
    assert t.loc[1, "sign_disagreement"] == 0 and t.loc[1, "n_pairs_split"] == 4
    # K=2: q1 c0 = 0.5 - 0 and 0.5 - 1 (opposite); c1 = 0 and -1; q2 zeros: one disagreement in 4 pairs.
    assert t.loc[2, "sign_disagreement"] == pytest.approx(1 / 4)
    assert math.isnan(t.loc[4, "sign_disagreement"])  # 8 rollouts would be needed
    assert t.loc[1, "non_tied_fraction"] == 0.5 and t.loc[4, "extra_rollouts_per_query"] == 12


def test_pilot_competence_by_hand():
    o = _outcomes({("q1", -1): [0, 0, 0, 1], ("q1", 0): [1, 1, 0, 0], ("q1", 1): [0, 0, 0, 0],
                   ("q2", -1): [1, 1, 1, 1], ("q2", 0): [1, 0, 1, 1], ("q2", 1): [1, 1, 1, 1]})
    # independent probes (rollouts 4-7): q1 succeeds once, q2 four times; q3 has too few probes
    probes = pd.DataFrame({"benchmark": "b", "task_id": ["q1"] * 4 + ["q2"] * 4 + ["q3"] * 3,
                           "k": [4, 5, 6, 7] * 2 + [4, 5, 6], "success": [0, 1, 0, 0] + [1] * 4 + [1] * 3})
    t = pilot_competence(o, probes).set_index("probe_successes")
    assert list(t.index) == [1, 4] and (t.n_queries == 1).all()
    assert t.loc[1, "mean_effect"] == pytest.approx((0.25 - 0.25) / 2) and t.loc[1, "best_effect"] == 0.25
    assert t.loc[1, "queries_with_mixed_signs"] == 1 and t.loc[4, "queries_with_mixed_signs"] == 0
    assert t.loc[4, "mean_effect"] == pytest.approx(-0.125) and t.loc[4, "best_effect"] == 0
    assert math.isnan(t.loc[4, "mean_effect_ci_low"])  # one query: no interval
    with pytest.raises(ValueError, match="independent of the baseline"):
        pilot_competence(o, o[o.candidate == -1])  # the baseline's own rollouts as probes


def test_rollout_outcomes_joins_free_and_candidates():
    free = pd.DataFrame({"benchmark": ["b"] * 2, "task_id": ["q"] * 2, "k": [0, 1], "success": [True, False]})
    cand = pd.DataFrame({"benchmark": ["b"], "task_id": ["q"], "k": [0], "success": [True],
                         "variant": ["grp/eval/c3"]})
    o = rollout_outcomes(free, cand, ["grp", "anc"])
    assert len(o) == 5 and set(o[o.candidate == 3].variant) == {"grp"} and o.success.dtype == float


@pytest.mark.workflow
def test_paper_preset_plans_every_benchmark_variant_and_ablation(tmp_path):
    """configs/scaffold-paper.yaml (with the ALFWorld data path cleared: generated games) dry-runs with one
    selection per benchmark x (2 utility variants + 3 ablations) and one GRPO update per iteration of every chain
    (2 utility variants, table 3's 4 trained ablations, the SkillRL-style chain, plain GRPO), and plays direct
    skill prompting on the held-out splits beside every policy."""
    import os
    import subprocess
    import sys

    import yaml

    cfg = yaml.safe_load((ROOT / "configs/scaffold-paper.yaml").read_text())
    cfg["benchmarks"]["alfworld"]["options"]["data_path"] = None
    assert cfg["scaffold"]["training"]["steps"] == {"alfworld": 100, "sciworld": 160}  # table 5
    # the DAG of 100 and 160 iterations is 52 times this one; the benchmarks' own numbers of steps stay apart
    cfg["scaffold"]["training"]["steps"] = {"alfworld": 2, "sciworld": 3}
    assert cfg["scaffold"]["training"]["cohort_iterations"] == 4
    cfg["scaffold"]["training"]["cohort_iterations"] = 1  # at most steps
    skills = cfg["scaffold"]["heldout"]["skills"]  # the cards live in the repository's configs/, not in the copy
    cfg["scaffold"]["heldout"]["skills"] = {b: str(ROOT / path) for b, path in skills.items()}
    study_workflow(tmp_path, cfg)
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "scaffold_all", "scaffold_grpo", "--cores", "8"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = dict(re.findall(r"^(scaffold_\w+)\s+(\d+)$", proc.stdout, flags=re.M))
    iterations = 2 + 3  # per chain, over the two benchmarks
    variants = 2 * iterations  # utility variants x iterations, each with one selection and one update
    # table 3's four trained ablations and the SkillRL-style chain: chains of their own, each generating, scoring
    # and selecting its own cards
    ablations = 5 * iterations
    chains = variants + ablations
    plain = iterations  # plain GRPO's iterations: Scouts, Post-Scouts, an update, no cards
    assert counts["scaffold_select"] == str(10 + chains) and counts["scaffold_generate"] == str(4 + chains)
    assert counts["scaffold_grpo_update"] == str(chains + plain) and counts["scaffold_cohort_eval"] == str(variants)
    assert counts["scaffold_cohort_early"] == str(2 * 2)  # iteration 0's fresh early rollouts per chain
    # figure 3(b): 4 probe rollouts per benchmark after its 16 skill-free baseline rollouts
    assert counts["scaffold_eval_free"] == str(2 * (16 + 4))
    assert counts["scaffold_post_scout"] == str(10 * 4 + (chains + plain) * 4)
    # N=4 Scouts per benchmark, shared by every variant of the validation experiment; a chain's are its own
    assert counts["scaffold_scout"] == str(8 + (chains + plain) * 4)
    # held-out: per benchmark the base model, direct skill prompting and the last checkpoint (every: 10 > steps)
    # of every chain
    assert counts["scaffold_heldout_tasks"] == "2" and counts["scaffold_heldout_eval"] == str(2 * (1 + 1 + 2 + 5 + 1))


def test_training_instances_name_their_chain_and_iteration():
    from skillrepro.studies.scaffold.paths import Instance
    from skillrepro.studies.scaffold.settings import ScaffoldConfig, training_iteration

    assert Instance.named("babyai") == Instance("babyai")
    assert Instance.named("sciworld_electricity@grp12") == Instance("sciworld_electricity", "grp", 12)
    with pytest.raises(ValueError, match="<benchmark>@<variant><iteration>"):
        Instance.named("babyai@grp")
    cfg = ScaffoldConfig(benchmarks=("babyai",), n_queries=128, scorer_model="base.gguf", training={"query_batch_size": 16})
    assert training_iteration(cfg, None, 0) is cfg
    assert (training_iteration(cfg, "grp", 0).n_queries, training_iteration(cfg, "grp", 0).scorer_model) == (16, "base.gguf")
    assert training_iteration(cfg, "grp", 3).scorer_model is None  # checkpoint 3 scores its own utilities
