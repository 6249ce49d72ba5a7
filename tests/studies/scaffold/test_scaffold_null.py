"""Controls for SkillScaffold's diagnostic estimators on simulated data (pure numpy/pandas, a few seconds):
table 4's recovery and figure 3(b)'s competence-binned candidate effects, driven through the pipeline's own
functions. On null data (no skill effect, no learning) each is centred on 0 with an honest 95 % interval; a
planted effect is found; and the old, biased construction is shown to be detectable by the same simulation."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from skillrepro.studies.scaffold.validation import competence_levels, pilot_competence, rollout_outcomes, split_probes
from skillrepro.studies.scaffold.cohort import benefits, chain_cohort, internalization, later_difference, recovery
from skillrepro.studies.scaffold.statistics import MIN_N

RUNS = 200


# ----------------------------------------------------------------------------------------------------
# Table 4: a training chain whose first `iters` iterations (batches of q queries) form the cohort


def _chain(rng, iters=6, q=16, n=4, l=4, skill=0.0, learning=0.0):
    """Success counts per query of one simulated chain: skill-free success p per query; N Scouts; a random half
    injected, whose L Post-Scouts succeed with p + skill; N fresh early rollouts by the same checkpoint (p);
    N rollouts by a later checkpoint (p + learning). Arrays of shape (iters * q,)."""
    size = iters * q
    p = rng.uniform(0.05, 0.7, size)
    injected = rng.random(size) < 0.5
    return dict(p=p, injected=injected, scouts=rng.binomial(n, p), n=n, l=l,
                post=rng.binomial(l, np.clip(p + skill * injected, 0, 1)), early=rng.binomial(n, p),
                later=rng.binomial(n, np.clip(p + learning, 0, 1)), iters=iters, q=q)


def _estimate(c, seed, biased=False):
    """Table 4 from one chain through the pipeline's functions (scaffold_grpo.benefits, .recovery).
    biased: the old construction, the cohort's own Scouts as its early success."""
    member = benefits(c["scouts"], c["n"], c["post"] / c["l"], c["injected"])
    early = (c["scouts"] if biased else c["early"])[member] / c["n"]
    return recovery(c["later"][member] / c["n"] - early, n_boot=1000, seed=seed)


def _recoveries(seed, runs=RUNS, biased=False, **kw):
    rng = np.random.default_rng(seed)
    out = [_estimate(_chain(rng, **kw), r, biased) for r in range(runs)]
    rec = np.array([x.recovery_pp for x in out])
    return out, rec, float(np.mean([x.ci_low <= 0 <= x.ci_high for x in out]))


def test_table4_recovery_on_null_data_is_centred_on_zero_with_honest_coverage():
    out, rec, cover = _recoveries(1)
    n = np.mean([x.n_queries for x in out])
    print(f"table 4 null ({RUNS} runs, 6 batches of 16, mean cohort {n:.1f}): recovery {rec.mean():+.2f} pp "
          f"(sd {rec.std():.2f}), 95 % CI covers 0 in {cover:.3f}")
    assert n > 10  # the cohort spans several batches
    assert abs(rec.mean()) < 3 * rec.std() / np.sqrt(RUNS)
    assert 0.90 <= cover <= 0.99


def test_table4_finds_a_planted_learning_effect():
    out, rec, _ = _recoveries(2, runs=100, learning=0.3)
    assert rec.mean() == pytest.approx(30, abs=3)
    assert np.mean([x.ci_low > 0 for x in out]) > 0.9


def test_table4_a_skill_effect_alone_is_not_recovery():
    """Post-Scouts helped by the skill (more queries enter the cohort) but no learning: still about 0."""
    _, rec, cover = _recoveries(3, runs=100, skill=0.3)
    assert abs(rec.mean()) < 3 * rec.std() / 10 and cover >= 0.88


def test_table4_old_construction_is_biased():
    """The same simulation detects regression to the mean when the cohort's Scouts are its early success."""
    _, rec, cover = _recoveries(4, runs=100, biased=True)
    assert rec.mean() > 10 and cover < 0.5


