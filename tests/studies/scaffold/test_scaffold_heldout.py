"""SkillScaffold's held-out evaluation (appendix A.1; tables 1, 2, 3, 6): the pure parts. The rules themselves run
on the real model in tests/studies/scaffold/test_scaffold_training.py (held-out episodes of every checkpoint of its
chains)."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pandas as pd
import pytest

from skillrepro.studies.scaffold.figures import figure6, figure8
from skillrepro.studies.scaffold.heldout import (BASE_METHOD, DIRECT_METHOD, heldout_policies, heldout_table, heldout_variant,
                                                 injection_rates, paired_difference, parse_heldout_variant,
                                                 table_by_category, table_by_split, table_pass_at_k, table_variants,
                                                 task_category, training_curve, training_exploration)
from skillrepro.studies.scaffold.records import CandidateRecord, Trajectory, UtilityRecord
from skillrepro.studies.scaffold.rollouts import split_tasks
from skillrepro.studies.scaffold.selection import paired_utilities, select_with, selection_for_query
from skillrepro.studies.scaffold.paths import Instance
from skillrepro.studies.scaffold.settings import BASELINE, HeldoutConfig, ScaffoldConfig
from skillrepro.studies.scaffold.statistics import exact_interval, pass_at_k


def _cfg(scaffold: dict, benchmarks=None) -> ScaffoldConfig:
    benchmarks = benchmarks or {"babyai": {"env": "babyai", "llm_call_budget": 3}}
    return ScaffoldConfig.from_config({"llm": {"backend": "embedded"}, "benchmarks": benchmarks,
                                       "scaffold": scaffold})


def test_pass_at_k_is_the_unbiased_estimate():
    # By enumeration: the chance that a uniformly drawn k-subset of n rollouts holds a success.
    for n, c, k in [(8, 0, 1), (8, 1, 4), (8, 3, 8), (5, 2, 2), (4, 4, 1)]:
        outcomes = [1] * c + [0] * (n - c)
        subsets = list(itertools.combinations(outcomes, k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))
    assert pass_at_k(8, 2, 1) == pytest.approx(0.25)  # Pass@1 is the success rate
    with pytest.raises(ValueError, match="pass@4 from 2 rollouts"):
        pass_at_k(2, 1, 4)


def test_chains_add_plain_grpo_unless_switched_off():
    cfg = _cfg({"variants": ["grp", "anc"]})
    assert [c.name for c in cfg.chains] == ["grp", "anc", BASELINE]
    assert [c.method for c in cfg.chains] == ["SkillScaffold (grp)", "SkillScaffold (anc)", "GRPO"]
    plain = cfg.chain(BASELINE)
    assert plain.of is None and not plain.generator_learning and not plain.inject
    ablated = _cfg({"training": {"generator_learning": False, "baseline": False}})
    assert [c.method for c in ablated.chains] == ["SkillScaffold (grp) w/o Generator learning"]


def test_heldout_checkpoints_include_the_last():
    assert HeldoutConfig(every=10).checkpoints(25) == [0, 10, 20, 25]
    assert HeldoutConfig().checkpoints(2) == [0, 1, 2]
    pols = heldout_policies("babyai", _cfg({}).chains, [0, 2])
    assert [p.policy for p in pols] == ["base", "grp/ckpt2", "grpo/ckpt2"]
    assert [p.checkpoint.k if p.checkpoint else None for p in pols] == [None, 2, 2]
    assert heldout_policies("babyai", _cfg({}).chains, [0, 2], direct=True)[1].policy == "base-skill"


def test_direct_skill_prompting_needs_a_card_file_of_a_scaffold_benchmark(tmp_path):
    card = tmp_path / "card.txt"
    card.write_text("# Skill: x")
    assert _cfg({"heldout": {"skills": {"babyai": str(card)}}}).heldout.skills == {"babyai": str(card)}
    with pytest.raises(ValueError, match="heldout.skills.babyai: no card file"):
        _cfg({"heldout": {"skills": {"babyai": str(tmp_path / "none.txt")}}})
    with pytest.raises(ValueError, match="heldout.skills.alf: not one of scaffold.benchmarks"):
        _cfg({"heldout": {"skills": {"alf": str(card)}}})


@pytest.mark.parametrize("heldout, match", [
    ({"splits": {"babyai": {"train": 3}}}, r"heldout\.splits\.babyai\.train: the training split is not held out"),
    ({"splits": {"babyai": {"dev": 3}}}, r"heldout\.splits\.babyai\.dev: neither test nor a split"),
    ({"splits": {"crafter": {"test": 3}}}, r"heldout\.splits\.crafter: not one of scaffold\.benchmarks"),
])
def test_a_split_that_is_not_held_out_is_refused_naming_its_key(heldout, match):
    with pytest.raises(ValueError, match=match):
        _cfg({"heldout": heldout})


def test_a_scienceworld_pool_shared_with_training_is_refused():
    bench = {"sw": {"env": "scienceworld", "llm_call_budget": 5}}
    splits = {"sw": {"train": ["power-component@train"], "test_id": ["power-component@dev", "power-component@train"]}}
    with pytest.raises(ValueError, match=r"heldout\.splits\.sw\.test_id: \['power-component@train'\] is also in"):
        _cfg({"splits": splits, "heldout": {"splits": {"sw": {"test_id": None}}}}, bench)


def test_heldout_tasks_come_from_the_test_split_only():
    from skillrepro.benchmarks import load_benchmark
    from skillrepro.config import BenchmarkConfig

    bench = BenchmarkConfig("babyai", "babyai", 3)
    cfg = _cfg({})
    test = split_tasks(bench, cfg, "test", None, 42, key="k")  # None: the whole pool
    b = load_benchmark(bench)
    assert sorted(test) == sorted(b.sample_tasks("test", 30, 42)) and not set(test) & set(b.sample_tasks("train", 200, 42))
    with pytest.raises(Exception, match="30 test tasks"):
        split_tasks(bench, cfg, "test", 31, 42, key="k")


def test_task_categories():
    assert task_category("alfworld", "gen:heat:123") == "heat"
    assert task_category("alfworld", "official:valid_unseen/pick_two_obj_and_place-X-None-Y-1/trial_T1") == "pick_two"
    assert task_category("scienceworld", "test-conductivity:12") == "test-conductivity"
    assert task_category("babyai", "17") == "all"


def _episodes():
    """Held-out episodes by hand: base model and grp checkpoint 2 on ALFWorld (two splits, two categories)."""
    rows = []
    for chain, k, wins in (("", 0, {"a": 0, "b": 0, "c": 1}), ("grp", 2, {"a": 1, "b": 1, "c": 1})):
        for r in range(2):
            for task, split in (("gen:heat:1", "test"), ("gen:cool:2", "test"), ("gen:heat:3", "other")):
                name = {"gen:heat:1": "a", "gen:cool:2": "b", "gen:heat:3": "c"}[task]
                rows.append({"benchmark": "alf", "split": "test", "task_id": task, "variant": heldout_variant(split, r),
                             "success": bool(wins[name]) and not (name == "a" and r == 1), "chain": chain,
                             "checkpoint": k, "method": "GRPO" if chain else BASE_METHOD})
    return pd.DataFrame(rows)


def test_heldout_tables_by_hand():
    chains = _cfg({}).chains
    t = heldout_table(_episodes(), {"alf": "alfworld"}, chains)
    row = lambda split, cat, chain: t[(t.split == split) & (t.category == cat) & (t.chain == chain)].iloc[0]  # noqa: E731
    # grp: task a wins once in 2, b twice, c twice; base: c twice only
    assert row("test", "all", "grp").success_pct == pytest.approx(75) and row("test", "all", "grp").n_episodes == 4
    assert row("test", "heat", "grp").success_pct == pytest.approx(50)
    assert row("all", "all", "grp").success_pct == pytest.approx(100 * 5 / 6)  # pooled over the splits
    assert row("all", "all", "").success_pct == pytest.approx(100 * 2 / 6) and row("all", "all", "").method == BASE_METHOD
    t1 = table_by_category(t).set_index(["split", "method"])
    assert t1.loc[("test", "SkillScaffold (grp)"), "cool"] == 100 and t1.loc[("test", "SkillScaffold (grp)"), "avg"] == 75
    t2 = table_by_split(t).set_index("method")
    assert list(t2.columns[-5:]) == ["other", "test", "avg", "avg_ci_low", "avg_ci_high"]
    assert t2.loc[BASE_METHOD, "other"] == 100 and t2.loc[BASE_METHOD, "n_tasks"] == 3
    # intervals: exact over tasks, each task counting its success rate (grp: a 1/2, b 1, c 1 -> 2.5 of 3)
    lo, hi = exact_interval(2.5, 3)
    assert (row("all", "all", "grp").ci_low_pct, row("all", "all", "grp").ci_high_pct) == pytest.approx((100 * lo, 100 * hi))
    assert t1.loc[("test", "SkillScaffold (grp)"), "avg_ci_low"] == pytest.approx(100 * exact_interval(1.5, 2)[0])
    t3 = table_variants(t, chains, _episodes())
    assert t3.chain.tolist() == ["grp"] and t3.success_pct.iloc[0] == pytest.approx(100 * 5 / 6)
    assert t3.n_tasks.iloc[0] == 3 and t3.ci_high_pct.iloc[0] == pytest.approx(100 * hi)
    # paired over the 3 tasks vs the base model: +50, +100, 0 -> +50; too few tasks for an interval; no GRPO chain
    assert t3.vs_base_pp.iloc[0] == pytest.approx(50) and np.isnan(t3.vs_base_ci_low.iloc[0])
    assert "too few tasks" in t3.paired_interval.iloc[0] and np.isnan(t3.vs_grpo_pp.iloc[0])
    # direct skill prompting: a row of its own in tables 1-2, not a trained chain of table 3
    direct = _episodes().query("chain == ''").assign(chain="direct", success=True)
    td = heldout_table(pd.concat([_episodes(), direct]), {"alf": "alfworld"}, chains)
    assert td[(td.chain == "direct") & (td.split == "all")].method.iloc[0] == DIRECT_METHOD
    assert DIRECT_METHOD in set(table_by_split(td).method) and table_variants(td, chains).chain.tolist() == ["grp"]
    t6 = table_pass_at_k(_episodes(), ks=(1, 2, 4)).set_index(["split", "chain", "k"])
    assert set(t6.index.get_level_values("k")) == {1, 2}  # 2 rollouts per task: no Pass@4
    assert t6.loc[("test", "grp", 2), "pass_at_k_pct"] == 100 and t6.loc[("test", "grp", 1), "pass_at_k_pct"] == 75
    assert t6.loc[("macro", "grp", 1), "pass_at_k_pct"] == pytest.approx((75 + 100) / 2)
    assert t6.loc[("test", "grp", 1), "ci_low_pct"] == pytest.approx(100 * exact_interval(1.5, 2)[0])  # 0.5 + 1 of 2
    assert np.isnan(t6.loc[("macro", "grp", 1), "ci_low_pct"])


def test_paired_difference_is_a_t_interval_over_shared_tasks():
    from scipy.stats import t as student

    wins = {"": [0, 1, 0, 0, 1, 0], "grpo": [1, 1, 0, 1, 1, 1]}
    eps = pd.DataFrame([{"benchmark": "alf", "task_id": f"gen:heat:{i}", "variant": heldout_variant("test", 0),
                         "success": bool(w), "chain": c, "checkpoint": 2 if c else 0}
                        for c, ws in wins.items() for i, w in enumerate(ws)])
    mean, lo, hi, label = paired_difference(eps, "alf", ("grpo", 2), ("", 0))
    d = 100 * (np.array(wins["grpo"]) - np.array(wins[""]))
    half = student.ppf(0.975, 5) * d.std(ddof=1) / np.sqrt(6)
    assert mean == pytest.approx(50) and (lo, hi) == pytest.approx((50 - half, 50 + half))
    assert label == "95 % Student t, n = 6"
    assert paired_difference(eps, "alf", ("grpo", 1), ("", 0)) is None  # no shared task
    # every task the same difference (both fail everything): no zero-width interval is printed as a 95 % one
    eps["success"] = False
    mean, lo, hi, label = paired_difference(eps, "alf", ("grpo", 2), ("", 0))
    assert mean == 0 and np.isnan(lo) and np.isnan(hi) and label == "no interval: all 6 tasks differ by the same"


def test_training_curve_and_injection_rates():
    scouts = pd.DataFrame({"benchmark": "b", "chain": "grp", "iteration": [0, 0, 1, 1], "success": [0, 0, 1, 1]})
    c = training_curve(scouts, smoothing=0.5)
    assert c.success_pct.tolist() == [0, 100] and c.smoothed_pct.tolist() == [0, 50]
    sel = pd.DataFrame({"benchmark": "b", "chain": ["grp"] * 4, "selected": [-1, 2, -1, -1]})
    assert injection_rates(sel).injection_pct.tolist() == [25]
    assert parse_heldout_variant(pd.Series(["heldout/test_id/r3"])).iloc[0].tolist() == ["test_id", 3]
    with pytest.raises(ValueError, match="unexpected variant"):
        parse_heldout_variant(pd.Series(["scout"]))


def test_trained_ablations_are_chains_of_their_own():
    cfg = _cfg({"ablations": {"grp-shuffled": {"of": "grp", "selection": "shuffled"},
                              "grp-nogen_random": {"of": "grp", "selection": "random", "generator_learning": False}},
                "training": {"ablations": ["grp-shuffled", "grp-nogen_random"]}})
    assert [c.name for c in cfg.chains] == ["grp", "grp-shuffled", "grp-nogen_random", "grpo"]
    nogen = cfg.chain("grp-nogen_random")
    assert (nogen.of, nogen.selection, nogen.generator_learning, nogen.inject) == ("grp", "random", False, True)
    assert nogen.method == "SkillScaffold (grp) random selection w/o Generator learning"
    assert cfg.selection_variants == ("grp", "grp-shuffled")  # a training-only ablation is not validated
    assert Instance.named("babyai@grp-nogen_random12") == Instance("babyai", "grp-nogen_random", 12)
    for bad, match in (({"training": {"ablations": ["nope"]}}, "'nope' is not in scaffold.ablations"),
                       ({"ablations": {"grp-k2": {"of": "grp"}}, "training": {"ablations": ["grp-k2"]}}, "end in a digit")):
        with pytest.raises(ValueError, match=f"scaffold.training.ablations: .*{match}"):
            _cfg(bad)


def test_the_skillrl_style_baseline_is_an_always_on_chain_named_so():
    cfg = _cfg({"ablations": {"skillrl": {"of": "grp", "selection": "random", "gate": False, "generator_learning": False},
                              "grp-no_gate": {"of": "grp", "gate": False}},
                "training": {"ablations": ["skillrl", "grp-no_gate"]}})
    assert cfg.chain("skillrl").method == "SkillRL-style always-on injection (grp cards)"
    assert cfg.chain("grp-no_gate").method == "SkillScaffold (grp) w/o gate" and not cfg.chain("grp").skillrl_style
    # always on: a uniformly drawn valid card even when every utility is negative
    picks = {select_with([-3.0, -1.0, -2.0], [True, True, False], selection="random", gate=False,
                         rng=random.Random(s))[0] for s in range(40)}
    assert picks == {0, 1}


def test_shuffled_chain_rewards_its_generator_with_the_utilities_it_selected_by():
    cards = [CandidateRecord("b", "grp", "q", j, "", "", "", 0, True, "", "") for j in range(4)]
    utils = [UtilityRecord("b", "grp", "q", j, "mixed", 1, 1, u, True, True) for j, u in enumerate([0.1, 0.2, 0.3, 0.4])]
    same = paired_utilities("b@grp-shuffled0", "grp-shuffled", cards, utils, 0.0, "utility", True)
    assert [u.utility for u in same] == [0.1, 0.2, 0.3, 0.4]
    paired = paired_utilities("b@grp-shuffled0", "grp-shuffled", cards, utils, 0.0, "shuffled", True)
    assert sorted(u.utility for u in paired) == [0.1, 0.2, 0.3, 0.4] and [u.utility for u in paired] != [0.1, 0.2, 0.3, 0.4]
    # the card the selection injected is the one paired with the largest utility
    scouts = [Trajectory("e0", "q", True, 0, (), ()), Trajectory("e1", "q", False, 1, (), ())]
    sel = selection_for_query("b@grp-shuffled0", "grp-shuffled", scouts, cards, utils, 0.0, "shuffled")
    assert max(paired, key=lambda u: u.utility).candidate == sel.selected


def test_training_exploration_by_hand():
    """Figures 6 and 8-12 during training: per iteration and Scout-group kind, Scout vs Post-Scout success, the
    injection rate (none where the chain does not inject) and the positive-utility rate."""
    sel = pd.DataFrame({
        "benchmark": ["alf"] * 4, "chain": ["grp", "grp", "grp", "noinj"], "iteration": [0, 0, 1, 0],
        "task_id": ["a", "b", "a", "a"], "kind": ["all_failure", "mixed", "all_failure", "all_failure"],
        "n_success": [0, 2, 0, 0], "n_scouts": [4, 4, 4, 4], "selected": [1, -1, 0, 2],
        "best_utility": [0.3, -0.1, 0.2, 0.5], "inject": [True, True, True, False]})
    post = pd.DataFrame({"benchmark": ["alf"] * 6, "chain": ["grp"] * 5 + ["noinj"], "iteration": [0, 0, 0, 0, 1, 0],
                         "task_id": ["a", "a", "b", "b", "a", "a"], "success": [True, False, True, True, False, False]})
    t = training_exploration(sel, post, threshold=0.0).set_index(["chain", "iteration", "group"])
    row = t.loc[("grp", 0, "all")]
    assert row.n_queries == 2 and row.scout_success == pytest.approx(0.25)
    assert row.post_scout_success == pytest.approx(0.75) and row.injection_rate == 0.5 and row.positive_rate == 0.5
    assert t.loc[("grp", 0, "all_failure")].post_scout_success == 0.5
    assert t.loc[("grp", 0, "mixed")].injection_rate == 0 and ("grp", 0, "all_success") not in t.index
    assert t.loc[("noinj", 0, "all")].injection_rate == 0 and t.loc[("noinj", 0, "all")].positive_rate == 1
    assert sorted(training_exploration(sel.iloc[:0], post).columns) == sorted(t.reset_index().columns)


def test_training_figures_are_drawn_from_the_exploration_table(tmp_path):
    sel = pd.DataFrame({"benchmark": ["alf"] * 2, "chain": ["grp"] * 2, "iteration": [0, 1], "task_id": ["a", "a"],
                        "kind": ["all_failure", "mixed"], "n_success": [0, 1], "n_scouts": [2, 2], "selected": [0, -1],
                        "best_utility": [0.2, -0.1], "inject": [True, True]})
    post = pd.DataFrame({"benchmark": ["alf"] * 2, "chain": ["grp"] * 2, "iteration": [0, 1], "task_id": ["a", "a"],
                         "success": [True, False]})
    ex = training_exploration(sel, post)
    figure6(ex, tmp_path / "f6.png")
    figure8(ex, ["alf"], tmp_path / "f8.png")
    figure6(ex.iloc[:0], tmp_path / "empty.png")  # no chain with a Generator: an empty-state figure, not an error
    for name in ("f6.png", "f8.png", "empty.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
