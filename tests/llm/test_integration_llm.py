"""The real embedded llama.cpp server (SmolLM2-135M) playing two short BabyAI episodes."""
import dataclasses
import json
import urllib.request

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
    from skillrepro.llm.client import LLMClient

    client = LLMClient(llm_cfg, llm_url)
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}]
    reply = client.chat(messages, role="actor", session_id="t")
    assert not reply.record.usage_missing
    prompt, completion = client._count_tokens(messages, reply.text)
    assert prompt == reply.record.prompt_tokens
    assert abs(completion - reply.record.completion_tokens) <= 1  # an end-of-turn token is not in the text


def test_the_shipped_smollm2_is_served_as_its_q8_0_reencoding(llm_url):
    """`resolve` gives the pinned Q4_1 file re-encoded once as Q8_0, which llama.cpp's AVX2 build prefills about
    1.5x faster (perf/model_formats.py): the same metadata and tensors, each Q4_1 matrix now Q8_0 holding its
    weights within 0.6 of a Q8_0 step, everything else byte for byte. The suite's server (llm_url) serves it."""
    import gguf
    import numpy as np

    from skillrepro.llm.models import MODELS, cache_dir, resolve

    served, shipped = resolve("smollm2-135m"), cache_dir() / MODELS["smollm2-135m"].filename
    assert served == shipped.with_name("SmolLM2-135M-Instruct.Q4_1.Q8_0.gguf")
    with urllib.request.urlopen(f"{llm_url}/models", timeout=30) as r:  # llama.cpp names a model by its file
        assert [m["id"] for m in json.load(r)["data"]] == [str(served)]
    a, b = gguf.GGUFReader(str(shipped)), gguf.GGUFReader(str(served))
    for key in ("general.architecture", "tokenizer.chat_template", "llama.block_count", "llama.context_length"):
        assert a.fields[key].contents() == b.fields[key].contents(), key
    assert b.fields["general.file_type"].contents() == gguf.LlamaFileType.MOSTLY_Q8_0
    assert [(t.name, list(t.shape)) for t in a.tensors] == [(t.name, list(t.shape)) for t in b.tensors]
    q41, q80 = gguf.GGMLQuantizationType.Q4_1, gguf.GGMLQuantizationType.Q8_0
    assert {t.tensor_type for t in a.tensors if t.tensor_type == q41} and not {t.tensor_type for t in b.tensors} & {q41}
    checked = 0
    for x, y in zip(a.tensors, b.tensors):
        if x.tensor_type != q41:
            assert y.tensor_type == x.tensor_type and np.array_equal(x.data, y.data), x.name
        elif checked < 3:  # three matrices in full: dequantizing all 210 takes seconds
            assert y.tensor_type == q80
            w = gguf.quants.dequantize(x.data, q41).reshape(-1, 32)
            moved = np.abs(gguf.quants.dequantize(y.data, q80).reshape(-1, 32) - w)
            assert (moved <= 0.6 * np.abs(w).max(axis=1, keepdims=True) / 127 + 1e-12).all(), x.name
            checked += 1
    assert checked == 3


def test_a_reencoding_that_moves_a_weight_too_far_is_refused(tmp_path, monkeypatch):
    """`reencode` on a small GGUF of one Q4_1 matrix and one F32 vector: the matrix comes out Q8_0, the vector as
    it was; a quantizer that moved weights by a whole step (a changed gguf-py) stops the write, naming the tensor."""
    import gguf
    import numpy as np

    from skillrepro.llm.models import ModelError, reencode

    rng = np.random.default_rng(0)
    src = tmp_path / "small.gguf"
    w = gguf.GGUFWriter(str(src), "llama")
    w.add_tensor("blk.0.ffn_up.weight", gguf.quants.quantize(rng.normal(size=(4, 64)).astype(np.float32),
                                                              gguf.GGMLQuantizationType.Q4_1),
                 raw_shape=(4, 40), raw_dtype=gguf.GGMLQuantizationType.Q4_1)
    w.add_tensor("blk.0.attn_norm.weight", rng.normal(size=64).astype(np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    reencode(src, tmp_path / "q8.gguf", "Q8_0")
    a, b = gguf.GGUFReader(str(src)), gguf.GGUFReader(str(tmp_path / "q8.gguf"))
    assert [t.tensor_type.name for t in b.tensors] == ["Q8_0", "F32"]
    assert np.array_equal(a.tensors[1].data, b.tensors[1].data)
    step = np.abs(gguf.quants.dequantize(a.tensors[0].data, a.tensors[0].tensor_type)).max() / 127
    assert np.abs(gguf.quants.dequantize(b.tensors[0].data, b.tensors[0].tensor_type)
                  - gguf.quants.dequantize(a.tensors[0].data, a.tensors[0].tensor_type)).max() <= 0.6 * step

    quantize = gguf.quants.quantize
    monkeypatch.setattr(gguf.quants, "quantize", lambda x, qtype: quantize(x + np.float32(0.2), qtype))
    with pytest.raises(ModelError, match="re-encoding tensor blk.0.ffn_up.weight as Q8_0 moved a weight by"):
        reencode(src, tmp_path / "bad.gguf", "Q8_0")
