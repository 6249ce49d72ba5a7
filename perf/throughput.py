"""LLM throughput of the pipeline on the CPU, each figure printed beside its baseline.

    python perf/throughput.py per-call [--model qwen2.5-coder-0.5b] [--episodes 2] [--budget 5] [--streams 1]
        The pipeline's actor calls (client latency, and episode wall time per call) against the very same
        requests sent straight to the same server over raw HTTP, from as many streams. Target: <= 1.2x.
    python perf/throughput.py episodes [--model ...] [--episodes 4] [--budget 5] [--in-flight 1 2 4]
                                       [--backend embedded|vllm]
        Episodes per minute and output tokens per second of one rollout batch with 1, 2, 4 episodes in flight
        (llm.episodes_in_flight), the server with as many slots as the largest setting. Each setting plays its
        own tasks, so no setting finds its prompts already in the server's prefix cache from an earlier one. On
        vLLM, how many requests the engine had running (its vllm:num_requests_running, sampled every 0.5 s).
        Target on vLLM: 8 in flight >= 4x the output tokens per second of 1.

Both start the server the pipeline starts: the embedded llama.cpp with `--threads` (default 2), or vLLM from
its environment (`skillrepro vllm install`). On a shared machine the figures move with the load: compare the
columns of one run, not runs.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from skillrepro.agent import EpisodeSpec
from skillrepro.config import BenchmarkConfig, LLMConfig
from skillrepro.llm import servers
from skillrepro.llm.client import LLMClient
from skillrepro.runner import run_batch
from skillrepro.skills import Library
from skillrepro.store import Episode, LLMCall, read_records
from skillrepro.benchmarks import load_benchmark


class Recording(LLMClient):
    """The pipeline's client, keeping each request exactly as it is sent (model, messages, seed, stop...)."""

    def __post_init__(self):
        super().__post_init__()
        self.sent: list[dict] = []
        self._lock = threading.Lock()

    def _with_retries(self, request):
        with self._lock:
            self.sent.append(dict(request))
        return super()._with_retries(request)


def _cached(calls) -> str:
    """Mean cached tokens per call, or "unknown" where the server reported none (None is not 0)."""
    known = [c.cached_tokens for c in calls if c.cached_tokens is not None]
    return f"{statistics.mean(known):.1f}" if known and len(known) == len(calls) else "unknown"


def server_cpu_s(server) -> float:
    """CPU seconds the server's processes have used (vLLM's engine runs in child processes): on a shared
    machine, a cost that does not move with the load as wall time does (one thread: llama.cpp's threads spin
    while they wait for each other)."""
    total, todo = 0.0, [server.process.pid]
    while todo:
        pid = todo.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        todo += [int(k) for k in kids]
    return total


class RunningSampler:
    """vLLM's own gauge of requests running, read every `every_s` while the block runs (mean and peak)."""

    def __init__(self, url: str, every_s: float = 0.5):
        self.url, self.every_s, self.values = url.removesuffix("/v1") + "/metrics", every_s, []
        self._stop = threading.Event()

    def _read(self) -> float:
        with urllib.request.urlopen(self.url, timeout=5) as r:
            text = r.read().decode()
        return sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith("vllm:num_requests_running"))

    def _loop(self):
        while not self._stop.wait(self.every_s):
            try:
                self.values.append(self._read())
            except OSError:
                pass

    def __enter__(self):
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def play(cfg: LLMConfig, url: str, tasks: list[str], budget: int, out: Path, client: LLMClient | None = None):
    """One rollout batch through the pipeline's runner; returns (wall seconds, episodes, llm calls)."""
    lib = out / "v0"
    if not lib.exists():
        Library(version=0).write(lib)
    bench = BenchmarkConfig("babyai", "babyai", llm_call_budget=budget)
    spec = EpisodeSpec("bench/throughput/seed0", "babyai", "react", "react", 0, "train", 0, 0)
    t0 = time.perf_counter()
    run_batch(bench=bench, llm=cfg, library_dir=lib, task_ids=tasks, spec=spec, out_dir=out / "batch",
              client=client or LLMClient(cfg, url))
    wall = time.perf_counter() - t0
    return wall, read_records(out / "batch" / "episodes.parquet", Episode), read_records(out / "batch" / "llm_calls.parquet", LLMCall)


