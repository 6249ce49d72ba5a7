"""Voyager's propose -> attempt -> propose loop inside a Crafter training episode (`goal_proposal:
on_achievement`, the default): a new achievement, by a primitive or inside a skill call, ends the current
goal's attempt and the curriculum is asked again from the current state. Then the sleep phase: its critic,
and a skill writer's reply stored append-only, each name it redefines renamed with the reply's calls to it."""
from __future__ import annotations

import pytest
from dataclasses import replace

from skillrepro.agent import EpisodeSpec
from skillrepro.benchmarks import load_benchmark
from skillrepro.benchmarks.crafter import CrafterEnv
from skillrepro.config import LLMConfig, MethodConfig
from skillrepro.methods import get_method, bind
from skillrepro.methods.common import append_functions
from skillrepro.methods.voyager import one_skill, rename_taken
from skillrepro.runner import run_batch
from skillrepro.skills import Library, parse_functions
from skillrepro.skills.isolation import SandboxPolicy
from skillrepro.skills.sandbox import SandboxSession
from scripted import RoleFake
from sleep_phases import CRAFTER, calls_at, ctx_for

HIT = 'def hit_twice():\n    """Hit what is in front of you, twice."""\n    do()\n    return do()\n'
GRANTS = ["collect_wood", "place_table"]  # what the 1st and 2nd do() of the episode unlock (scripted world)


def call_in_crafter(library, skill: str, task: str):
    """A skill of `library` called as an actor calls it, on a fresh Crafter task: (outcome, frames, primitive steps)."""
    env = load_benchmark(CRAFTER).make(task)
    env.reset()
    frames = []
    session = SandboxSession(source=library.source, env=env, record=frames.append)
    try:
        return session.call_skill(skill, []), frames, env.n_primitive_steps
    finally:
        session.close()
        env.release()


@pytest.fixture(scope="module")
def episode(tmp_path_factory):
    """One training episode: step 0 the actor's do() unlocks Collect Wood; step 1 its skill hit_twice()
    unlocks Place Table inside the call; steps 2-4 noop."""
    root = tmp_path_factory.mktemp("voyager_loop")
    Library(0, parse_functions(HIT)).write(root / "library" / "v0")
    task = load_benchmark(CRAFTER).sample_tasks("train", 1, 42)
    bench = replace(CRAFTER, llm_call_budget=5)
    systems: list[str] = []  # each actor request's system prompt when it was sent (the list is updated in place)
    script = ["Action: do()", "Action: hit_twice()"] + ["Action: noop()"] * 3
    fake = RoleFake(curriculum=["Reasoning: trees.\nTask: Collect wood", "Task: Place a table",
                                "Task: Make a wood pickaxe"],
                    actor=lambda messages: (systems.append(messages[0]["content"]),
                                            script[len(systems) - 1])[1])
    mp = pytest.MonkeyPatch()
    real = CrafterEnv._apply

    def scripted(self, name, args):  # the real step, plus an achievement for each of the first do()s
        out = real(self, name, args)
        if name == "do" and self.world._player.achievements.get(GRANTS[-1], 0) == 0:
            a = next(a for a in GRANTS if self.world._player.achievements[a] == 0)
            self.world._player.achievements[a] = 1
        return out

    mp.setattr(CrafterEnv, "_apply", scripted)
    try:
        run_batch(bench=bench, llm=LLMConfig(), library_dir=root / "library" / "v0", task_ids=task,
                  spec=EpisodeSpec("crafter/voyager/seed0", "crafter", "voyager", "voyager", 0, "train", 0, 0),
                  out_dir=root / "train" / "batch0", method=bind(MethodConfig("voyager", "voyager", {"retrieval": "tfidf"})),
                  client=fake)
    finally:
        mp.undo()
    return {"root": root, "fake": fake, "task": task[0], "systems": systems}


