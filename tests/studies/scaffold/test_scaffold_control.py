"""The utility's positive control on the real shipped model, a small version of perf/utility_control.py: real
skill-free BabyAI Scouts of the suite's server, each scored by the pipeline's own code under a card stating how the
missions are solved, an irrelevant card of the same length in characters, and no card; then the same with a planted
success per query (a Scout replaying BabyAI's own bot, `control.play_expert_scouts`)."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

from skillrepro.benchmarks.babyai import bot_moves
from skillrepro.config import BenchmarkConfig
from skillrepro.studies.scaffold.cards import paper_card
from skillrepro.studies.scaffold.control import (IRRELEVANT, NONE, SOLUTION, card_record, load_card, play_expert_scouts,
                                                 rows_from_scores, summarize)
from skillrepro.studies.scaffold.records import load_trajectories
from skillrepro.studies.scaffold.scoring import load_scorer, score_contexts
from skillrepro.studies.scaffold.selection import select
from skillrepro.studies.scaffold.settings import ScaffoldConfig
from repo import ROOT

# own process: the scorer it loads (SmolLM2-135M under torch) would stay in the suite's process for every later test
pytestmark = [pytest.mark.integration, pytest.mark.own_process]

DATA = ROOT / "perf" / "data" / "utility_control"
Q, N, BUDGET = 2, 2, 3  # queries, Scouts per query, actor calls per Scout: about a minute on 2 cores
BENCH = BenchmarkConfig("babyai", "babyai", BUDGET)
# the expert Scout's budget: the tasks are ones the bot solves in it (short ones: every sequence is scored 5 times)
EXPERT = BenchmarkConfig("babyai", "babyai", 4)
ECHO, TWIN = 2, 3  # candidate indices of the planted cards beside SOLUTION (0) and IRRELEVANT (1)


@pytest.fixture(scope="module")
def scouts(tmp_path_factory, llm_cfg, llm_url):
    """Scout i of every query, played as the scaffold_scout rule plays it (skill-free, Scout i's own seed), on the
    first Q training tasks the bot solves within EXPERT's budget; then the expert Scouts: (model's, expert's)."""
    from skillrepro.benchmarks import call_budget, load_benchmark
    from skillrepro.skills import Library
    from skillrepro.studies.scaffold.rollouts import episode_variant, phase_seed, play

    wd = tmp_path_factory.mktemp("control")
    library = wd / "library" / "v0"
    Library(version=0, meta={"method": "skillscaffold"}).write(library)
    tasks = [t for t in load_benchmark(BENCH).sample_tasks("train", 40, 42) if bot_moves(t, call_budget(EXPERT))][:Q]
    assert len(tasks) == Q, "too few training tasks in the bot's reach"
    dirs = [play(bench=BENCH, llm=phase_seed(llm_cfg, "scout", i), library_dir=library,
                 plan=[(t, "", episode_variant("", "scout")) for t in tasks], run_id="control", cycle=0,
                 out_dir=wd / "scouts" / f"s{i}") for i in range(N)]
    expert = play_expert_scouts(EXPERT, llm_cfg, library, tasks, wd / "scouts" / "expert")
    every = load_trajectories([*dirs, expert])  # in folder order: the expert is each query's last (order N)
    return [t for t in every if t.order < N], [t for t in every if t.order == N], library


@pytest.fixture(scope="module")
def scored(scouts, llm_cfg):
    """Each query's Scouts, the expert's among them, scored under no card and under four cards: the solution card,
    the irrelevant card, the irrelevant card again under another index (the null pair) and a card made of that
    query's own model Scouts' replies. Rows of the model's Scouts alone, and rows with the expert's."""
    model, expert, library = scouts
    sol, irr = cards()
    scorer = load_scorer(ScaffoldConfig(benchmarks=("babyai",)), llm_cfg)
    alone, planted = [], []
    for task in dict.fromkeys(t.task_id for t in model):
        group = [t for t in model if t.task_id == task]
        both = group + [t for t in expert if t.task_id == task]
        echo = card_record(echo_card(group), paper_card("babyai"), ECHO)
        four = [sol, irr, replace(irr, candidate=TWIN), echo]
        recs = score_contexts(scorer, both, {NONE: "", **{c.candidate: c.card for c in four}}, bench=BENCH,
                              llm=llm_cfg, library_dir=library, benchmark="babyai", variant="grp")
        alone += rows_from_scores(recs, group, four, bench=BENCH)
        planted += rows_from_scores(recs, both, [sol, irr], bench=BENCH)
    return alone, planted


@pytest.fixture(scope="module")
def rows(scored):
    return scored[0]


def cards(solution: str = "babyai_solution.md", irrelevant: str = "babyai_irrelevant.md"):
    fmt = paper_card("babyai")
    return load_card(DATA / solution, fmt, SOLUTION), load_card(DATA / irrelevant, fmt, IRRELEVANT)


def echo_card(group) -> str:
    """A valid card whose sections are one query's Scout replies, word for word (repeated if short): read under it,
    those replies should grow more likely (a model copies from its context), as under a card that encourages
    exactly what the failed attempts did."""
    text = " ".join(m["content"] for t in group for m in t.messages[1:] if m["role"] == "assistant")
    words = text.translate(str.maketrans("#<>", "   ")).split()
    per = 25
    assert words, "no reply words for the echo card"
    words = words * (7 * per // len(words) + 1)
    body = [f"## {h}\n" + " ".join(words[i * per:(i + 1) * per]) for i, h in enumerate(paper_card("babyai").headings)]
    return "# Skill: echo-of-the-attempts\n\n" + "\n\n".join(body)


def test_the_cards_are_valid_and_of_the_same_length_in_characters():
    sol, irr = cards()
    assert sol.valid and irr.valid
    assert abs(len(sol.card) - len(irr.card)) <= 0.01 * len(sol.card)


def test_every_context_scores_the_same_scout_replies_and_the_utility_is_eq_8(rows):
    assert len(rows) == Q
    for r in rows:
        assert r.n_scouts == N and set(r.n_tokens) == {NONE, SOLUTION, IRRELEVANT, TWIN, ECHO}
        # a card changes what the replies are read under, never which tokens are scored
        assert all(n > 0 for n in r.n_tokens[NONE]) and all(v == r.n_tokens[NONE] for v in r.n_tokens.values())
        for c, u in r.utility.items():
            assert math.isfinite(u)
            if r.kind == "all_failure":  # eq. 8: minus the mean d over the failures, the mean signed d
                assert u == pytest.approx(sum(r.signed[c]) / N, abs=1e-9)


def test_the_null_pair_has_no_difference(rows):
    """The irrelevant card under two indices: the same context, scored once (`score_conversations`), the same
    utility whatever its index."""
    for r in rows:
        assert r.utility[IRRELEVANT] == r.utility[TWIN], r


def test_a_card_echoing_the_failed_replies_gets_a_negative_utility_and_the_gate_refuses_it(rows):
    """The estimator's direction on failed Scouts: a card under which the failed replies grow more likely is
    worth less than none."""
    failed = [r for r in rows if r.kind == "all_failure"]
    if not failed:
        pytest.skip("no query with only failed Scouts")
    for r in failed:
        assert r.utility[ECHO] < 0 and r.utility[ECHO] < r.utility[IRRELEVANT], r
        assert select([r.utility[ECHO]], [True]) is None


def test_on_failed_scouts_an_irrelevant_card_passes_the_gate(rows):
    """Measured, not wished for: the shipped SmolLM2-135M's Scouts fail (they rarely write an action at all), so
    grp's utility is minus the mean d over failures, and a card about houseplants lowers the failed replies'
    likelihood enough to be injected (perf/utility_control.py: every one of 8 queries, docs/results.md)."""
    failed = [r for r in rows if r.kind == "all_failure"]
    if not failed:
        pytest.skip("no query with only failed Scouts")
    assert all(r.utility[IRRELEVANT] > 0 for r in failed), failed


@pytest.mark.xfail(strict=True, reason="the positive control does not hold on the shipped SmolLM2-135M: its "
                   "Scouts all fail and the irrelevant card lowers their replies' likelihood more than the solution "
                   "card does (perf/utility_control.py, 8 queries: solution above irrelevant on 5 of 24 Scouts, "
                   "gate picks it on 1 of 8 queries; docs/results.md)")
def test_the_solution_card_outranks_the_irrelevant_card_and_the_gate_picks_it(rows):
    s = summarize(rows)
    # Each Scout's term of grp's utility (d for a success, -d for a failure) is higher under the solution card on a
    # majority of Scouts, its mean utility over queries is above the irrelevant card's and above no card's (0), and
    # the gate, offered both cards on each query, chooses the solution card on a majority of queries.
    above, n = s["scouts_solution_above"]
    assert above > n / 2, rows
    assert s["solution_minus_irrelevant"][0] > 0 and s["solution_minus_none"][0] > 0, s
    assert s["selected"]["solution"] > Q / 2, rows


def test_with_a_planted_success_the_solution_card_outranks_the_irrelevant_card(scored, scouts):
    """The half of the positive control that holds on the shipped model (perf/utility_control.py --expert: 8 of 8
    queries, docs/results.md): the bot's successful replies are likelier under the card stating the solution than
    under the irrelevant card, so on every query the solution card's utility is the higher, and the gate, offered
    both, never injects the irrelevant one."""
    _, planted = scored
    _, expert, _ = scouts
    assert all(t.success for t in expert) and len(expert) == Q
    for r in planted:
        assert r.kind != "all_failure" and r.n_success >= 1, r
        assert r.u_solution > r.u_irrelevant, r
        assert r.selected != IRRELEVANT, r
        # the expert Scout is the last of the group in sampling order: its d, signed + for a success
        assert r.signed[SOLUTION][-1] > r.signed[IRRELEVANT][-1], r


def test_too_few_queries_print_no_interval(rows):
    s = summarize(rows)
    assert math.isnan(s["solution_minus_irrelevant"][1]) and s["interval"].startswith("too few queries")