def _control(seed, runs=RUNS, extra=0.0):
    """Table 4's plain-GRPO control: both chains learn +0.2 on every query, SkillScaffold `extra` more on its cohort;
    `later_difference` on the records (the cohort's later success by each) estimates `extra`."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(runs):
        c = _chain(rng, learning=0.2)
        its, _, later, _, _ = _frames(c)
        members = chain_cohort(its)
        grpo = later.assign(success=(rng.random(len(later)) < np.clip(np.repeat(c["p"], c["n"]) + 0.2, 0, 1)) * 1.0)
        grp = later.assign(success=(rng.random(len(later)) < np.clip(np.repeat(c["p"], c["n"]) + 0.2 + extra, 0, 1)) * 1.0)
        out.append(later_difference(grp, grpo, members, n_boot=500, seed=r))
    return out


def test_table4_control_difference_is_zero_when_both_chains_learn_alike_and_finds_extra_internalization():
    null = _control(10, runs=120)
    d = np.array([x.recovery_pp for x in null])
    cover = np.mean([x.ci_low <= 0 <= x.ci_high for x in null])
    print(f"table 4 control null ({len(d)} runs): SkillScaffold minus GRPO {d.mean():+.2f} pp, CI covers 0 in {cover:.3f}")
    assert abs(d.mean()) < 3 * d.std() / np.sqrt(len(d)) and 0.90 <= cover <= 0.99
    planted = _control(11, runs=30, extra=0.25)
    assert np.mean([x.recovery_pp for x in planted]) == pytest.approx(25, abs=4)
    assert np.mean([x.ci_low > 0 for x in planted]) > 0.8


def _frames(c):
    """One simulated chain as the records the workflow reads: per iteration (selections, Post-Scout episodes),
    fresh early episodes, the later checkpoint's episodes, and the ids of the Scouts and Post-Scouts."""
    def eps(counts, n, tag, tasks):
        ok = np.arange(n)[None, :] < counts[:, None]
        return pd.DataFrame({"task_id": np.repeat(tasks, n), "success": ok.ravel().astype(float),
                             "episode_id": [f"{tag}/{t}/{r}" for t in tasks for r in range(n)]})

    tasks = np.array([f"q{i:04d}" for i in range(c["iters"] * c["q"])])  # sorted = numeric order
    its, early = {}, []
    for j in range(c["iters"]):
        sl = slice(j * c["q"], (j + 1) * c["q"])
        sel = pd.DataFrame({"task_id": tasks[sl], "selected": np.where(c["injected"][sl], 0, -1),
                            "n_success": c["scouts"][sl], "n_scouts": c["n"]})
        its[j] = (sel, eps(c["post"][sl], c["l"], "post", tasks[sl]))
        early.append(eps(c["early"][sl], c["n"], "early", tasks[sl]).assign(iteration=j))
    scouts = eps(c["scouts"], c["n"], "scout", tasks)
    chosen = list(scouts.episode_id) + [e for _, po in its.values() for e in po.episode_id]
    return its, pd.concat(early), eps(c["later"], c["n"], "later", tasks), scouts, chosen


def test_table4_records_path_matches_and_refuses_the_scouts():
    """The workflow's path (chain_cohort + internalization on episode records) computes the same estimate,
    and refuses early rollouts that also chose the cohort."""
    rng = np.random.default_rng(5)
    for r in range(3):
        c = _chain(rng)
        its, early, later, scouts, chosen = _frames(c)
        got = internalization(early, later, chain_cohort(its), n_boot=1000, seed=r, chosen_on=chosen)
        assert got == _estimate(c, r)
    with pytest.raises(ValueError, match="fresh rollouts"):
        internalization(scouts.assign(iteration=0), later, chain_cohort(its), chosen_on=chosen)


def test_chain_cohort_spans_iterations():
    sel = pd.DataFrame({"task_id": ["a", "b"], "selected": [0, 0], "n_success": [0, 2], "n_scouts": [4, 4]})
    post = pd.DataFrame({"task_id": list("aabb"), "success": [1, 0, 0, 0]})
    assert chain_cohort({1: (sel, post), 0: (sel, post)}) == [(0, "a"), (1, "a")]
    early = pd.DataFrame({"iteration": [0, 1], "task_id": ["a", "a"], "success": [0.0, 1.0]})
    later = pd.DataFrame({"task_id": ["a", "a"], "success": [1.0, 1.0]})
    r = internalization(early, later, [(0, "a"), (1, "a")], n_boot=100)
    assert r.n_queries == 2 and r.recovery_pp == pytest.approx(50.0)
    with pytest.raises(ValueError, match=r"\(2, 'a'\)"):
        internalization(early, later, [(2, "a")])


# ----------------------------------------------------------------------------------------------------
# Figure 3(b): candidate effects binned by skill-free competence (4 probes)


