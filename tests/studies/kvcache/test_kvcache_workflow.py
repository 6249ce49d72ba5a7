"""The KV-cache study's DAG on a tiny config with the real embedded model (SmolLM2), in a temp copy."""
import pandas as pd
import pytest

from repo import ROOT, copy_workflow, scheduled, snakemake


@pytest.mark.workflow
def test_kvcache_study_end_to_end(tmp_path):
    copy_workflow(tmp_path)
    snakemake("kvcache_all", "--cores", "2", "--configfile", str(ROOT / "tests/data/kvcache_tiny.yaml"), cwd=tmp_path)
    t = tmp_path / "results/tables/kvcache/smollm2-135m"  # the model is part of every result path

    reuse = pd.read_csv(t / "reuse.csv")
    assert set(reuse.format) == {"skillrl", "evoskill"} and set(reuse.policy) == {"retain", "flush"}
    assert (reuse.requests == 2 * 3).all()  # 2 games x 3 requests (the budget), every request recorded
    big = reuse[reuse.capacity_tokens == 65536].set_index(["format", "policy"]).reuse_ratio
    # Retaining the cache across steps reuses more than flushing it before every step; evoskill's
    # conversation only grows, so with the cache kept it reuses more than skillrl's rebuilt prompt.
    for f in ("skillrl", "evoskill"):
        assert big[f, "retain"] > big[f, "flush"] >= 0
    assert big["evoskill", "retain"] > big["skillrl", "retain"] > 0.1
    small = reuse[reuse.capacity_tokens == 3072].set_index(["format", "policy"])
    assert small.loc[("evoskill", "retain"), "preemptions_per_run"] >= 0
    assert (reuse.recomputed_tokens_per_run > 0).all()

    prefix = pd.read_csv(tmp_path / "results/tables/kvcache_prefix.csv").set_index(["format", "relation"])
    assert 30 < prefix.shared_tokens_mean.min() < prefix.loc["evoskill"].shared_tokens_mean.min()

    server = pd.read_csv(t / "server.csv")
    assert (server.backend == "embedded").all() and (server.requests == 6).all()
    assert (server.server_cached_tokens > 0).all() and (server.sim_llamacpp_cached_tokens > 0).all()

    load = pd.read_csv(t / "load.csv")
    assert list(load[load.format == "skillrl"].step) == [0, 1, 2] and (load.running == 2).all()
    success = pd.read_csv(t / "success.csv")
    assert set(success.format) == {"skillrl", "evoskill"} and (success.episodes == 2).all()
    for name in ("reuse", "prefix", "load", "reuse_steps", "recomputed", "preemptions", "success", "server"):
        assert (tmp_path / f"results/figures/kvcache/smollm2-135m/{name}.png").stat().st_size > 5000
    assert set(pd.read_csv(tmp_path / "results/tables/kvcache_models.csv").model) == {"smollm2-135m"}
    log = (tmp_path / "logs/kvcache/smollm2-135m/run_skillrl_seed0.log").read_text()
    assert "prompt tokens, server cached" in log
    # every run starts from empty slots, whichever run the shared server served before (arms start alike)
    import json

    cache = [json.loads(p.read_text())["cache"]
             for p in (tmp_path / "results/kvcache/smollm2-135m/runs").glob("*/seed0/server_counters.json")]
    assert len(cache) == 2 and all(c.startswith("slots erased before the run") for c in cache)
    assert max(int(c.split("(")[1].split()[0]) for c in cache) > 0  # the second run found the first's prompts
    # measured first: the headline is the server's reported cached tokens, the simulator's prediction beside
    head = pd.read_csv(t / "headline.csv").set_index("format")
    srv = server.groupby("format")[["server_cached_tokens", "sim_llamacpp_cached_tokens", "prompt_tokens"]].sum()
    assert (head.source == "measured: the server's cached tokens").all()
    assert head.reuse_ratio.to_dict() == pytest.approx((srv.server_cached_tokens / srv.prompt_tokens).to_dict())
    assert head.difference.to_dict() == pytest.approx(
        ((srv.server_cached_tokens - srv.sim_llamacpp_cached_tokens) / srv.prompt_tokens).to_dict())
    # per-step reuse, recompute and the models' comparison: the server's counts first, the simulator's beside
    steps = pd.read_csv(t / "steps.csv")
    measured = steps[steps.policy == "server"].groupby("format")[["prompt_tokens", "cached_tokens"]].sum()
    assert measured.to_dict() == srv[["prompt_tokens", "server_cached_tokens"]].rename(
        columns={"server_cached_tokens": "cached_tokens"}).to_dict()
    assert steps[steps.policy == "server"].source.str.startswith("measured: the embedded server").all()
    assert (server.server_prefix_miss_tokens == server.prompt_tokens - server.server_cached_tokens).all()
    assert (reuse.prefix_miss_tokens_per_run + reuse.preemption_recompute_tokens_per_run
            == reuse.recomputed_tokens_per_run).all()
    models = pd.read_csv(tmp_path / "results/tables/kvcache_models.csv").set_index("format")
    assert models.measured_reuse_ratio.to_dict() == pytest.approx(head.measured_reuse_ratio.to_dict())


