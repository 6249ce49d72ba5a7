"""SkillScaffold end to end on the real embedded model (SmolLM2-135M) and real BabyAI, 1 query: every
rule of rules/scaffold/ runs through snakemake, then the scoring/utility/selection chain is checked
on the real Scouts with a hand-written valid card."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from skillrepro.config import BenchmarkConfig
from skillrepro.studies.scaffold.cards import REPLY_FORMS, check_card, server_token_counter
from skillrepro.studies.scaffold.records import CandidateRecord, load_trajectories
from skillrepro.studies.scaffold.scoring import load_scorer, score_contexts
from skillrepro.studies.scaffold.selection import selection_for_query, utilities_for_query, utility
from skillrepro.studies.scaffold.settings import ScaffoldConfig

N, M, L, K, Q = 2, 2, 1, 1, 1  # one query: each more costs the suite about 4 minutes
GEN_TOKENS = 160  # the Generator's limit: below what a card of the default format's word limit needs

# own process: the scorer it loads (SmolLM2-135M under torch) would stay in the suite's process for every later test
pytestmark = [pytest.mark.integration, pytest.mark.workflow, pytest.mark.own_process]

CARD = """# Skill: face-then-approach
## When to apply
The mission names an object to pick up and then an object to go to.
## Success-preserving strategy
Keep turning until the object is straight ahead, then walk towards it.
## Failure patterns to suppress
Walking forward into a wall; turning back and forth without moving.
## Procedure
1. Turn to face the object. 2. Go forward until it is one step ahead. 3. Pick it up.
## Decision rules
If the object is to the left, turn left; if to the right, turn right; if ahead, go forward.
## Verification and recovery
After each step read where the object is now; if it moved out of view, turn to find it.
## Stop conditions
Stop when the second object is one step ahead and you face it."""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, run_scaffold):
    return run_scaffold(tmp_path_factory.mktemp("scaffold"), "scaffold_all", call_budget=2, scaffold={
        "variants": ["grp", "anc"], "n_queries": Q, "n_scouts": N, "n_candidates": M, "n_post": L, "n_eval": K, "n_probes": 1,
        "generator_max_tokens": GEN_TOKENS, "evidence_max_chars": 2000})


def test_every_record_is_produced(workdir, llm_url):
    s = workdir / "results" / "scaffold" / "babyai"
    queries = json.loads((s / "queries.json").read_text())
    assert len(queries) == Q
    scouts = pd.concat([pd.read_parquet(s / f"scouts/s{i}/episodes.parquet") for i in range(N)])
    assert sorted(scouts.task_id.value_counts().tolist()) == [N] * Q and set(scouts.variant) == {"scout"}
    for name in ("steps", "llm_calls", "skill_calls"):
        assert (s / f"scouts/s0/{name}.parquet").exists()
    free = pd.read_parquet(s / "scores_free.parquet")
    assert len(free) == N * Q and (free.candidate == -1).all()
    assert (free.mean_logprob < 0).all() and (free.n_tokens > 0).all()
    for v in ("grp", "anc"):
        ev = pd.read_parquet(s / v / "evidence.parquet")
        assert len(ev) == Q
        cands = pd.read_parquet(s / v / "candidates.parquet")
        gen_calls = pd.read_parquet(s / v / "generate/llm_calls.parquet")
        n_gen = M * int((~ev.skip).sum())
        # sectioned decoding (the default): a request for the name and one per section of every card
        assert len(cands) == n_gen and len(gen_calls) == n_gen * 8 and set(gen_calls.role) <= {"generator"}
        assert set(cands.call_id) <= set(gen_calls.call_id)
        # Constrained decoding: the cards' structure holds by construction, and every card closes within
        # generator_max_tokens (a long "word" no longer cuts it before its closing tag): BabyAI's reply is the
        # paper's tagged form, as ALFWorld's and ScienceWorld's are.
        opening = REPLY_FORMS["tagged"].opening
        assert cands.raw.str.startswith(opening).all() and cands.raw.str.endswith("\n</skill>").all(), cands.raw.tolist()
        count = server_token_counter(llm_url, "embedded", gen_calls.model.iloc[0]) if n_gen else None
        for raw in cands.raw:  # the whole reply after the pre-fill, in the serving model's tokens
            assert count(raw[len(opening):]) <= GEN_TOKENS, raw
        assert n_gen == 0 or cands.valid.mean() >= 0.5, cands.problems.tolist()
        scores = pd.read_parquet(s / v / "scores.parquet")
        assert len(scores) == N * int(cands.valid.sum()) if len(cands) else len(scores) == 0
        utils = pd.read_parquet(s / v / "utilities.parquet")
        assert len(utils) == len(cands)
        sel = pd.read_parquet(s / v / "selection.parquet")
        assert len(sel) == Q and set(sel.kind) <= {"all_success", "all_failure", "mixed"}
        post = pd.read_parquet(s / v / "post/l0/episodes.parquet")
        assert len(post) == L * Q and set(post.variant) == {f"{v}/post"}
        assert (s / v / "eval/k0/episodes.parquet").exists()
    assert len(pd.read_parquet(s / "eval_free/k0/episodes.parquet")) == K * Q
    rules = pd.read_csv(workdir / "results/tables/scaffold_rules.csv")
    assert list(rules.columns) == ["benchmark", "variant", "rule", "success_rate", "n_queries"]
    expl = pd.read_csv(workdir / "results/tables/scaffold_exploration.csv")
    assert expl.n_queries.sum() == 2 * Q  # every query of both variants sits in one Scout-group kind
    assert (workdir / "results/tables/scaffold_quintiles.csv").exists()
    for fig in ("scaffold_validation.png", "scaffold_exploration.png", "scaffold_figure3b.png"):
        assert (workdir / "results/figures" / fig).stat().st_size > 1000


def test_scoring_chain_on_real_scouts_with_a_valid_card(workdir, llm_cfg):
    s = workdir / "results" / "scaffold" / "babyai"
    scouts = load_trajectories(s / f"scouts/s{i}" for i in range(N))
    task = scouts[0].task_id
    group = [t for t in scouts if t.task_id == task]
    assert len(group) == N and [t.order for t in group] == list(range(N))
    # The recorded conversation ends with the actor's last reply.
    assert group[0].messages[-1]["role"] == "assistant" and group[0].messages[0]["role"] == "system"
    card = check_card(f"<skill>\n{CARD}\n</skill>")  # the tagged reply holding CARD
    assert card.valid, card.problems
    cfg = ScaffoldConfig(benchmarks=("babyai",))
    scorer = load_scorer(cfg, llm_cfg)
    bench = BenchmarkConfig("babyai", "babyai", 3)
    recs = score_contexts(scorer, group, {-1: "", 0: card.card}, bench=bench, llm=llm_cfg,
                          library_dir=s / "library/v0", benchmark="babyai", variant="grp")
    l_none = {r.episode_id: r.mean_logprob for r in recs if r.candidate == -1}
    l_cand = {(0, r.episode_id): r.mean_logprob for r in recs if r.candidate == 0}
    # The stored skill-free scores are the same numbers (computed once, reused).
    stored = pd.read_parquet(s / "scores_free.parquet").set_index("episode_id").mean_logprob
    for ep, v in l_none.items():
        assert v == pytest.approx(stored[ep], abs=1e-4)
    cand = CandidateRecord("babyai", "grp", task, 0, CARD, card.card, card.name, card.n_words, True, "", "")
    (u,) = utilities_for_query("babyai", "grp", group, [cand], l_none, l_cand)
    assert math.isfinite(u.utility) and u.eligible
    d = {ep: l_cand[(0, ep)] - l_none[ep] for ep in l_none}
    succ = [d[t.episode_id] for t in group if t.success]
    fail = [d[t.episode_id] for t in group if not t.success]
    assert u.utility == pytest.approx(utility(succ, fail))
    sel = selection_for_query("babyai", "grp", group, [cand], [u], 0.0)
    assert (sel.selected == 0) == (u.utility > 0)
