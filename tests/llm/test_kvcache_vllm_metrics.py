"""vLLM's own cache counters from its /metrics page, and how a run records them beside the simulator's."""
from __future__ import annotations

import http.server
import threading

import pytest

from skillrepro.llm import vllm_metrics
from skillrepro.studies.kvcache import study
from skillrepro.studies.kvcache.settings import KVConfig

# The shape of vLLM 0.11.0's Prometheus page (two engines, so every counter has two series)
PAGE = """\
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 3.0
vllm:num_preemptions_total{engine="1",model_name="Qwen/Qwen2.5-7B-Instruct"} 2.0
vllm:num_preemptions_created{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 1.7640e+09
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 120000.0
vllm:prefix_cache_queries_total{engine="1",model_name="Qwen/Qwen2.5-7B-Instruct"} 30000.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 90000.0
vllm:prefix_cache_hits_total{engine="1",model_name="Qwen/Qwen2.5-7B-Instruct"} 6000.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 0.25
"""


def test_parse_sums_series_and_skips_created_stamps():
    c = vllm_metrics.parse(PAGE)
    assert c == vllm_metrics.Counters(prefix_cache_queries=150000.0, prefix_cache_hits=96000.0, preemptions=5.0)


def test_parse_names_a_missing_counter():
    with pytest.raises(ValueError, match="no vllm:num_preemptions counter"):
        vllm_metrics.parse("\n".join(line for line in PAGE.splitlines() if "preemption" not in line))


def test_scrape_reads_the_metrics_endpoint_and_runs_take_differences():
    pages = [PAGE, PAGE.replace("120000.0", "125000.0").replace("} 3.0", "} 4.0")]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = (pages.pop(0) if self.path == "/metrics" else "").encode()
            self.send_response(200 if body else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1"
        before, after = vllm_metrics.scrape(url), vllm_metrics.scrape(url)
    finally:
        server.shutdown()
    assert after.minus(before) == vllm_metrics.Counters(5000.0, 0.0, 1.0)


def test_counter_row_puts_the_server_beside_the_simulator():
    kv = KVConfig.from_config({"kvcache": dict(
        benchmark="alfworld", formats=["skillrl"], n_games=2, split="test", task_seed=1, seeds=[0], call_budget=3,
        max_tokens=None, parallel_episodes=1, bank=None, templates_dir=None, prefix_step=2,
        prefix_tokenizer="qwen2.5", block_size=16, capacity_tokens=[1000, 5000], policies=["retain", "flush"],
        concurrency=[2], max_num_seqs=8, max_batched_tokens=100, server_slots=1)})
    rows = [study.SimRow(p, c, 2, 6, 100, 40, 0.4, 60, pre, 130, 48) for p in ("retain", "flush")
            for c, pre in ((1000, 3), (5000, 0))]
    row = study.counter_row({"backend": "vllm", "delta": {"prefix_cache_queries": 140.0, "prefix_cache_hits": 50.0,
                                                          "preemptions": 1.0}}, rows, kv)
    assert (row.server_prefix_cache_queries, row.server_preemptions) == (140.0, 1.0)
    assert (row.sim_policy, row.sim_capacity_tokens, row.sim_preemptions, row.sim_prefix_cache_hits) == ("retain", 5000, 0, 48)
    empty = study.counter_row({"backend": "embedded", "delta": None}, rows, kv)
    assert empty.server_prefix_cache_hits is None and empty.sim_prefix_cache_queries == 130
