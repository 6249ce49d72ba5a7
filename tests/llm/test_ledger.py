"""The run's response cache and dollar cap (llm/ledger.py) through the real client and a fake server."""
import json
import multiprocessing
import re
from pathlib import Path

import pytest

from skillrepro.config import LLMConfig, Price
from skillrepro.llm.client import LLMClient
from skillrepro.llm.ledger import Ledger, SpendingCapReached
from skillrepro.store import LLMCall, connect, write_records
from repo import copy_workflow, snakemake

PRICE = Price(input=1.0, output=4.0, cached_input=0.5)  # dollars per million tokens
# OK_BODY's usage: 120 prompt tokens, 96 of them cached, 7 completion tokens
ONE_CALL = (24 * 1.0 + 96 * 0.5 + 7 * 4.0) / 1e6


def ledger(root: Path, cap=None, cache=True) -> Ledger:
    return Ledger(root / "results" / "llm", {"m": PRICE}, cap, cache)


def ask(url, led, text="hello", seed=0, max_tokens=16):
    c = LLMClient(LLMConfig(backend="openai", model="m", max_retries=0, timeout_s=5), url, ledger=led)
    return c.chat([{"role": "user", "content": text}], role="actor", session_id="s", seed=seed, max_tokens=max_tokens)


def test_a_repeated_request_is_read_from_the_cache_and_costs_nothing(fake_server, tmp_path):
    url, script = fake_server
    first = ask(url, ledger(tmp_path))
    again = ask(url, ledger(tmp_path))  # another job of the run: a new ledger object on the same files
    assert len(script.requests) == 1 and again.text == first.text
    assert (first.record.from_cache, again.record.from_cache) == (False, True)
    assert again.record.prompt_tokens == 120 and again.record.cached_tokens == 96  # the reply's own counts
    ask(url, ledger(tmp_path), seed=1)  # another seed, another request
    ask(url, ledger(tmp_path), text="other")
    ask(url, ledger(tmp_path, cache=False))  # the cache off: asked again
    assert len(script.requests) == 4
    # the records' cost (the analyses' SQL) counts the cached reply as free
    write_records(tmp_path / "results/runs/x/llm_calls.parquet", [first.record, again.record], LLMCall)
    con = connect(tmp_path / "results")
    assert con.execute("SELECT count(*) FILTER (WHERE from_cache) FROM llm_calls").fetchone() == (1,)


def test_the_cap_stops_a_request_whose_worst_case_would_cross_it(fake_server, tmp_path):
    url, script = fake_server
    ask(url, ledger(tmp_path, 1.0), text="hello 0")
    # the worst case it reserved: its JSON body's bytes as tokens at the input price, its cap at the output price
    (worst,) = [e["dollars"] for e in map(json.loads, (tmp_path / "results/llm/spend.jsonl").read_text().splitlines())
                if "reserve" in e]
    assert worst > (len("hello 0") + 16 * 4.0) / 1e6
    cap = 2 * ONE_CALL + worst + 1e-9  # room for two settled calls and one more of the same size
    led = ledger(tmp_path, cap)
    for i in (1, 2):
        ask(url, led, text=f"hello {i}")
    assert len(script.requests) == 3 and led.spent() == pytest.approx(3 * ONE_CALL)
    with pytest.raises(SpendingCapReached, match=r"config key llm.max_dollars: the run has spent or reserved \$0\.0003"):
        ask(url, ledger(tmp_path, cap), text="hello 3")
    assert len(script.requests) == 3  # refused before it was sent
    ask(url, ledger(tmp_path, cap), text="hello 1")  # a request the cache holds costs nothing: it goes on
    ask(url, ledger(tmp_path, 2 * cap), text="hello 3")  # a raised cap resumes
    assert len(script.requests) == 4
    # no price for the model: nothing to cap
    Ledger(tmp_path / "other", {}, 1e-12).reserve("m", "actor", 10**6, 10**6)


def _spend(root: str, n: int) -> int:
    led = Ledger(Path(root) / "results" / "llm", {"m": Price(1.0, 1.0)}, max_dollars=0.95, cache=False)
    done = 0
    for _ in range(n):
        try:
            rid = led.reserve("m", "actor", 100_000, 0)  # $0.10 each, worst case
        except SpendingCapReached:
            break
        led.settle(rid, 0.1)
        done += 1
    return done