@pytest.mark.workflow
def test_kvcache_study_replayed_without_a_model(tmp_path):
    """Every table and figure of the study from recorded trajectories: no LLM, no game engine."""
    copy_workflow(tmp_path)
    cfg = (ROOT / "tests/data/kvcache_replay.yaml").read_text().replace(
        "replay: planner", f"replay: {ROOT / 'tests/data/kvcache_trajectories.json'}")
    (tmp_path / "replay.yaml").write_text(cfg)
    snakemake("kvcache_all", "--cores", "2", "--configfile", "replay.yaml", cwd=tmp_path)
    t = tmp_path / "results/tables/kvcache/replay"
    reuse = pd.read_csv(t / "reuse.csv").set_index(["format", "policy", "capacity_tokens"])
    assert (reuse.requests == 13).all()  # the two recorded games: 6 + 7 steps, replayed in every format
    for f in ("skillrl", "evoskill", "noskill"):
        assert reuse.loc[(f, "retain", 65536), "reuse_ratio"] > reuse.loc[(f, "flush", 65536), "reuse_ratio"]
    # evoskill's growing conversation outgrows 4240 tokens for two episodes at once: one preempts the other
    assert reuse.loc[("evoskill", "retain", 4240), "preemptions_per_run"] == 1
    assert reuse.loc[("noskill", "retain", 65536), "preemptions_per_run"] == 0
    over = pd.read_csv(t / "overload.csv").set_index(["format", "capacity_tokens"])
    assert pd.isna(over.loc[("noskill", 65536), "first_step_over"])
    assert over.loc[("evoskill", 4240), "first_step_over"] == 3 and pd.isna(over.loc[("skillrl", 4240), "first_step_over"])
    server = pd.read_csv(t / "server.csv")
    # no server: its columns are unknown (empty), never 0
    assert (server.backend == "replay").all() and server.server_cached_tokens.isna().all()
    assert set(pd.read_csv(t / "steps.csv").policy) == {"retain", "flush"}  # no measured rows in a replay
    success = pd.read_csv(t / "success.csv")
    assert (success.success_rate == 1.0).all()  # the planner solves both games
    counters = pd.read_csv(t / "counters.csv")  # no server to ask: only the simulator's counters
    assert counters.server_prefix_cache_queries.isna().all() and (counters.sim_prefix_cache_queries > 0).all()
    for name in ("reuse", "prefix", "load", "reuse_steps", "recomputed", "preemptions", "success", "server"):
        assert (tmp_path / f"results/figures/kvcache/replay/{name}.png").stat().st_size > 5000
    models = pd.read_csv(tmp_path / "results/tables/kvcache_models.csv").set_index("format")
    assert models.loc["evoskill", "preemptions_per_run_at_4240"] == 1
    assert models.loc["evoskill", "reuse_ratio_retain"] > models.loc["skillrl", "reuse_ratio_retain"]
    assert (tmp_path / "results/figures/kvcache_models.png").stat().st_size > 5000
    assert not (tmp_path / "logs/kvcache/replay/run_skillrl_seed0.log").read_text().count("LLM server")
    # 2-1: within an episode the original format breaks at the step count; noskill's prompt breaks far earlier
    breaks = pd.read_csv(t / "breaks.csv").set_index("format")
    assert breaks.loc["skillrl", "break_text_most_common"].split()[0].isdigit()
    assert breaks.loc["skillrl", "break_fraction_median"] > 3 * breaks.loc["noskill", "break_fraction_median"]
    assert 0 < breaks.loc["skillrl", "reuse_ceiling"] < breaks.loc["skillrl", "break_fraction_median"]
    # 1-1: the segments of a prompt add up to it, and the skill sections are where the format puts them
    assert (tmp_path / "results/figures/kvcache_segments.png").stat().st_size > 5000  # the 2-3 prompt example
    seg = pd.read_csv(tmp_path / "results/tables/kvcache_segments.csv")
    first = seg[(seg.format == "skillrl") & (seg.episode == seg.episode.iloc[0])]
    assert list(first[first.segment.isin(["task", "general", "category", "mistakes"])].segment) == [
        "task", "general", "category", "mistakes"]
    assert "34 entries" in seg.bank.iloc[0]
    loc = pd.read_csv(t / "locations.csv").set_index("format")
    assert (loc["mode"] == "replay").all() and loc.new_locations_mean.nunique() == 1  # the same replayed games
    assert 0 < loc.loc["skillrl", "new_locations_mean"] <= loc.loc["skillrl", "go_to_commands_mean"]
    # simulator-only mode says so in the headline table (the captions: test_kvcache_study)
    head = pd.read_csv(t / "headline.csv").set_index("format")
    assert head.source.str.startswith("simulated only").all() and head.measured_reuse_ratio.isna().all()
    assert head.reuse_ratio.to_dict() == reuse.xs(("retain", 65536), level=(1, 2)).reuse_ratio.to_dict()
    # the vLLM a user installs: every setting under 0.11.0 and 0.33.0; with room for everything they agree
    ver = pd.read_csv(t / "versions.csv")
    roomy = ver[ver.capacity_tokens == 65536]
    assert len(ver) == len(reuse) and (roomy["reuse_ratio_0.11.0"] == roomy["reuse_ratio_0.33.0"]).all()
    # the 87 % table: the two recorded games are of different categories, so no pair, said as such
    share = pd.read_csv(tmp_path / "results/tables/kvcache_share.csv")
    assert list(share.format) == ["skillrl", "evoskill", "noskill"] and (share.pairs == 0).all()
    assert (share.seminar_claim == 0.87).all() and share.share_of_prompt_mean.isna().all()
    # a simulator setting reruns the simulations and what reads them, never a run; a run's setting reruns the runs
    (tmp_path / "sim.yaml").write_text(cfg.replace("kvcache:", "kvcache:\n  max_num_seqs: 7", 1))
    jobs = scheduled(snakemake("kvcache_all", "-n", "--configfile", "sim.yaml", cwd=tmp_path).stdout)
    assert "kvcache_simulate" in jobs and not {"kvcache_run", "kvcache_tasks", "kvcache_trajectories"} & set(jobs)
    assert "call_budget: 12" in cfg
    (tmp_path / "run.yaml").write_text(cfg.replace("call_budget: 12", "call_budget: 9"))
    jobs = scheduled(snakemake("kvcache_all", "-n", "--configfile", "run.yaml", cwd=tmp_path).stdout)
    assert {"kvcache_trajectories", "kvcache_run", "kvcache_simulate"} <= set(jobs) and "kvcache_tasks" not in jobs