def straight(url: str, requests: list[dict], streams: int) -> list[tuple[float, int]]:
    """POST each request as is to /chat/completions; (seconds, completion tokens) per request."""

    def send(req: dict) -> tuple[float, int]:
        body = json.dumps(req).encode()
        t0 = time.perf_counter()
        r = urllib.request.Request(url + "/chat/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(r, timeout=600) as resp:
            usage = json.loads(resp.read())["usage"]
        return time.perf_counter() - t0, usage["completion_tokens"]

    if streams <= 1:
        return [send(r) for r in requests]
    with ThreadPoolExecutor(streams) as pool:
        return list(pool.map(send, requests))


def per_call(a, cfg: LLMConfig, server, tmp: Path) -> None:
    url = server.url
    tasks = load_benchmark(BenchmarkConfig("babyai", "babyai")).sample_tasks("train", a.episodes, 7)
    cfg = replace(cfg, episodes_in_flight=a.streams)
    client = Recording(cfg, url)
    cpu0 = server_cpu_s(server)
    wall, episodes, calls = play(cfg, url, tasks, a.budget, tmp / "pipeline", client)
    cpu1 = server_cpu_s(server)
    direct = straight(url, client.sent, a.streams)
    cpu2 = server_cpu_s(server)
    pipe_lat = statistics.mean(c.latency_s for c in calls)
    pipe_wall = sum(e.wall_s for e in episodes) / len(calls)
    raw = statistics.mean(t for t, _ in direct)
    print(f"model={cfg.model} episodes={len(episodes)} calls={len(calls)} streams={a.streams} threads={cfg.threads}")
    print(f"{'measure':<52}{'pipeline':>10}{'straight':>10}{'ratio':>8}")
    print(f"{'seconds per call (client latency vs raw HTTP)':<52}{pipe_lat:>10.3f}{raw:>10.3f}{pipe_lat / raw:>8.2f}")
    print(f"{'seconds per call (episode wall / calls vs raw HTTP)':<52}{pipe_wall:>10.3f}{raw:>10.3f}{pipe_wall / raw:>8.2f}")
    print(f"{'server CPU seconds per call':<52}{(cpu1 - cpu0) / len(calls):>10.3f}{(cpu2 - cpu1) / len(direct):>10.3f}"
          f"{(cpu1 - cpu0) / max(cpu2 - cpu1, 1e-9):>8.2f}")
    print(f"{'completion tokens per call':<52}{statistics.mean(c.completion_tokens for c in calls):>10.1f}"
          f"{statistics.mean(n for _, n in direct):>10.1f}")
    print(f"{'prompt tokens per call (cached)':<52}{statistics.mean(c.prompt_tokens for c in calls):>10.1f}"
          f"{'':>10}  ({_cached(calls)} cached)")
    print("target: ratio <= 1.2")


def episodes_per_minute(a, cfg: LLMConfig, server, tmp: Path) -> None:
    pool = load_benchmark(BenchmarkConfig("babyai", "babyai")).sample_tasks("train", a.episodes * len(a.in_flight), 11)
    rows = []
    for j, n in enumerate(a.in_flight):
        tasks = pool[j * a.episodes:(j + 1) * a.episodes]
        cpu0 = server_cpu_s(server)
        with RunningSampler(server.url) if cfg.backend == "vllm" else contextlib.nullcontext() as running:
            wall, episodes, calls = play(replace(cfg, episodes_in_flight=n), server.url, tasks, a.budget,
                                         tmp / f"inflight{n}")
        cpu = server_cpu_s(server) - cpu0
        tokens = sum(c.completion_tokens for c in calls)
        seen = running.values if running and running.values else [float("nan")]
        rows.append((n, len(episodes), len(calls), wall, 60 * len(episodes) / wall, tokens / wall,
                     statistics.mean(c.latency_s for c in calls), cpu / len(episodes), statistics.mean(seen), max(seen)))
    print(f"backend={cfg.backend} model={cfg.model} server slots={cfg.slots} threads={cfg.threads} call budget={a.budget}")
    print(f"{'in flight':>9}{'episodes':>9}{'calls':>7}{'wall s':>9}{'episodes/min':>14}{'gen tok/s':>11}{'s/call':>8}"
          f"{'tok/s x':>9}{'CPU s/episode':>15}{'running mean/max':>18}")
    for n, ne, nc, wall, epm, tps, lat, cpu, mean_run, max_run in rows:
        print(f"{n:>9}{ne:>9}{nc:>7}{wall:>9.1f}{epm:>14.2f}{tps:>11.1f}{lat:>8.2f}{tps / rows[0][5]:>9.2f}{cpu:>15.2f}"
              f"{mean_run:>12.2f}/{max_run:<5.0f}")
    if cfg.backend == "vllm":
        print("target: the largest setting's output tokens per second >= 4x one at a time's (tok/s x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["per-call", "episodes"])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--episodes", type=int, default=None)
    ap.add_argument("--budget", type=int, default=5, help="LLM calls per episode")
    ap.add_argument("--streams", type=int, default=1, help="per-call: episodes in flight, and straight streams")
    ap.add_argument("--in-flight", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--backend", choices=["embedded", "vllm"], default="embedded")
    a = ap.parse_args()
    a.episodes = a.episodes or (2 if a.what == "per-call" else 4)
    slots = a.streams if a.what == "per-call" else max(a.in_flight)
    cfg = LLMConfig(backend=a.backend, model=a.model, slots=max(slots, 1), ctx_per_slot=4096, threads=a.threads,
                    max_tokens=a.max_tokens)
    with tempfile.TemporaryDirectory() as tmp:
        server = servers.start(cfg, workdir=tmp)
        try:
            (per_call if a.what == "per-call" else episodes_per_minute)(a, cfg, server, Path(tmp))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
