"""The real embedded llama.cpp server (SmolLM2-135M) playing two short BabyAI episodes."""
import dataclasses

import pytest

from skillrepro.agent import EpisodeSpec
from skillrepro.config import BenchmarkConfig
from skillrepro.skills import Library
from skillrepro.store import TABLES, connect
from skillrepro.benchmarks import load_benchmark

pytestmark = pytest.mark.integration


def test_two_episodes_on_the_real_server_record_every_field(llm_url, llm_cfg, tmp_path):
    from skillrepro.runner import run_batch

    Library(version=0).write(tmp_path / "library" / "v0")
    bench = BenchmarkConfig("babyai", "babyai", llm_call_budget=3)
    tasks = load_benchmark(bench).sample_tasks("test", 2, 42)
    spec = EpisodeSpec("babyai/react/seed0", "babyai", "react", "react", 0, "test", 0, 0)
    out = run_batch(bench=bench, llm=llm_cfg, library_dir=tmp_path / "library" / "v0", task_ids=tasks,
                    spec=spec, out_dir=tmp_path / "eval")
    assert [e.task_id for e in out.episodes] == tasks

    con = connect(tmp_path)
    for name, cls in TABLES.items():
        cols = {r[0] for r in con.execute(f"DESCRIBE {name}").fetchall()}
        assert {f.name for f in dataclasses.fields(cls)} <= cols, name
    eps = con.execute("SELECT * FROM episodes ORDER BY task_id").df()
    calls = con.execute("SELECT * FROM llm_calls ORDER BY started_at").df()
    steps = con.execute("SELECT * FROM steps").df()
    assert len(eps) == 2 and (eps.n_llm_calls == 3).all() and len(calls) == 6 and len(steps) == 6
    assert set(calls.session_id) == set(eps.episode_id)
    assert (calls.prompt_tokens > 100).all() and (calls.completion_tokens > 0).all()
    assert (calls.completion_tokens <= llm_cfg.max_tokens).all()
    assert set(calls.finish_reason) <= {"stop", "length", "tool_calls"}
    assert (calls.latency_s > 0).all() and (calls.retries == 0).all()
    assert (calls.role == "actor").all() and (calls.backend == "embedded").all() and calls.model.str.len().min() > 0
    assert calls.prompt_sha256.str.fullmatch("[0-9a-f]{64}").all()
    assert (calls.reasoning_tokens >= 0).all()
    # llama.cpp reuses the slot's prefix: later calls of an episode find the earlier prompt cached.
    later = calls.groupby("session_id").nth(slice(1, None))
    assert (later.cached_tokens > 0).all() and (later.cached_tokens < later.prompt_tokens).all()
    for _, e in eps.iterrows():
        c = calls[calls.session_id == e.episode_id]
        assert e.prompt_tokens == c.prompt_tokens.sum() and e.completion_tokens == c.completion_tokens.sum()
        assert e.cached_tokens == c.cached_tokens.sum()
    assert set(eps.termination) <= {"budget", "success", "env_done"}
    assert (eps.wall_s > 0).all() and eps.split.eq("test").all() and eps.library_version.eq(0).all()
    assert steps.observation.str.len().min() > 0


def test_token_count_without_usage_matches_the_servers_usage(llm_url, llm_cfg):
    """The fallback for a reply without `usage` (llama.cpp's /apply-template and /tokenize) counts what the
    server itself reports when it does send usage."""
    from skillrepro.llm import LLMClient

    client = LLMClient(llm_cfg, llm_url)
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}]
    reply = client.chat(messages, role="actor", session_id="t")
    assert not reply.record.usage_missing
    prompt, completion = client._count_tokens(messages, reply.text)
    assert prompt == reply.record.prompt_tokens
    assert abs(completion - reply.record.completion_tokens) <= 1  # an end-of-turn token is not in the text