def test_a_new_achievement_asks_the_curriculum_again_from_the_current_state(episode):
    fake = episode["fake"]
    # one call before the episode, one after each step that unlocked an achievement (step 1's inside a skill)
    assert fake.roles() == ["curriculum", "actor", "curriculum", "actor", "curriculum", "actor", "actor", "actor"]
    first, second, third = (m[1]["content"] for r, _, m in fake.seen if r == "curriculum")
    assert "Current state" not in first and "up to 1 concrete tasks" in fake.seen[0][2][0]["content"]
    assert "Collect wood (unlocked: collect wood)" in second and "Current state:\n<<OBSERVATION_BEGIN>>" in second
    assert "Achievements unlocked in this episode: collect wood" in second and "Inventory:" in second
    assert "Achievements unlocked: 1/22." in second  # the state after step 0, not the opening one
    assert "Collect wood (unlocked: collect wood); Place a table (unlocked: place table)" in third
    assert "Achievements unlocked: 2/22." in third


def test_the_actor_sees_each_new_goal_from_its_next_step_on(episode):
    systems = episode["systems"]
    assert len(systems) == 5
    assert "Goal for this episode: Collect wood" in systems[0]
    assert "Goal for this episode: Place a table" in systems[1] and "Collect wood" not in systems[1]
    assert all("Goal for this episode: Make a wood pickaxe" in s for s in systems[2:])


def test_every_curriculum_call_is_recorded_with_its_own_session_and_judged(episode):
    root, prefix = episode["root"], f"crafter/voyager/seed0/train/c0/{episode['task']}/curriculum"
    calls = calls_at(root / "train" / "batch0")
    assert [c.session_id for c in calls if c.role == "curriculum"] == [prefix, prefix + "/2", prefix + "/3"]
    assert [c.role for c in calls[:3]] == ["curriculum"] * 3  # cost: stored with the episode's calls
    yes, no = "Success: yes\nCritique: none", "Success: no\nCritique: get wood first"
    writer = '```python\ndef chop():\n    """Hit a tree for wood."""\n    return do()\n```'
    fake = RoleFake(critic=[yes, no, no], skill_writer=[writer])
    v1 = get_method("voyager").induce(ctx_for(root, "voyager", "voyager", {"retrieval": "tfidf"},
                                              bench=CRAFTER, tag="_v"), fake)
    goals = [m[1]["content"].split("\n", 1)[0] for r, _, m in fake.seen if r == "critic"]
    assert goals == ["Goal: Collect wood", "Goal: Place a table", "Goal: Make a wood pickaxe"]
    assert v1.meta["completed_goals"] == ["Collect wood"] and [f.name for f in v1.functions] == ["hit_twice", "chop"]


def test_a_critic_reply_empty_at_its_cap_is_no_verdict_not_a_no(episode):
    """A reasoning model that spent its cap (asked twice by the client) leaves the goal unjudged: not failed,
    no skill, and the transcript says why."""
    import json

    root = episode["root"]
    fake = RoleFake(critic=["", "Success: no\nCritique: x", ""], skill_writer=["unused"])
    v1 = get_method("voyager").induce(ctx_for(root, "voyager", "voyager", {"retrieval": "tfidf"},
                                              bench=CRAFTER, tag="_empty"), fake)
    assert v1.meta["completed_goals"] == [] and v1.meta["failed_goals"] == ["Place a table"]
    entries = [json.loads(line) for line in (root / "induce_empty" / "v1" / "transcript.jsonl").read_text().splitlines()]
    assert [e.get("no_verdict") for e in entries] == ["empty reply (stop)", None, "empty reply (stop)"]


def test_goal_proposal_takes_its_two_modes_only():  # upfront played: test_methods.voyager_run
    opts = get_method("voyager").parse_options({"goal_proposal": "upfront", "max_goals": 3}, "v")
    assert opts.goal_proposal == "upfront"
    with pytest.raises(Exception, match="goal_proposal"):
        get_method("voyager").parse_options({"goal_proposal": "sometimes"}, "v")


