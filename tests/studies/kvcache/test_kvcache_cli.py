"""`skillrepro kvcache simulate` end to end on small streams, and the Qwen2.5 tokenizer."""
from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from skillrepro.cli import main
from skillrepro.studies.kvcache.tokenizers import get_tokenizer


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_simulate_token_ids(tmp_path, capsys):
    p = list(range(50))
    f = write_jsonl(tmp_path / "r.jsonl", [{"episode": 0, "step": 0, "token_ids": p},
                                            {"episode": 0, "step": 1, "token_ids": p + [7] * 30}])
    rc = main(["kvcache", "simulate", "--requests", str(f), "--block-size", "16", "--capacity-tokens", "4096",
               "--policy", "retain", "--out", str(tmp_path / "out")])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary == {"engine": "vllm", "vllm_version": "0.11.0", "requests": 2, "prompt_tokens": 130,
                       "cached_tokens": 48, "reuse_ratio": round(48 / 130, 6), "recomputed_tokens": 82,
                       "preemptions": 0, "prefix_cache_queries": 130, "prefix_cache_hits": 48,
                       "preempted_queries": 0, "preempted_hits": 0}
    rc = main(["kvcache", "simulate", "--requests", str(f), "--capacity-tokens", "4096", "--vllm-version", "0.33.0",
               "--out", str(tmp_path / "out33")])
    assert rc == 0 and json.loads(capsys.readouterr().out)["vllm_version"] == "0.33.0"
    t = pq.read_table(tmp_path / "out" / "per_request.parquet").to_pylist()
    assert [(r["episode"], r["step"], r["prompt_tokens"], r["cached_tokens"]) for r in t] == [("0", 0, 50, 0),
                                                                                            ("0", 1, 80, 48)]
    assert not list((tmp_path / "out").glob(".*tmp"))  # atomic write left no temporary file


def test_simulate_text_with_qwen_tokenizer(tmp_path, capsys):
    prompt = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n" + "look around. " * 40
    f = write_jsonl(tmp_path / "r.jsonl", [{"episode": "a", "step": 0, "text": prompt},
                                            {"episode": "a", "step": 1, "text": prompt}])
    assert main(["kvcache", "simulate", "--requests", str(f), "--tokenizer", "qwen2.5", "--capacity-tokens", "4096",
                 "--policy", "flush", "--out", str(tmp_path)]) == 0
    s = json.loads(capsys.readouterr().out)
    n = len(get_tokenizer("qwen2.5").encode(prompt))
    assert s["prompt_tokens"] == 2 * n and s["cached_tokens"] == 0  # flushed before step 1