def test_several_models_get_their_own_paths_and_servers(tmp_path):
    """Dry run with two models: each has its runs, simulations, tables and figures; the second one, not
    the llm section's model, runs on its own server and takes no slot of the shared one."""
    copy_workflow(tmp_path)
    cfg = (ROOT / "tests/data/kvcache_tiny.yaml").read_text() + (
        "  models:\n    - {name: small, llm: {model: smollm2-135m}}\n"
        "    - {name: qwen, llm: {model: qwen2.5-coder-0.5b}}\n")
    (tmp_path / "two.yaml").write_text(cfg)
    out = snakemake("kvcache_all", "-n", "-p", "--cores", "2", "--configfile", "two.yaml", cwd=tmp_path).stdout
    for model in ("small", "qwen"):
        for fmt in ("skillrl", "evoskill"):
            assert f"results/kvcache/{model}/runs/{fmt}/seed0/requests.jsonl" in out
        assert f"results/tables/kvcache/{model}/reuse.csv" in out
        assert f"results/figures/kvcache/{model}/preemptions.png" in out
    assert "results/tables/kvcache_models.csv" in out
    runs = [block for block in out.split("\n\n") if "rule kvcache_run:" in block]
    assert len(runs) == 4
    for block in runs:
        assert ("llm=0" in block) == ("/qwen/" in block), block
    # two models on vLLM servers the pipeline starts: they do not fit one GPU together, so every run starts its
    # own server (no slot of a shared one), asks the GPU it uses, and takes the one server place at a time
    vllm = cfg.replace("backend: embedded", "backend: vllm").replace(
        "{name: small, llm: {model: smollm2-135m}}", "{name: small}").replace("qwen2.5-coder-0.5b", "/ckpt/rl")
    assert "backend: vllm" in vllm
    (tmp_path / "vllm.yaml").write_text(vllm)
    out = snakemake("kvcache_all", "-n", "-p", "--cores", "2", "--configfile", "vllm.yaml", cwd=tmp_path).stdout
    runs = [block for block in out.split("\n\n") if "rule kvcache_run:" in block]
    assert len(runs) == 4 and all("llm=0" in b and "gpu=1" in b and "kv_vllm_server=1" in b for b in runs), runs


def test_blend_rule_joins_the_study_when_a_model_is_named(tmp_path):
    copy_workflow(tmp_path)
    cfg = (ROOT / "tests/data/kvcache_replay.yaml").read_text()
    (tmp_path / "off.yaml").write_text(cfg)
    (tmp_path / "on.yaml").write_text(cfg + "  blend: {model: qwen2.5-coder-0.5b, samples: 2}\n")
    off = snakemake("kvcache_all", "-n", "--cores", "2", "--configfile", "off.yaml", cwd=tmp_path).stdout
    on = snakemake("kvcache_all", "-n", "--cores", "2", "--configfile", "on.yaml", cwd=tmp_path).stdout
    assert "kvcache_blend" not in off
    assert "rule kvcache_blend:" in on and "results/figures/kvcache_blend.png" in on