@pytest.mark.parametrize("order", ["helper first", "skill first"])
def test_a_skill_is_stored_with_its_helpers_whatever_their_order(episode, order):
    """One skill per achieved goal, its code whole, through the real writer: the function the reply's others
    serve is the skill (listed), the ones it calls are kept as private helpers, so calling the skill never meets
    a NameError; a function the skill does not call is dropped."""
    helper = 'def face_tree():\n    """Turn to the nearest tree."""\n    return noop()\n'
    skill = 'def collect_wood():\n    """Collect one wood."""\n    face_tree()\n    return do()\n'
    stray = 'def unrelated():\n    """Not used by the skill."""\n    return noop()\n'
    code = helper + "\n" + skill if order == "helper first" else skill + "\n" + helper
    yes, no = "Success: yes\nCritique: none", "Success: no\nCritique: get wood first"
    fake = RoleFake(critic=[yes, no, no], skill_writer=[f"```python\n{code}\n{stray}```"])
    ctx = ctx_for(episode["root"], "voyager", "voyager", {"retrieval": "tfidf"}, bench=CRAFTER, tag="_v")
    v1 = get_method("voyager").induce(ctx, fake)
    kept = {f.name: f.public for f in v1.functions[len(ctx.library.functions):]}
    assert kept == {"collect_wood": True, "face_tree": False}
    assert next(f for f in v1.functions if f.name == "collect_wood").callees == ("face_tree",)
    # called as an actor would: the skill runs whole, its helper nested under it, each step the world's
    out, frames, steps = call_in_crafter(v1, "collect_wood", episode["task"])
    assert out.ok, out
    top = next(f for f in frames if not f.parent_frame_id)
    assert top.function == "collect_wood" and [f.function for f in frames if f.parent_frame_id] == ["face_tree"]
    assert steps == 2  # face_tree's noop() and the skill's do()


def test_test_episodes_list_the_top_k_or_the_whole_library():
    lib = Library(1, parse_functions("\n".join(
        f'def skill_{i}():\n    """Skill number {i}."""\n    return do()\n' for i in range(8))
        + '\ndef _helper():\n    return 1\n'))
    voyager = get_method("voyager")
    assert len(voyager.visible(lib, voyager.parse_options({"retrieval": "tfidf"}, "v"))) == 5
    whole = voyager.visible(lib, voyager.parse_options({"retrieval": "tfidf", "eval_skills": "library"}, "v"))
    assert whole == [f"skill_{i}" for i in range(8)]  # every public skill, no private helper


# ------------------------------------------------------------------------------------------ taken names
OLD = ('def helper():\n    """The library\'s helper."""\n    return noop()\n\n\n'
       'def collect_wood():\n    """The library\'s skill."""\n    return do()\n')
# A reply that redefines both names it needs: the new skill calls its own new helper, as the model wrote it.
REPLY = '''def helper(times):
    """Face the nearest tree, then wait."""
    # a comment the rename keeps, mentioning helper
    for _ in range(times):
        noop()
    return noop()


def collect_wood():
    """Collect one wood with helper()."""
    helper(1)
    return do()
'''


def crafter_primitives() -> set[str]:
    return {p.name for p in load_benchmark(CRAFTER).primitives()}


def test_every_taken_name_of_a_reply_is_renamed_with_its_calls():
    """The helper-then-skill reply over a library that holds both names: both are renamed, the reply's call
    follows its helper, its text (docstrings, comments) stays, and the skill is stored with its helper."""
    lib = Library(0, parse_functions(OLD))
    primitives = crafter_primitives()
    code = rename_taken(REPLY, {f.name for f in lib.functions} | primitives)
    assert code == (REPLY.replace("def helper(", "def helper_2(").replace("def collect_wood(", "def collect_wood_2(")
                    .replace("    helper(1)", "    helper_2(1)"))
    added, refused = append_functions(lib, code, primitives, SandboxPolicy())
    assert refused == []
    assert [(f.name, f.public, f.callees) for f in one_skill(added)] == [
        ("helper_2", False, ()), ("collect_wood_2", True, ("helper_2",))]