def test_jobs_at_once_never_cross_the_cap_together(tmp_path):
    with multiprocessing.get_context("fork").Pool(4) as pool:
        done = pool.starmap(_spend, [(str(tmp_path), 5)] * 4)
    assert sum(done) == 9  # $0.90 settled: a tenth $0.10 request would cross $0.95, whichever job asked
    assert Ledger(tmp_path / "results" / "llm", {}, None).spent() == pytest.approx(0.9)


def test_a_new_ledger_starts_from_what_the_records_cost(tmp_path):
    paid = LLMCall("c1", "s", "actor", "m", "openai", 1_000_000, 0, 0, 0, 0.1, 0, "stop", "", "", "", 0.0)
    repeat = LLMCall("c2", "s", "actor", "m", "openai", 1_000_000, 0, 0, 0, 0.1, 0, "stop", "", "", "", 0.0,
                     from_cache=True)
    write_records(tmp_path / "results/runs/a/seed0/train/batch0/llm_calls.parquet", [paid, repeat], LLMCall)
    assert ledger(tmp_path).spent() == pytest.approx(1.0)  # the cached repeat was not paid twice


class _Actor:
    """An OpenAI-compatible server that plays every actor turn with one BabyAI action, and counts requests."""

    def __init__(self):
        from scripted import ChatServer, completion

        self.requests = 0

        def answer(path, raw):
            self.requests += 1
            return 200, completion(json.loads(raw)["model"], "Thought: go.\nAction: go_forward()")

        self.server = ChatServer(answer)


def _tiny(tmp: Path, url: str, methods=("react",), **llm) -> Path:
    import yaml

    if not (tmp / "Snakefile").exists():
        copy_workflow(tmp)
    cfg = {"llm": {"backend": "openai", "model": "m", "base_url": url, "api_key_env": "LEDGER_TEST_KEY",
                   "tool_calling": "text", "max_tokens": 32, **llm},
           "benchmarks": {"babyai": {"env": "babyai", "llm_call_budget": 2}},
           "methods": {m: {"method": m} for m in methods},
           "protocol": {"seeds": [0], "train_rollouts": 2, "sleep_every": 1, "eval_every": 2, "n_test": 2},
           "budgets": {"rollout_wall_s": 120, "inducer_requests": 2}, "pricing": {"m": {"input": 1.0, "output": 4.0}}}
    path = tmp / f"run{len(list(tmp.glob('run*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.workflow
