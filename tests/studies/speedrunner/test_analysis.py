"""Analytics on synthetic records (the logic of each table; numbers in committed tables come from real runs):
declared inputs only, headline metric, cost with sleep phases, paired tests, retention, zombies, truncation,
and the analytics rules on a config change."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from skillrepro.config import Price
from skillrepro.studies.speedrunner import analysis
from skillrepro.studies.speedrunner.analysis import figures, statistics, tables
from skillrepro.studies.speedrunner.paths import Run, batch_of, folder_of
from skillrepro.skills import Library
from skillrepro.skills.library import parse_functions
from skillrepro.store import Episode, LLMCall, SkillCall, Step, write_records
from repo import ROOT, copy_workflow

PRICING = {"m": Price(input=1.0, output=10.0)}


def study(**over) -> analysis.Study:
    base = dict(
        variants={"react": {"method": "react", "options": {}, "benchmarks": None},
                  "speedrunner": {"method": "speedrunner", "options": {}, "benchmarks": None},
                  "sr-noint": {"method": "speedrunner", "options": {"interpreter": False}, "benchmarks": ["babyai"]}},
        benchmarks={"babyai": {"env": "babyai", "options": {}, "after": None, "headline": "success"},
                    "crafter": {"env": "crafter", "options": {}, "after": None, "headline": "progression"}},
        sleep_every=2, train_rollouts=4, config_name="test.yaml")
    return analysis.Study(**(base | over))


def episode(run: str, split: str, version: int, task: str, success: bool, tokens: int, bench: str | None = None,
            progression: float | None = None) -> Episode:
    b, variant, seed = run.split("/")
    eid = f"{run}/{split}/c{version}/{task}/{bench or b}"
    return Episode(eid, run, bench or b, variant.split("-")[0], variant, int(seed.removeprefix("seed")), split, version,
                   version, task, success, float(success) if progression is None else progression, 0.0, 3, 2, 0,
                   100, 40, tokens, 0, 1.0, "success" if success else "budget")


def call(session: str, role: str = "actor", prompt: int = 1000, completion: int = 100) -> LLMCall:
    return LLMCall(f"{session}/{role}/{prompt}", session, role, "m", "embedded", prompt, 0, completion, 0, 0.1, 0,
                   "stop", "", "", "", 0.0)


def write_batch(folder: Path, eps: list[Episode]) -> None:
    write_records(folder / "episodes.parquet", eps, Episode)
    write_records(folder / "llm_calls.parquet", [call(e.episode_id, completion=e.completion_tokens) for e in eps], LLMCall)
    write_records(folder / "steps.parquet", [], Step)
    write_records(folder / "skill_calls.parquet", [], SkillCall)


def test_headline_is_progression_on_crafter_and_cost_counts_actor_calls(tmp_path):
    eps = [episode("crafter/react/seed0", "test", 0, "t1", False, 50, progression=0.25),
           episode("babyai/react/seed0", "test", 0, "t1", True, 70)]
    write_batch(tmp_path / "a", eps[:1])
    write_batch(tmp_path / "b", eps[1:])
    files = [tmp_path / "a/episodes.parquet", tmp_path / "b/episodes.parquet"]
    calls = [tmp_path / "a/llm_calls.parquet", tmp_path / "b/llm_calls.parquet"]
    test = analysis.episodes(files, calls, [tmp_path / "a/skill_calls.parquet"], PRICING)
    per_seed = analysis.checkpoint_metrics(test, study()).set_index("run_benchmark")
    assert per_seed.loc["crafter", "score"] == 0.25 and per_seed.loc["babyai", "score"] == 1.0
    # 1000 input tokens at $1/M + 50 output tokens at $10/M
    assert per_seed.loc["crafter", "cost"] == pytest.approx((1000 * 1 + 50 * 10) / 1e6)


def frame(episode_id: str, frame_id: str, parent: str = "", function: str = "go_to") -> SkillCall:
    return SkillCall(frame_id, parent, episode_id, 1, function, "{}", "[]", "None", "", 0.01)


def test_skill_calls_per_episode_count_the_actors_calls_in_main_csv(tmp_path):
    """Two seeds at the final checkpoint: seed 0 made 3 and 1 top-level calls (4 nested frames not counted),
    seed 1 made 0 and 2: per seed 2.0 and 1.0, so main.csv says 1.5 with s.d. 0.707."""
    s = study()
    made = {0: [3, 1], 1: [0, 2]}
    folders = []
    for seed, counts in made.items():
        run = f"babyai/react/seed{seed}"
        eps = [episode(run, "test", 2, f"t{i}", True, 10) for i in range(2)]
        folder = tmp_path / f"seed{seed}"
        write_batch(folder, eps)
        frames = []
        for e, n in zip(eps, counts):
            for j in range(n):
                frames.append(frame(e.episode_id, f"{e.episode_id}:{j}"))
                frames += [frame(e.episode_id, f"{e.episode_id}:{j}.{c}", f"{e.episode_id}:{j}", "step") for c in (0, 1)]
        write_records(folder / "skill_calls.parquet", frames, SkillCall)
        folders.append(folder)
    test = analysis.episodes([f / "episodes.parquet" for f in folders], [f / "llm_calls.parquet" for f in folders],
                             [f / "skill_calls.parquet" for f in folders], {})
    assert sorted(test.skill_calls) == [0, 1, 2, 3]
    main = tables.main_table(analysis.checkpoint_metrics(test, s), s).iloc[0]
    assert main.skill_calls_per_episode_mean == pytest.approx(1.5)
    assert main.skill_calls_per_episode_sd == pytest.approx(0.5 ** 0.5)
    # without the skill-call records an episode has none: the column never guesses
    bare = analysis.episodes([folders[0] / "episodes.parquet"], [folders[0] / "llm_calls.parquet"], [], {})
    assert list(bare.skill_calls) == [0, 0]


def test_only_given_files_are_read(tmp_path):
    write_batch(tmp_path / "kept", [episode("babyai/react/seed0", "test", 0, "t1", True, 10)])
    write_batch(tmp_path / "leftover", [episode("babyai/stale/seed0", "test", 0, "t1", True, 10)])
    test = analysis.episodes([tmp_path / "kept/episodes.parquet"], [tmp_path / "kept/llm_calls.parquet"],
                             [tmp_path / "kept/skill_calls.parquet"], {})
    assert list(test.variant) == ["react"]


def test_training_cost_counts_every_call_and_charges_each_sleep_phase_to_the_batch_before_it(tmp_path):
    s = study()
    run = tmp_path / "runs/babyai/speedrunner/seed0"
    for k in (0, 1):
        eps = [episode("babyai/speedrunner/seed0", "train", k, f"t{k}{i}", False, 100) for i in (0, 1)]
        write_batch(run / f"train/batch{k}", eps)
    # a curriculum call of batch 0 (not an episode's own session) counts too
    curriculum = call("babyai/speedrunner/seed0/train/c0/curriculum", "curriculum", 500, 50)
    write_records(run / "train/batch0/llm_calls.parquet",
                  [call(f"x{i}", completion=100) for i in (0, 1)] + [curriculum], LLMCall)
    write_records(run / "induce/v1/llm_calls.parquet", [call("inducer-1", "inducer", 10_000, 1000)], LLMCall)
    files = [run / "train/batch0/llm_calls.parquet", run / "train/batch1/llm_calls.parquet", run / "induce/v1/llm_calls.parquet"]
    eps = analysis.episodes([run / f"train/batch{k}/episodes.parquet" for k in (0, 1)], files[:2], [], PRICING)
    calls = analysis.batch_calls(files, PRICING)
    assert list(zip(calls.cycle, calls.phase)) == [(0, "train"), (1, "train"), (0, "sleep")]
    cost = analysis.training_cost(eps, calls, s).set_index("cycle")
    actor = (1000 + 100 * 10) / 1e6
    assert cost.loc[0, "actor_cost"] == pytest.approx(actor + (500 + 50 * 10) / 1e6 / 2)
    assert cost.loc[0, "sleep_cost"] == pytest.approx((10_000 + 1000 * 10) / 1e6 / 2)  # two episodes share it
    assert cost.loc[1, "sleep_cost"] == 0 and cost.loc[1, "actor_cost"] == pytest.approx(actor)
    assert list(cost.train_rollouts) == [2, 4]
    with pytest.raises(ValueError, match="neither a training batch"):
        analysis.batch_calls([run / "train/batch0/episodes.parquet"], PRICING)


def test_main_table_takes_each_runs_final_checkpoint_on_its_own_test_set():
    s = study()
    test = pd.DataFrame([
        dict(run_benchmark="babyai", eval_benchmark="babyai", method="react", variant="react", seed=seed,
             library_version=v, task_id=f"t{i}", episode_id=f"{seed}{v}{i}", success=float(ok), progression=float(ok),
             output_tokens=tok, llm_calls=2, skill_calls=0, prompt_tokens=10, cached_tokens=5, n_steps=2, n_invalid_actions=0,
             wall_s=1.0, cost=0.0)
        for seed, v, i, ok, tok in [(0, 0, 0, 0, 100), (0, 0, 1, 1, 100), (0, 2, 0, 1, 50), (0, 2, 1, 1, 70),
                                    (1, 0, 0, 0, 90), (1, 2, 0, 0, 40), (1, 2, 1, 1, 60)]
    ])
    per_seed = analysis.checkpoint_metrics(test, s)
    main = tables.main_table(per_seed, s).iloc[0]
    assert (main.library_version, main.train_rollouts, main.n_seeds, main.n_episodes) == (2, 4, 2, 4)
    assert main.score_mean == pytest.approx((1.0 + 0.5) / 2) and main.headline == "success"
    assert main.output_tokens_per_episode_mean == pytest.approx((60 + 50) / 2)
    assert main.cached_token_ratio == pytest.approx(0.5)


def test_paired_tests_pair_by_seed_and_task():
    s = study()
    rows = []
    for variant, tokens in (("speedrunner", [10, 12, 11, 13]), ("react", [50, 40, 45, 60])):
        for j, tok in enumerate(tokens):
            rows.append(dict(run_id=f"babyai/{variant}/seed{j // 2}", run_benchmark="babyai", eval_benchmark="babyai",
                             method=variant, variant=variant, seed=j // 2, library_version=2, task_id=f"t{j % 2}",
                             success=float(variant == "speedrunner" or j == 0), progression=0.0, output_tokens=tok))
    stats = statistics.paired_tests(pd.DataFrame(rows), s).set_index("metric")
    from scipy.stats import ttest_rel

    expected = ttest_rel([10, 12, 11, 13], [50, 40, 45, 60])
    tok = stats.loc["output_tokens"]
    assert (tok.n, tok.baseline) == (4, "react")
    assert tok.statistic == pytest.approx(expected.statistic) and tok.p_value == pytest.approx(expected.pvalue)
    assert stats.loc["success"].mean_difference == pytest.approx(0.75)


def test_retention_compares_the_first_task_before_and_after_the_second():
    s = study(benchmarks={"t3": {"env": "scienceworld", "options": {}, "after": None, "headline": "success"},
                          "t4": {"env": "scienceworld", "options": {}, "after": "t3", "headline": "success"}})
    assert s.offset("t4") == 4
    base = dict(method="speedrunner", variant="speedrunner", seed=0, n_episodes=2, success=0, progression=0,
                llm_calls=1, cached_ratio=0, invalid_action_rate=0)
    per_seed = pd.DataFrame([
        base | dict(run_benchmark="t3", eval_benchmark="t3", library_version=2, score=0.5, cost=2.0, output_tokens=100),
        base | dict(run_benchmark="t3", eval_benchmark="t3", library_version=1, score=0.1, cost=9.0, output_tokens=900),
        base | dict(run_benchmark="t4", eval_benchmark="t3", library_version=2, score=0.4, cost=1.5, output_tokens=80),
        base | dict(run_benchmark="t4", eval_benchmark="t4", library_version=2, score=0.9, cost=1.0, output_tokens=50),
    ])
    r = tables.retention(per_seed, s).iloc[0]
    assert (r.trained_first, r.trained_second, r.n_seeds) == ("t3", "t4", 1)
    assert r.change_points == pytest.approx(-10.0) and r.cost_change_pct == pytest.approx(-25.0)
    assert r.output_tokens_change_pct == pytest.approx(-20.0)


def lib(source: str, version: int = 3) -> Library:
    return Library(version, parse_functions(source))


def test_combat_share_follows_callers():
    library = lib("def fight_zombie(env):\n    return env.do()\n\n"
                  "def survive(env):\n    return fight_zombie(env)\n\n"
                  "def collect_wood(env):\n    return env.do()\n\n"
                  "def plan(env):\n    return survive(env)\n")
    assert tables.combat_share(library) == pytest.approx(3 / 4)
    assert tables.combat_share(Library(0)) == 0.0


def test_zombie_table_is_relative_to_react_at_each_level():
    s = study(benchmarks={"c0": {"env": "crafter", "options": {"zombie_frequency": 0.0}, "after": None, "headline": "progression"},
                          "c1": {"env": "crafter", "options": {}, "after": None, "headline": "progression"}},
              variants={"react": {"method": "react", "options": {}, "benchmarks": None},
                        "speedrunner": {"method": "speedrunner", "options": {}, "benchmarks": None}})
    rows = [dict(run_benchmark=b, eval_benchmark=b, method=v, variant=v, seed=0, library_version=2, score=sc)
            for b, v, sc in [("c0", "react", 0.2), ("c0", "speedrunner", 0.3), ("c1", "react", 0.2), ("c1", "speedrunner", 0.1)]]
    combat = pd.DataFrame([{"benchmark": "c1", "variant": "speedrunner", "combat_share": 0.5}])
    t = tables.zombie_table(pd.DataFrame(rows), combat, s).set_index(["zombie_frequency", "variant"])
    assert t.loc[(0.0, "speedrunner"), "vs_react_points_mean"] == pytest.approx(10.0)
    assert t.loc[(1.0, "speedrunner"), "vs_react_points_mean"] == pytest.approx(-10.0)
    assert t.loc[(1.0, "speedrunner"), "combat_share_mean"] == 0.5


def test_truncation_shows_the_last_n_visible_skills_and_keeps_the_rest():
    library = lib("def a(env):\n    return 1\n\ndef _h(env):\n    return 2\n\ndef b(env):\n    return _h(env)\n\n"
                  "def c(env):\n    return a(env)\n")
    t = tables.truncate(library, 2)
    assert [f.name for f in t.public()] == ["b", "c"] and len(t.functions) == 4
    assert t.meta["truncated_to"] == 2 and t.meta["visible_before"] == 3
    assert len(tables.truncate(library, 800).public()) == 3  # clipped to the library


def test_table8_brackets_the_truncations_with_the_runs_own_checkpoints(tmp_path):
    s = study()
    run = "babyai/speedrunner/seed0"
    files = {}
    for n, ok in ((1, [True, False]), (50, [False, False]), ("all", [True, True])):
        folder = tmp_path / f"runs/{run}/truncated/n{n}"
        write_batch(folder, [episode(run, "test", 2, f"t{i}", o, 10) for i, o in enumerate(ok)])
        files[str(folder / "episodes.parquet")] = (n, 3 if n == "all" else min(n, 3))
    eps = analysis.episodes(list(files), [f.replace("episodes", "llm_calls") for f in files],
                            [f.replace("episodes", "skill_calls") for f in files], {})
    trunc = tables.truncation_metrics(eps, files, s)
    per_seed = pd.DataFrame([dict(run_benchmark="babyai", eval_benchmark="babyai", variant="speedrunner", seed=0,
                                  library_version=v, n_episodes=2, score=sc, output_tokens=tok)
                             for v, sc, tok in ((0, 0.0, 90.0), (2, 0.25, 30.0))])
    t = tables.table8(trunc, per_seed, s)
    # the full library is the n=all re-evaluation (options as the truncations'), not the v2 checkpoint's 0.25
    assert list(t.n_requested) == [1, 50, "all (final)", "0 (no skills)"]
    assert list(t.n_shown) == [1, 3, 3, 0] and list(t.score) == [0.5, 0.0, 1.0, 0.0]
    # A run whose v0 shows skills (a fixed library) has its N=0 row from the re-evaluation showing none.
    folder = tmp_path / f"runs/{run}/truncated/n0"
    write_batch(folder, [episode(run, "test", 2, f"t{i}", False, 40) for i in range(2)])
    files[str(folder / "episodes.parquet")] = (0, 0)
    eps = analysis.episodes(list(files), [f.replace("episodes", "llm_calls") for f in files],
                            [f.replace("episodes", "skill_calls") for f in files], {})
    t = tables.table8(tables.truncation_metrics(eps, files, s), per_seed, s)
    assert list(t.n_requested) == [1, 50, "all (final)", "0 (no skills)"]
    assert list(t.score) == [0.5, 0.0, 1.0, 0.0] and t.output_tokens.iloc[-1] == 40.0


def test_figure_groups_follow_methods_and_options():
    s = study(variants={"react": {"method": "react", "options": {}, "benchmarks": None},
                        "asi": {"method": "asi", "options": {}, "benchmarks": None},
                        "asi_replay": {"method": "asi_replay", "options": {}, "benchmarks": ["babyai"]},
                        "speedrunner": {"method": "speedrunner", "options": {}, "benchmarks": None},
                        "sr-noint": {"method": "speedrunner", "options": {"interpreter": False}, "benchmarks": ["crafter"]},
                        "asi-crafter": {"method": "asi", "options": {"min_progression": 0.1}, "benchmarks": ["crafter"]}},
              benchmarks={"babyai": {"env": "babyai", "options": {}, "after": None, "headline": "success"},
                          "crafter": {"env": "crafter", "options": {}, "after": None, "headline": "progression"}})
    s.variants["asi"]["benchmarks"] = ["babyai"]
    # ASI runs on Crafter only with options: that variant is Crafter's ASI, not an ablation.
    assert s.groups("fig2") == {"babyai": ["react", "asi", "asi_replay", "speedrunner"],
                                "crafter": ["react", "speedrunner", "asi-crafter"]}
    assert s.groups("fig4") == {}  # the interpreter ablation alone is figure 7's
    s.variants["sr-public"] = {"method": "speedrunner", "options": {"access": "all_public"}, "benchmarks": ["crafter"]}
    assert s.groups("fig4") == {"crafter": ["speedrunner", "sr-noint", "sr-public"]}
    assert s.groups("fig7") == {"crafter": ["speedrunner", "sr-noint"]}
    assert s.groups("fig12") == {"babyai": ["asi", "asi_replay", "speedrunner"]}


def test_a_figure_compares_what_its_declaration_picks(monkeypatch):
    """COMPARISONS is the one place a figure's variants are chosen: a new entry is a new comparison."""
    s = study(variants={"asi": {"method": "asi", "options": {}, "benchmarks": None},
                        "asi-k2": {"method": "asi", "options": {"max_new_per_episode": 2}, "benchmarks": None},
                        "sr-off": {"method": "speedrunner", "options": {"interpreter": 0}, "benchmarks": None}},
              benchmarks={"babyai": {"env": "babyai", "options": {}, "after": None, "headline": "success"}})
    monkeypatch.setitem(analysis.COMPARISONS, "asi_sweep", analysis.Comparison(
        "ASI's sweep", (analysis.Pick("asi", "default"), analysis.Pick("asi", "ablations")), needs="asi variants",
        drawn_when=analysis.Pick("asi", options=(("max_new_per_episode", 2),))))
    assert s.groups("asi_sweep") == {"babyai": ["asi", "asi-k2"]}
    assert s.groups("fig7") == {}  # interpreter: 0 is not interpreter: false
    with pytest.raises(ValueError, match="unknown figure 'fig99'; declared: fig2, fig4, fig7, fig12, asi_sweep"):
        s.groups("fig99")