def test_names_not_taken_stay_and_library_calls_are_untouched():
    """Only the reply's own taken definitions move: a new name keeps its name, and a call to a library
    function the reply does not redefine still reaches the library's."""
    reply = ('def chop():\n    """Chop with the library\'s hit_twice."""\n    hit_twice()\n    return helper()\n\n\n'
             'def helper():\n    return do()\n')
    out = rename_taken(reply, {"helper", "hit_twice", "do", "noop"})
    assert out == reply.replace("return helper()", "return helper_2()").replace("def helper(", "def helper_2(")
    assert rename_taken(reply, {"hit_twice", "do"}) == reply  # nothing the reply defines is taken


def test_a_rename_skips_every_name_the_reply_uses():
    """The numbered name is free of the library, of the reply's own definitions and variables, and of the
    reply's other renames."""
    reply = ('def helper():\n    return noop()\n\n\n'
             'def helper_3():\n    helper_4 = helper()\n    return helper_4\n\n\n'
             'def helper_5_2():\n    return helper_5()\n')
    out = rename_taken(reply, {"helper", "helper_2", "helper_5", "noop"})
    # helper_2 is the library's; helper_3 and helper_4 the reply's; helper_5 is taken, so is renamed itself
    # (the reply calls it without defining it: a library function, untouched)
    assert [f.name for f in parse_functions(out)] == ["helper_6", "helper_3", "helper_5_2"]
    assert "helper_4 = helper_6()" in out and "return helper_5()" in out
    two = rename_taken("def a():\n    return a_2()\n\n\ndef a_2():\n    return 1\n", {"a", "a_2"})
    assert [f.name for f in parse_functions(two)] == ["a_3", "a_2_2"] and "return a_2_2()" in two


def test_a_rename_is_of_the_identifier_everywhere_but_attributes():
    """A local spelled like the renamed function is renamed with it, consistently (the code means what it
    meant); an attribute is another name, and comments and strings are text."""
    reply = '''def helper():
    return noop()


def uses(env, items):
    env.helper("helper")  # helper, the comment
    got = [helper for helper in items]
    return list(map(helper, got))
'''
    out = rename_taken(reply, {"helper", "noop"})
    assert out == (reply.replace("def helper():", "def helper_2():")
                   .replace("[helper for helper in items]", "[helper_2 for helper_2 in items]")
                   .replace("map(helper,", "map(helper_2,"))


def test_code_that_does_not_parse_is_left_for_append_functions_to_refuse():
    broken = "def collect_wood(:\n    return do()\n"
    assert rename_taken(broken, {"collect_wood"}) == broken


def test_induce_stores_a_reply_that_redefines_taken_names_as_renamed_skill(episode, tmp_path):
    """Through the sleep phase: over a library that holds helper and collect_wood, the reply adds
    collect_wood_2 (listed) with helper_2 (private), and the new skill runs its own helper."""
    import json
    import shutil

    Library(0, parse_functions(OLD + "\n\n" + HIT)).write(tmp_path / "library" / "v0")
    shutil.copytree(episode["root"] / "train", tmp_path / "train")
    yes, no = "Success: yes\nCritique: none", "Success: no\nCritique: get wood first"
    fake = RoleFake(critic=[yes, no, no], skill_writer=[f"```python\n{REPLY}```"])
    ctx = ctx_for(tmp_path, "voyager", "voyager", {"retrieval": "tfidf"}, bench=CRAFTER)
    v1 = get_method("voyager").induce(ctx, fake)
    assert v1.functions[:3] == ctx.library.functions
    new = {f.name: (f.public, f.callees) for f in v1.functions[3:]}
    assert new == {"helper_2": (False, ()), "collect_wood_2": (True, ("helper_2",))}
    assert v1.meta["descriptions"]["collect_wood_2"] == "Collect one wood with helper()."
    entry = json.loads((ctx.record_dir / "transcript.jsonl").read_text().splitlines()[0])
    assert entry["added"] == ["helper_2", "collect_wood_2"] and entry["refused"] == []
    out, frames, steps = call_in_crafter(v1, "collect_wood_2", episode["task"])
    assert out.ok, out
    assert [f.function for f in frames if f.parent_frame_id] == ["helper_2"]  # not the library's helper
    assert steps == 3  # helper_2's two noop()s and the skill's do()