@pytest.mark.parametrize("row,msg", [
    ({"step": 0, "token_ids": [1]}, "missing key 'episode'"),
    ({"episode": 1, "step": "x", "token_ids": [1]}, "'step' must be a non-negative integer"),
    ({"episode": 1, "step": 0}, "needs 'token_ids' or 'text'"),
    ({"episode": 1, "step": 0, "text": "hi"}, "no tokenizer"),
])
def test_bad_lines_name_file_line_and_key(tmp_path, capsys, row, msg):
    f = write_jsonl(tmp_path / "r.jsonl", [{"episode": 0, "step": 0, "token_ids": [1, 2]}, row])
    rc = main(["kvcache", "simulate", "--requests", str(f), "--capacity-tokens", "64", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "r.jsonl:2" in err and msg in err


def test_qwen_tokenizer_encodes_chat_markers_as_specials():
    tok = get_tokenizer("qwen2.5")
    ids = tok.encode("<|im_start|>user\nHello world 123<|im_end|>\n")
    assert ids[0] == 151644 and 151645 in ids
    assert ids.count(16) + ids.count(17) + ids.count(18) == 3  # digits '1', '2', '3' are single tokens
    assert tok.decode(ids) == "<|im_start|>user\nHello world 123<|im_end|>\n"


def test_unknown_tokenizer_is_named():
    with pytest.raises(ValueError, match="unknown tokenizer 'gpt9'"):
        get_tokenizer("gpt9")


def run_bad(tmp_path, capsys, lines: bytes, *extra):
    f = tmp_path / "r.jsonl"
    f.write_bytes(lines)
    out = tmp_path / "out"
    rc = main(["kvcache", "simulate", "--requests", str(f), "--capacity-tokens", "4096", "--out", str(out), *extra])
    err = capsys.readouterr().err
    return rc, err, out


GOOD = b'{"episode": 0, "step": 0, "token_ids": [1, 2]}\n'


@pytest.mark.parametrize("row,msg", [
    ('{"episode": 1, "step": 0, "token_ids": [1, true]}', "'token_ids'[1] = True is not a token id"),
    ('{"episode": 1, "step": 0, "token_ids": [1, -3]}', "'token_ids'[1] = -3 is not a token id"),
    ('{"episode": 1, "step": 0, "token_ids": [9223372036854775808]}', "'token_ids'[0] = 9223372036854775808"),
    ('{"episode": 1, "step": 0, "token_ids": [1.5]}', "'token_ids'[0] = 1.5"),
    ('{"episode": 1, "step": 0, "token_ids": "1 2"}', "'token_ids' must be a list"),
    ('{"episode": 1, "step": 0, "token_ids": [1], "completion_tokens": null}', "'completion_tokens' must be a non-negative"),
    ('{"episode": 1, "step": 0, "token_ids": [1], "completion_tokens": -4}', "'completion_tokens' must be a non-negative"),
    ('{"episode": 1, "step": 0, "token_ids": [1], "response_token_ids": 5}', "'response_token_ids' must be a list"),
    ('{"episode": 1, "step": 0, "token_ids": [1], "response_token_ids": [false]}', "'response_token_ids'[0] = False"),
])
def test_bad_values_exit_2_with_one_line_naming_line_and_field(tmp_path, capsys, row, msg):
    rc, err, out = run_bad(tmp_path, capsys, GOOD + row.encode() + b"\n")
    assert rc == 2 and "r.jsonl:2" in err and msg in err
    assert err.count("\n") == 1 and not (out / "per_request.parquet").exists()


def test_token_ids_at_the_vocabulary_bound_are_rejected(tmp_path, capsys):
    rc, err, _ = run_bad(tmp_path, capsys, GOOD + b'{"episode": 1, "step": 0, "token_ids": [151665]}\n',
                         "--tokenizer", "qwen2.5")
    assert rc == 2 and "r.jsonl:2" in err and "[0, 151665)" in err
    rc, err, _ = run_bad(tmp_path, capsys, GOOD, "--vocab-size", "2")
    assert rc == 2 and "r.jsonl:1" in err and "'token_ids'[1] = 2" in err


def test_invalid_utf8_names_its_line(tmp_path, capsys):
    rc, err, _ = run_bad(tmp_path, capsys, GOOD + GOOD + b'{"episode": "\xff\xfe", "step": 0, "token_ids": [1]}\n')
    assert rc == 2 and "r.jsonl:3: not valid UTF-8" in err and err.count("\n") == 1


@pytest.mark.parametrize("opt,named", [("--max-num-seqs", None), ("--slots", None), ("--max-num-batched-tokens", None),
                                       ("--max-batched-tokens", "--max-num-batched-tokens"), ("--block-size", None)])
def test_zero_options_are_named(tmp_path, capsys, opt, named):
    rc, err, _ = run_bad(tmp_path, capsys, GOOD, opt, "0")  # the old spelling is an alias of vLLM's name
    assert rc == 2 and f"{named or opt} must be >= 1, got 0" in err and err.count("\n") == 1


def test_unwritable_out_is_named_before_the_simulation(tmp_path, capsys, monkeypatch):
    from skillrepro.studies.kvcache import sim

    ran = []
    monkeypatch.setattr(sim, "read_requests", lambda *a, **k: ran.append(1))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    f = tmp_path / "r.jsonl"
    f.write_bytes(GOOD)
    for out in (blocker, blocker / "sub"):
        rc = main(["kvcache", "simulate", "--requests", str(f), "--capacity-tokens", "4096", "--out", str(out)])
        err = capsys.readouterr().err
        assert rc == 2 and f"--out {out}: cannot be written" in err and err.count("\n") == 1
    assert not ran


def test_request_that_never_fits_exits_2(tmp_path, capsys):
    rc, err, _ = run_bad(tmp_path, capsys, b'{"episode": "e", "step": 4, "token_ids": [1, 2], "completion_tokens": 9000}\n')
    assert rc == 2 and "episode 'e' step 4: prompt + completion need 9001 tokens" in err


def test_simulate_runs_without_importing_pandas(tmp_path):
    """The command's start-up stays its own: nothing on its path (reading, simulating, writing Parquet) imports
    pandas, which cost it 0.18 s a run (perf/kvcache_cli.py)."""
    f = write_jsonl(tmp_path / "r.jsonl", [{"episode": "é", "step": s, "token_ids": list(range(20 + s))}
                                            for s in range(3)])
    code = ("import sys; from skillrepro.cli import main; "
            f"rc = main(['kvcache', 'simulate', '--requests', {str(f)!r}, '--capacity-tokens', '4096', "
            f"'--out', {str(tmp_path / 'out')!r}]); print('PANDAS', 'pandas' in sys.modules); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "PANDAS False" in proc.stdout
    rows = pq.read_table(tmp_path / "out" / "per_request.parquet").to_pylist()
    assert [(r["episode"], r["step"], r["prompt_tokens"]) for r in rows] == [("é", 0, 20), ("é", 1, 21), ("é", 2, 22)]