def _pilot(rng, q=60, m=4, k=8, n_probes=4, effect=None):
    """Per query: skill-free success p; k baseline rollouts, m candidates x k rollouts (success p + effect(p),
    0 by default), n_probes independent probe rollouts. Success counts."""
    p = rng.uniform(0.05, 0.95, q)
    pc = np.clip(p[:, None] + (0 if effect is None else effect(p)[:, None]), 0, 1) * np.ones((q, m))
    return dict(free=rng.binomial(k, p), cand=rng.binomial(k, pc), probes=rng.binomial(n_probes, p), k=k,
                n_probes=n_probes)


def _levels(d, seed, biased=False):
    """Figure 3(b) through the pipeline's scaffold.competence_levels. biased: the old construction, the probes
    being the first 4 of the baseline's own rollouts (simulated: a hypergeometric draw of their successes)."""
    probes = d["probes"]
    if biased:
        probes = np.random.default_rng(seed).hypergeometric(d["free"], d["k"] - d["free"], d["n_probes"])
    return competence_levels(probes, d["free"] / d["k"], d["cand"] / d["k"], n_boot=500, seed=seed)


def _pilot_runs(seed, runs=RUNS, biased=False, **kw):
    rng = np.random.default_rng(seed)
    return pd.DataFrame([row for r in range(runs) for row in _levels(_pilot(rng, **kw), r, biased)])


def test_fig3b_null_effects_are_zero_at_every_competence_level_with_honest_coverage():
    t = _pilot_runs(6)
    t = t[t.n_queries >= MIN_N["expanded"]]  # levels with enough queries for an interval (NaN below)
    by = t.groupby("probe_successes").mean_effect.agg(["mean", "std", "size"])
    cover = ((t.mean_effect_ci_low <= 0) & (t.mean_effect_ci_high >= 0)).mean()
    print(f"figure 3(b) null ({RUNS} runs): mean effect per level {by['mean'].round(4).to_dict()}, "
          f"95 % CI covers 0 in {cover:.3f} of {len(t)} level-runs")
    assert (by["mean"].abs() < 3 * by["std"] / np.sqrt(by["size"]) + 1e-9).all()
    assert 0.90 <= cover <= 0.99


def test_fig3b_finds_a_planted_competence_dependent_effect():
    """Skills help weak queries and hurt strong ones (the paper's pattern), planted: level 0 up, level 4 down."""
    t = _pilot_runs(7, runs=50, q=120, effect=lambda p: 0.5 * (0.5 - p)).groupby("probe_successes")
    lo, hi = t.mean_effect_ci_low.apply(list), t.mean_effect_ci_high.apply(list)
    assert t.mean_effect.mean()[0] > 0.1 and t.mean_effect.mean()[4] < -0.1
    assert np.mean(np.array(lo[0]) > 0) > 0.9 and np.mean(np.array(hi[4]) < 0) > 0.9


def test_fig3b_old_construction_is_biased():
    """Probes taken from the baseline make effects look competence-dependent on null data."""
    m = _pilot_runs(8, runs=50, biased=True).groupby("probe_successes").mean_effect.mean()
    assert m[0] > 0.02 and m[4] < -0.02


def test_fig3b_records_path_matches():
    """split_probes + rollout_outcomes + pilot_competence on episode records give the same table."""
    rng = np.random.default_rng(9)
    d = _pilot(rng, q=12)
    rows = []
    for i in range(12):
        t = f"q{i:02d}"
        rows += [{"benchmark": "b", "task_id": t, "k": k, "success": float(k < d["free"][i])} for k in range(d["k"])]
        rows += [{"benchmark": "b", "task_id": t, "k": d["k"] + k, "success": float(k < d["probes"][i])}
                 for k in range(d["n_probes"])]
    free, probes = split_probes(pd.DataFrame(rows), d["k"])
    cand = pd.DataFrame([{"benchmark": "b", "task_id": f"q{i:02d}", "k": k, "variant": f"grp/eval/c{j}",
                          "success": float(k < d["cand"][i, j])} for i in range(12) for j in range(4) for k in range(d["k"])])
    got = pilot_competence(rollout_outcomes(free, cand, ["grp"]), probes, n_boot=500, seed=0)
    want = pd.DataFrame(_levels(d, 0))
    cols = ["probe_successes", "n_queries", "mean_effect", "best_effect", "queries_with_mixed_signs"]
    pd.testing.assert_frame_equal(got[cols].reset_index(drop=True), want[cols], check_dtype=False)