def test_a_forced_rerun_pays_nothing_and_a_capped_run_stops_and_resumes(tmp_path):
    """Through the real rules on a priced fake server: a forced rerun of a finished run sends no request (every
    reply from the cache, the cost table unchanged; with the cache off it pays again); a run whose cap is below
    its cost stops with the key named and no table, and raised, it finishes with the same results, every
    request paid once over both runs."""
    import os

    import pandas as pd

    env = {**os.environ, "LEDGER_TEST_KEY": "k"}
    actor = _Actor()
    try:
        full = tmp_path / "full"
        full.mkdir()
        conf = _tiny(full, actor.server.url, max_dollars=1000.0)  # a cap far above: the ledger lists each request
        snakemake("results/tables/main.csv", "--cores", "2", "--configfile", conf.name, cwd=full, env=env)
        n, table = actor.requests, pd.read_csv(full / "results/tables/main.csv")
        assert n >= 8 and (table["cost_per_episode"] > 0).all()
        ledger = [json.loads(x) for x in (full / "results/llm/spend.jsonl").read_text().splitlines()]
        worst = min(e["dollars"] for e in ledger if "reserve" in e)  # the smallest request's worst case
        each = 100 * 1.0 / 1e6 + 10 * 4.0 / 1e6  # the fake server's usage: 100 prompt, 10 completion tokens
        assert sum(e["dollars"] for e in ledger if "settle" in e) == pytest.approx(n * each)
        snakemake("results/tables/main.csv", "--cores", "2", "--forceall", "--configfile", conf.name, cwd=full, env=env)
        assert actor.requests == n  # all from the cache
        pd.testing.assert_frame_equal(pd.read_csv(full / "results/tables/main.csv"), table)
        off = conf.with_name("off.yaml")
        off.write_text(conf.read_text().replace("max_tokens: 32", "max_tokens: 32\n  response_cache: false"))
        snakemake("results/tables/main.csv", "--cores", "2", "--forceall", "--configfile", off.name, cwd=full, env=env)
        assert actor.requests == 2 * n  # the cache off: paid again

        capped = tmp_path / "capped"
        capped.mkdir()
        cap = worst + (n // 2) * each  # the run stops about half-way, and not before its first request
        conf = _tiny(capped, actor.server.url, max_dollars=cap)
        before = actor.requests
        stopped = snakemake("results/tables/main.csv", "--cores", "1", "--configfile", conf.name, cwd=capped, env=env,
                            check=False)
        assert stopped.returncode != 0
        logs = "".join(p.read_text() for p in (capped / "logs").rglob("*.log"))
        assert "config key llm.max_dollars: the run has spent or reserved" in logs
        assert not (capped / "results/tables/main.csv").exists()
        paid = actor.requests - before
        assert 0 < paid < n
        spent = sum(e["dollars"] for e in map(json.loads, (capped / "results/llm/spend.jsonl").read_text().splitlines())
                    if "settle" in e)
        assert spent <= cap
        # what the jobs that finished before the cap stopped the run wrote (the task lists at least)
        done = {p: p.stat().st_mtime for p in (capped / "results").rglob("*.*")
                if p.is_file() and ".partial" not in str(p) and "results/llm" not in str(p) and p.suffix != ".log"}
        assert any(p.suffix == ".json" for p in done)
        raised = _tiny(capped, actor.server.url, max_dollars=1.0)
        snakemake("results/tables/main.csv", "--cores", "1", "--configfile", raised.name, cwd=capped, env=env)
        assert actor.requests - before == n  # every request paid once over both runs
        assert all(p.stat().st_mtime == t for p, t in done.items())  # finished jobs kept
        pd.testing.assert_frame_equal(pd.read_csv(capped / "results/tables/main.csv"), table)
    finally:
        actor.server.close()


@pytest.mark.workflow
def test_the_projection_of_a_finished_run_is_within_30_percent_of_its_records(tmp_path):
    """`skillrepro cost calibrate` on a finished run's records (ReAct and SpeedRunner, sleep phases included, on a
    priced fake server), then `skillrepro cost estimate` of the same config: the DAG's units counted from the
    config give the records' calls, tokens and dollars within 30 %; the dry run prints the projection's line."""
    import os
    import subprocess
    import sys

    import pandas as pd

    env = {**os.environ, "LEDGER_TEST_KEY": "k"}
    actor = _Actor()
    try:
        conf = _tiny(tmp_path, actor.server.url, methods=("react", "speedrunner"))
        snakemake("results/tables/main.csv", "--cores", "2", "--configfile", conf.name, cwd=tmp_path, env=env)
    finally:
        actor.server.close()
    cli = [sys.executable, "-m", "skillrepro.cli", "cost"]
    subprocess.run([*cli, "calibrate", "results", "--configfile", conf.name, "--out", "calibration.csv"],
                   cwd=tmp_path, env=env, check=True)
    subprocess.run([*cli, "estimate", "--configfile", conf.name, "--calibration", "calibration.csv", "--out", "p.csv"],
                   cwd=tmp_path, env=env, check=True, capture_output=True)
    projected = pd.read_csv(tmp_path / "p.csv")
    assert set(projected["role"]) == {"actor", "inducer"} and projected["calls"].notna().all()
    records = connect(tmp_path / "results").execute(
        "SELECT count(*), sum(prompt_tokens), sum(completion_tokens), "
        "sum((prompt_tokens - coalesce(cached_tokens, 0)) * 1.0 + completion_tokens * 4.0) / 1e6 "
        "FROM llm_calls WHERE filename NOT LIKE '%/.%'").fetchone()
    for got, want in zip(projected[["calls", "prompt", "output", "dollars"]].sum(), records):
        assert got == pytest.approx(want, rel=0.3), (got, want)
    assert (projected["dollars_lo"] <= projected["dollars"]).all() and (projected["dollars"] <= projected["dollars_hi"]).all()
    dry = snakemake("results/tables/main.csv", "-n", "--forceall", "--cores", "2", "--configfile", conf.name,
                    cwd=tmp_path, env=env)
    assert re.search(r"cost projection: \$[\d.,]+ \(\$[\d.,]+-\$[\d.,]+\) for [\d,]+ LLM calls", dry.stdout + dry.stderr)
