"""The KV-cache study's DAG on a tiny config with the real embedded model (SmolLM2), in a temp copy."""
import pandas as pd
import pytest

from test_workflow import ROOT, copy_workflow, snakemake


@pytest.mark.workflow
def test_kvcache_study_end_to_end(tmp_path):
    copy_workflow(tmp_path)
    snakemake("kvcache_all", "--cores", "2", "--configfile", str(ROOT / "tests/data/kvcache_tiny.yaml"), cwd=tmp_path)
    t = tmp_path / "results/tables"

    reuse = pd.read_csv(t / "kvcache_reuse.csv")
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

    prefix = pd.read_csv(t / "kvcache_prefix.csv").set_index(["format", "relation"])
    assert 30 < prefix.shared_tokens_mean.min() < prefix.loc["evoskill"].shared_tokens_mean.min()

    server = pd.read_csv(t / "kvcache_server.csv")
    assert (server.backend == "embedded").all() and (server.requests == 6).all()
    assert (server.server_cached_tokens > 0).all() and (server.sim_llamacpp_cached_tokens > 0).all()

    load = pd.read_csv(t / "kvcache_load.csv")
    assert list(load[load.format == "skillrl"].step) == [0, 1, 2] and (load.running == 2).all()
    success = pd.read_csv(t / "kvcache_success.csv")
    assert set(success.format) == {"skillrl", "evoskill"} and (success.episodes == 2).all()
    for name in ("reuse", "prefix", "load", "reuse_steps", "recomputed", "preemptions", "success", "server"):
        assert (tmp_path / f"results/figures/kvcache_{name}.png").stat().st_size > 5000
    log = (tmp_path / "logs/kvcache/run_skillrl_seed0.log").read_text()
    assert "prompt tokens, server cached" in log