def test_empty_state_figure_names_the_config(tmp_path):
    s = study()
    out = tmp_path / "f.png"
    figures.curves(pd.DataFrame(columns=["run_benchmark", "eval_benchmark", "variant"]), s.groups("fig12"), s, out,
                    "Figure 12", "an asi_replay variant")
    assert out.stat().st_size > 1000


# ------------------------------------------------------------------------------ the rules on synthetic runs
def synthetic_runs(root: Path, variants: list[str], train_rollouts: int) -> None:
    """Every file the analytics rules read, for babyai x variants x seed 0, sleep every 2, eval every 2."""
    for v in variants:
        run = root / f"results/runs/babyai/{v}/seed0"
        for k in range(train_rollouts // 2 + 1):
            write_batch(run / f"eval/v{k}", [episode(f"babyai/{v}/seed0", "test", k, f"t{i}", i < k, 100 - 10 * k)
                                             for i in range(2)])
            Library(k).write(run / f"library/v{k}")
            if k:
                write_records(run / f"induce/v{k}/llm_calls.parquet", [], LLMCall)
            if k < train_rollouts // 2:
                write_batch(run / f"train/batch{k}", [episode(f"babyai/{v}/seed0", "train", k, f"x{k}{i}", False, 90)
                                                      for i in range(2)])


def test_main_csv_holds_exactly_the_configured_runs_after_config_changes(tmp_path):
    copy_workflow(tmp_path)
    cfg = yaml.safe_load((ROOT / "tests/data/tiny.yaml").read_text())
    cfg["protocol"] |= {"train_rollouts": 4, "sleep_every": 2, "eval_every": 2}
    synthetic_runs(tmp_path, ["react", "speedrunner"], 4)
    synthetic_runs(tmp_path, ["leftover"], 4)  # a variant no config declares
    (tmp_path / "results/runs/babyai/react/seed0/eval/.v9.partial").mkdir()  # a killed job's folder
    write_batch(tmp_path / "results/runs/babyai/react/seed0/eval/.v9.partial/0000",
                [episode("babyai/react/seed0", "test", 9, "t0", True, 1)])
    env = os.environ | {"SKILLREPRO_LLM_URL": "http://127.0.0.1:9/v1"}  # no job here calls the model
    rules = ["--allowed-rules", "analytics", "tables"]

    def main_csv(config: dict) -> pd.DataFrame:
        path = tmp_path / "cfg.yaml"
        path.write_text(yaml.safe_dump(config))
        proc = subprocess.run([sys.executable, "-m", "snakemake", "results/tables/main.csv", "--cores", "1",
                               "--configfile", str(path), *rules], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return pd.read_csv(tmp_path / "results/tables/main.csv")

    main = main_csv(cfg)
    assert list(main.variant) == ["react", "speedrunner"] and set(main.library_version) == {2}
    assert (main.n_episodes == 2).all() and (main.score_mean == 1.0).all()
    del cfg["methods"]["speedrunner"]
    assert list(main_csv(cfg).variant) == ["react"]
    cfg["protocol"] |= {"train_rollouts": 2}  # a shortened run reports its new final checkpoint
    main = main_csv(cfg)
    assert list(main.library_version) == [1] and list(main.train_rollouts) == [2] and main.score_mean[0] == 0.5


# ------------------------------------------------------------------------------ figures with data
def test_figures_draw_their_data(tmp_path):
    s = study(benchmarks={"c0": {"env": "crafter", "options": {"zombie_frequency": 0.0}, "after": None, "headline": "progression"},
                          "c1": {"env": "crafter", "options": {}, "after": None, "headline": "progression"},
                          "t3": {"env": "scienceworld", "options": {}, "after": None, "headline": "success"},
                          "t4": {"env": "scienceworld", "options": {}, "after": "t3", "headline": "success"}},
              variants={"react": {"method": "react", "options": {}, "benchmarks": None},
                        "speedrunner": {"method": "speedrunner", "options": {}, "benchmarks": None}})
    rows = []
    for b, evals in (("c0", ["c0"]), ("c1", ["c1"]), ("t3", ["t3", "t4"]), ("t4", ["t4", "t3"])):
        for e in evals:
            for v in s.variants:
                for seed in (0, 1):
                    for k in (0, 1, 2):
                        rows.append(dict(run_benchmark=b, eval_benchmark=e, method=v, variant=v, seed=seed,
                                         library_version=k, train_rollouts=s.offset(b) + 2 * k, n_episodes=2,
                                         score=0.1 * k + 0.05 * seed + (v == "speedrunner") * 0.1, success=0.0,
                                         progression=0.0, output_tokens=100 - 10 * k, llm_calls=3, skill_calls=1,
                                         cached_ratio=0.5,
                                         cost=0.01, invalid_action_rate=0.0))
    per_seed = pd.DataFrame(rows)
    checkpoints = tables.checkpoint_table(per_seed)
    combat = pd.DataFrame([{"benchmark": b, "variant": "speedrunner", "combat_share": c} for b, c in (("c0", 0.1), ("c1", 0.4))])
    zombies = tables.zombie_table(per_seed, combat, s)
    assert list(zombies[zombies.variant == "speedrunner"].vs_react_points_mean.round(6)) == [10.0, 10.0]
    drawings = {
        "shift": lambda out: figures.shift_figure(checkpoints, tables.retention(per_seed, s), s, out),
        "zombie": lambda out: figures.zombie_figure(zombies, s, out),
        "plane": lambda out: figures.plane_figure({"m1": tables.main_table(per_seed, s),
                                                    "m2": tables.main_table(per_seed.assign(score=0.3), s)}, s, out),
        "curves": lambda out: figures.curves(checkpoints, s.groups("fig2"), s, out, "Figure 2", "any run"),
    }
    empty = tmp_path / "empty.png"
    figures.empty_figure(empty, "x", "y", "z")
    for name, draw in drawings.items():
        draw(tmp_path / f"{name}.png")
        # a drawn figure is larger than the empty state's text panel
        assert (tmp_path / f"{name}.png").stat().st_size > 2 * empty.stat().st_size, name


# ------------------------------------------------------------------------------ cross-model (appendix G.2)
def cross_model_run(score_gain: float, tokens: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A finished run's checkpoints.csv and stats.csv, scripted: react flat at 0.5 (two seeds, 0.4 and 0.6),
    speedrunner from 0.5 to 0.5 + score_gain, its output tokens from 200 to `tokens` and LLM calls 10 to 5."""
    rows = []
    for v in ("react", "speedrunner"):
        for seed in (0, 1):
            for k in (0, 1, 2):
                sr = v == "speedrunner"
                rows.append(dict(run_benchmark="babyai", eval_benchmark="babyai", method=v, variant=v, seed=seed,
                                 library_version=k, train_rollouts=2 * k, n_episodes=2,
                                 score=0.4 + 0.2 * seed + (sr * score_gain * k / 2), success=0.0, progression=0.0,
                                 output_tokens=200 + (tokens - 200) * k / 2 if sr else 200, llm_calls=10 - 2.5 * k * sr,
                                 skill_calls=sr * k, cached_ratio=0.5, cost=0.0, invalid_action_rate=0.0))
    stats = pd.DataFrame([{"benchmark": "babyai", "speedrunner": "speedrunner", "baseline": "react", "metric": m,
                           "n": 4, "mean_speedrunner": 0, "mean_baseline": 0, "mean_difference": 0, "statistic": 1,
                           "p_value": p} for m, p in (("success", 0.03), ("output_tokens", 0.001))])
    return tables.checkpoint_table(pd.DataFrame(rows)), stats


def test_table7_and_figures_9_and_10_show_each_models_run(tmp_path):
    s = study()
    runs = {"gemini-3-flash": cross_model_run(0.4, 50), "qwen3.5-27b": cross_model_run(-0.2, 100)}
    t = tables.table7(runs, s).set_index(["model", "variant"])
    assert list(t.index) == [("gemini-3-flash", "react"), ("gemini-3-flash", "speedrunner"),
                             ("qwen3.5-27b", "react"), ("qwen3.5-27b", "speedrunner")]
    g = t.loc[("gemini-3-flash", "speedrunner")]
    assert (g.first_version, g.final_version, g.n_seeds, g.metric) == (0, 2, 2, "success")
    assert g.score_first_mean == pytest.approx(0.5) and g.score_final_mean == pytest.approx(0.9)
    assert g.score_change_points == pytest.approx(40) and g.score_final_sd == pytest.approx(0.02 ** 0.5)
    assert g.output_tokens_change_pct == pytest.approx(-75) and g.llm_calls_change_pct == pytest.approx(-50)
    assert t.loc[("qwen3.5-27b", "speedrunner")].score_change_points == pytest.approx(-20)
    react = t.loc[("gemini-3-flash", "react")]
    assert (react.speedrunner, react.p_score_vs_speedrunner, react.p_output_tokens_vs_speedrunner) == (
        "speedrunner", 0.03, 0.001)
    assert pd.isna(g.p_score_vs_speedrunner)  # SpeedRunner is not tested against itself
    empty = tmp_path / "empty.png"
    figures.empty_figure(empty, "x", "y", "z")
    for n, (model, (checkpoints, _)) in zip((9, 10), runs.items()):
        figures.cross_model_figure(checkpoints, model, n, s, tmp_path / f"f{n}.png", "its checkpoints.csv")
        assert (tmp_path / f"f{n}.png").stat().st_size > 2 * empty.stat().st_size
    # a run with no checkpoint of the main comparison is an error, not an empty figure
    with pytest.raises(ValueError, match="figure 9: x.csv holds no test checkpoint"):
        figures.cross_model_figure(runs["qwen3.5-27b"][0].iloc[0:0], "qwen3.5-27b", 9, s, tmp_path / "no.png", "x.csv")
    assert not (tmp_path / "no.png").exists()


def test_cross_model_outputs_build_from_finished_runs_and_fail_without_them(tmp_path):
    copy_workflow(tmp_path)
    cfg = yaml.safe_load((ROOT / "tests/data/tiny.yaml").read_text())
    env = os.environ | {"SKILLREPRO_LLM_URL": "http://127.0.0.1:9/v1"}

    def smk(*targets: str) -> subprocess.CompletedProcess:
        (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
        return subprocess.run([sys.executable, "-m", "snakemake", *targets, "--cores", "1", "--configfile", "cfg.yaml",
                               "--allowed-rules", "figure_9_10", "table_7", "cross_model"],
                              cwd=tmp_path, env=env, capture_output=True, text=True)

    refused = smk("cross_model", "-n")
    assert refused.returncode != 0 and "figure 9 shows the runs of gemini-3-flash, but this config's model is " \
        "smollm2-135m and analysis.cross_model lists no run" in refused.stdout + refused.stderr
    cfg["analysis"] = {"cross_model": {}}
    for label, gain, own in (("gemini-3-flash", 0.4, False), ("qwen3.5-27b", -0.2, False), ("smollm2-135m", 0.0, True)):
        folder = tmp_path / ("results/tables" if own else f"cross/{label}/results/tables")
        folder.mkdir(parents=True, exist_ok=True)
        checkpoints, stats = cross_model_run(gain, 100)
        checkpoints.to_csv(folder / "checkpoints.csv", index=False)
        stats.to_csv(folder / "stats.csv", index=False)
        if not own:
            (folder / "main.csv").write_text("benchmark,variant\n")  # figure 11's; figures 9, 10 and table 7 read beside it
            cfg["analysis"]["cross_model"][label] = f"cross/{label}/results/tables/main.csv"
    made = smk("results/tables/table7.csv", "results/figures/figure10.png")
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    t = pd.read_csv(tmp_path / "results/tables/table7.csv")
    assert list(dict.fromkeys(t.model)) == ["smollm2-135m", "gemini-3-flash", "qwen3.5-27b"]
    assert list(t[t.variant == "speedrunner"].score_change_points.round(6)) == [0.0, 40.0, -20.0]
    assert (tmp_path / "results/figures/figure10.png").stat().st_size > 10_000


def test_a_cross_model_run_is_found_or_named(tmp_path):
    from skillrepro.studies.speedrunner.analysis import cross_model_tables

    assert cross_model_tables("m", "m", {}, "figure 9") == "results/tables"  # this run's own
    folder = tmp_path / "other/results/tables"
    folder.mkdir(parents=True)
    for name in ("main.csv", "checkpoints.csv"):
        (folder / name).write_text("x\n")
    listed = {"qwen3.5-27b": str(folder / "main.csv")}
    with pytest.raises(ValueError, match="stats.csv does not exist: finish that run"):
        cross_model_tables("qwen3.5-27b", "m", listed, "table 7")
    with pytest.raises(ValueError, match="figure 10 shows the runs of gemini-3-flash, but this config's model is m "
                                         "and analysis.cross_model lists qwen3.5-27b"):
        cross_model_tables("gemini-3-flash", "m", listed, "figure 10")
    (folder / "stats.csv").write_text("x\n")
    assert cross_model_tables("qwen3.5-27b", "m", listed, "table 7") == str(folder)


# ------------------------------------------------------------------------------ config and DAG
def config_with(**changes) -> dict:
    cfg = yaml.safe_load((ROOT / "tests/data/tiny.yaml").read_text())
    for key, value in changes.items():
        section, _, name = key.partition("__")
        cfg.setdefault(section, {})[name] = value
    return cfg


@pytest.mark.parametrize("change, message", [
    ({"benchmarks__t4": {"env": "babyai", "after": "nowhere"}}, "benchmarks.t4.after: 'nowhere' is not another"),
    ({"benchmarks__babyai": {"env": "babyai", "after": "babyai"}}, "benchmarks.babyai.after: 'babyai' is not another"),
    ({"benchmarks__babyai": {"env": "babyai", "evaluate_on": ["x"]}}, "benchmarks.babyai.evaluate_on: 'x'"),
    ({"analysis__truncation": {"variant": "voyager", "benchmark": "babyai"}}, "analysis.truncation.variant"),
    ({"analysis__truncation": {"variant": "react", "benchmark": "babyai", "seeds": [7]}}, "analysis.truncation.seeds"),
])
def test_config_checks_protocol_variants(change, message):
    from skillrepro.config import ConfigError
    from skillrepro.check import check_config

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        check_config(config_with(**change), check_files=False)


def test_phase_chain_and_truncation_are_in_the_dag(tmp_path):
    cfg = config_with(benchmarks__t4={"env": "babyai", "after": "babyai"},
                      analysis__truncation={"variant": "speedrunner", "benchmark": "babyai", "sizes": [1, 50]})
    cfg["benchmarks"]["babyai"]["evaluate_on"] = ["t4"]
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "all", "-n", "--forceall", "--cores", "2",
                           "--configfile", str(path)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    # the later phase's v0 is the earlier phase's final library, per variant and seed
    assert ("input: results/runs/babyai/speedrunner/seed0/library/v2/manifest.json\n"
            "    output: results/runs/t4/speedrunner/seed0/library/v0/manifest.json") in out
    for target in ("results/runs/babyai/react/seed0/eval_on/t4/v2/episodes.parquet",
                   "results/runs/t4/react/seed0/eval_on/babyai/v2/episodes.parquet",
                   "results/runs/babyai/speedrunner/seed0/truncated/n50/episodes.parquet",
                   "results/runs/babyai/speedrunner/seed0/truncated/nall/episodes.parquet"):
        assert target in out
    assert "results/runs/t4/react/seed0/library/v0/manifest.json" in out and "rule init_library" in out


@pytest.mark.parametrize("preset", ["cpu-study", "shift", "cross-model-gemini-3-flash", "laptop-learning"])
def test_presets_build_their_dag(preset, tmp_path):
    env = os.environ | {"GEMINI_API_KEY": "unused-in-a-dry-run"}
    # A billed preset ships zero rates that the user replaces (a zero-priced billed model is refused).
    rates = tmp_path / "rates.yaml"
    rates.write_text("pricing:\n  gemini-3-flash: {input: 0.5, cached_input: 0.05, output: 3.0}\n")
    extra = [str(rates)] if preset.startswith("cross-model") else []  # --configfile takes several files
    if preset == "laptop-learning":  # with the lever presets after it: a list-valued example_file, fingerprinted;
        extra = ["configs/laptop-example.yaml", "configs/laptop-observation.yaml"]  # a second BabyAI instance
    proc = subprocess.run([sys.executable, "-m", "snakemake", "all", "-n", "--forceall", "--cores", "8",
                           "--configfile", f"configs/{preset}.yaml", *extra], cwd=ROOT, env=env, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "rule analytics:" in proc.stdout and "rule figure_11:" in proc.stdout
    if preset == "shift":
        assert "rule continue_library:" in proc.stdout and "rule evaluate_on:" in proc.stdout
    if preset == "laptop-learning":
        assert "results/runs/babyai/speedrunner_mission/seed2/eval/v2/episodes.parquet" in proc.stdout
        assert "results/runs/babyai_observe/speedrunner/seed2/eval/v2/episodes.parquet" in proc.stdout


def test_an_unreported_cached_count_is_priced_as_uncached_and_its_ratio_unknown(tmp_path):
    """A call whose server reported no cached tokens (null) costs the full input price, explicitly (not a null
    cost), and the checkpoint's cached_ratio is unknown (NaN), not a ratio read from a partial sum."""
    import dataclasses

    run = "babyai/react/seed0"
    eps = [dataclasses.replace(episode(run, "test", 0, f"t{i}", True, 50), cached_tokens=None) for i in range(2)]
    folder = tmp_path / "a"
    write_batch(folder, eps)
    calls = [dataclasses.replace(call(e.episode_id, completion=50), cached_tokens=None) for e in eps]
    write_records(folder / "llm_calls.parquet", calls, LLMCall)
    pricing = {"m": Price(input=1.0, output=10.0, cached_input=0.1)}
    test = analysis.episodes([folder / "episodes.parquet"], [folder / "llm_calls.parquet"], [], pricing)
    assert list(test.cost) == pytest.approx([(1000 * 1.0 + 50 * 10) / 1e6] * 2)
    m = analysis.checkpoint_metrics(test, study()).iloc[0]
    assert pd.isna(m.cached_ratio) and m.cost == pytest.approx((1000 + 500) / 1e6)
    assert Price(1.0, 10.0, 0.1).cost(1000, None, 50) == Price(1.0, 10.0, 0.1).cost(1000, 0, 50) == test.cost[0]


@pytest.mark.parametrize("run", [Run("babyai", "speedrunner", 0), Run("crafter_z2", "asi-replay", 17), Run("seed3", "seed", 2)])
def test_a_runs_folder_reads_back_as_the_run(run: Run):
    """The layout's one parser inverts its one writer, for the folder and for every record under it."""
    assert Run.of(run.folder) == run
    for record in ("library/v3/manifest.json", "train/batch2/llm_calls.parquet", "induce/v3/llm_calls.parquet",
                   "eval/v4/episodes.parquet"):
        path = f"{run.folder}/{record}"
        assert Run.of(path) == run and Run.of(Path("/home/x") / path) == run
        if record.endswith(".parquet"):
            assert folder_of(path)[0] == f"{run.bench}/{run.variant}/seed{run.seed}"
    assert batch_of(f"{run.folder}/induce/v3/llm_calls.parquet") == (folder_of(f"{run.folder}/eval/v1/episodes.parquet")[0], 2, "sleep")
    with pytest.raises(ValueError, match="not in a run folder"):
        Run.of(f"results/tables/{run.bench}.csv")


def test_the_terminations_table_counts_every_end_and_flags_a_full_context():
    def eps(split, version, ends):
        return pd.DataFrame({"run_benchmark": "crafter", "eval_benchmark": "crafter", "method": "asi", "variant": "asi",
                             "seed": range(len(ends)), "split": split, "library_version": version,
                             "episode_id": [f"{split}{version}/{i}" for i in range(len(ends))], "termination": ends})

    test = pd.concat([eps("test", 0, ["budget", "budget"]), eps("test", 1, ["context", "success"])])
    table = analysis.termination_counts(test, eps("train", 0, ["env_done", "wall_clock"]))
    assert list(table.split) == ["test", "test", "train"] and list(table.episodes) == [2, 2, 2]
    assert table.iloc[1][["success", "context"]].tolist() == [1, 1]
    assert table.flag.tolist()[0] == "" and table.flag.tolist()[2] == ""
    assert table.flag.tolist()[1].startswith("1 of 2 episodes ended by context")
    with pytest.raises(ValueError, match="'error'"):  # an end the table does not know is never dropped
        analysis.termination_counts(eps("test", 0, ["error"]), test.iloc[:0])
