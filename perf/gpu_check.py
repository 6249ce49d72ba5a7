"""GPU check: the first cycle of the paper preset on vLLM, with the server's load printed as it runs.

    python perf/gpu_check.py [--model PATH_OR_HF_ID] [--benchmarks babyai] [--seconds 420] [--cores 32]

Starts `vllm serve` exactly as the pipeline does for configs/paper-vllm.yaml (the model can be replaced: a GPU
node without internet needs a local folder), then runs, in a scratch copy of the workflow (.gpu_check/),
rollout batch 0 and the first sleep phase of every run of the chosen benchmarks. Every 5 s it prints the
requests running and waiting, generated tokens/s and the prefix-cache hit rate from vLLM's /metrics, and
at the end their summary beside what the pipeline asked for (llm.slots requests in flight, episodes in
flight per job), and the cached-token share the requests themselves reported. It stops the run after
--seconds, so it fits a short lease.

Needs `vllm` on PATH and the model's weights: a node without internet needs --model pointing at a local
folder (a shipped GGUF name maps to its Hugging Face id, which vLLM would try to download).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from skillrepro.check import check_config  # noqa: E402
from skillrepro.config import llm_config  # noqa: E402
from skillrepro.llm import servers  # noqa: E402

WATCH = {
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "generated": "vllm:generation_tokens",
    "prompt": "vllm:prompt_tokens",
    "queries": "vllm:prefix_cache_queries",
    "hits": "vllm:prefix_cache_hits",
    "kv_usage": "vllm:kv_cache_usage_perc",
    "preemptions": "vllm:num_preemptions",
}


def metrics(url: str) -> dict[str, float]:
    """The watched metrics, summed over label sets (counters with or without the _total suffix)."""
    text = urllib.request.urlopen(url.removesuffix("/v1") + "/metrics", timeout=10).read().decode()
    out = dict.fromkeys(WATCH, 0.0)
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:]+)(?:\{[^}]*\})?\s+([0-9.eE+-]+|NaN)$", line)
        if not m:
            continue
        name = m.group(1).removesuffix("_total")
        for key, metric in WATCH.items():
            if name == metric and m.group(2) != "NaN":
                out[key] += float(m.group(2))
    return out


def preset(model: str | None, benches: list[str], workdir: Path) -> tuple[Path, list[str]]:
    """configs/paper.yaml with configs/paper-vllm.yaml's model on top, limited to `benches`, and the first
    cycle's targets of every run."""
    cfg = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())
    cfg["llm"].update(yaml.safe_load((ROOT / "configs" / "paper-vllm.yaml").read_text())["llm"])
    if model:
        cfg["llm"]["model"] = model
    unknown = set(benches) - set(cfg["benchmarks"])
    if unknown:
        sys.exit(f"--benchmarks: {', '.join(sorted(unknown))} not in configs/paper.yaml ({', '.join(cfg['benchmarks'])})")
    cfg["benchmarks"] = {b: v for b, v in cfg["benchmarks"].items() if b in benches}
    for name, m in list(cfg["methods"].items()):
        if m.get("benchmarks") is not None:
            m["benchmarks"] = [b for b in m["benchmarks"] if b in benches]
            if not m["benchmarks"]:
                del cfg["methods"][name]
    path = workdir / "gpu_check.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    targets = [f"results/runs/{b}/{v}/seed{s}/{what}"
               for b in cfg["benchmarks"] for v, m in cfg["methods"].items()
               if m.get("benchmarks") is None or b in m["benchmarks"]
               for s in cfg["protocol"]["seeds"]
               for what in ("train/batch0/episodes.parquet", "library/v1/manifest.json")]
    return path, targets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="HF id or local folder; default: configs/paper-vllm.yaml's")
    ap.add_argument("--benchmarks", default="babyai", help="comma-separated benchmark names of the preset")
    ap.add_argument("--seconds", type=float, default=420, help="stop the run after this long")
    ap.add_argument("--cores", type=int, default=32)
    ap.add_argument("--workdir", default=str(ROOT / ".gpu_check"))
    a = ap.parse_args()

    workdir = Path(a.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    for part in ("Snakefile", "config.yaml", "rules", "workflow", "envs", "profiles"):
        src = ROOT / part
        (shutil.copytree if src.is_dir() else shutil.copy)(src, workdir / part)
    cfg_path, targets = preset(a.model, a.benchmarks.split(","), workdir)
    llm = llm_config(check_config(yaml.safe_load(cfg_path.read_text())))
    print(f"model {llm.model}; slots (vLLM --max-num-seqs, requests in flight) {llm.slots}; "
          f"episodes in flight per job {llm.episodes_in_flight}; {len(targets) // 2} runs", flush=True)

    t_server = time.monotonic()
    server = servers.start(llm, workdir=workdir, timeout_s=1200)
    print(f"vllm serve ready in {time.monotonic() - t_server:.0f} s at {server.url}", flush=True)
    env = {**os.environ, servers.URL_ENV: server.url, "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-m", "snakemake", *targets, "--cores", str(a.cores), "--configfile", str(cfg_path)]
    log = open(workdir / "snakemake.out", "w")
    run = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    samples = []
    t0 = time.monotonic()
    first = last = metrics(server.url)
    print(f"{'t s':>6}{'running':>9}{'waiting':>9}{'gen tok/s':>11}{'prefix hit':>12}{'KV used':>9}{'preempt':>9}", flush=True)
    try:
        while run.poll() is None and time.monotonic() - t0 < a.seconds:
            time.sleep(5)
            now = metrics(server.url)
            dt = 5.0
            gen = (now["generated"] - last["generated"]) / dt
            q = now["queries"] - last["queries"]
            hit = (now["hits"] - last["hits"]) / q if q else float("nan")
            samples.append((now["running"], now["waiting"], gen))
            print(f"{time.monotonic() - t0:>6.0f}{now['running']:>9.0f}{now['waiting']:>9.0f}{gen:>11.0f}{hit:>12.3f}"
                  f"{now['kv_usage']:>9.3f}{now['preemptions'] - first['preemptions']:>9.0f}", flush=True)
            last = now
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGTERM)
            run.wait(60)
        elapsed = time.monotonic() - t0
        end = metrics(server.url)
        server.stop()

    busy = [s for s in samples if s[0] > 0] or [(0, 0, 0)]
    q = end["queries"] - first["queries"]
    print("\nsummary (pipeline setting beside what the server saw)")
    print(f"{'requests in flight allowed (llm.slots)':<44}{llm.slots:>10}")
    print(f"{'requests running: mean / max while busy':<44}{sum(s[0] for s in busy) / len(busy):>10.1f}"
          f"{max(s[0] for s in busy):>8.0f}")
    print(f"{'requests waiting: mean while busy':<44}{sum(s[1] for s in busy) / len(busy):>10.1f}")
    print(f"{'generated tokens/s over the run':<44}{(end['generated'] - first['generated']) / elapsed:>10.0f}")
    print(f"{'prefix-cache hit rate (tokens)':<44}{(end['hits'] - first['hits']) / q if q else float('nan'):>10.3f}")
    try:
        import duckdb

        calls = sorted(str(p) for p in (workdir / "results" / "runs").rglob("llm_calls.parquet"))
        if calls:
            n, lat, cached, prompt, unknown = duckdb.sql(
                f"SELECT count(*), avg(latency_s), sum(cached_tokens), sum(prompt_tokens), "
                f"count(*) FILTER (WHERE cached_tokens IS NULL) FROM read_parquet({calls})"
            ).fetchall()[0]  # duckdb 2.0's relations have no fetchone()
            print(f"{'LLM calls recorded / mean latency s':<44}{n:>10}{lat:>8.2f}")
            if unknown:  # a server without --enable-prompt-tokens-details: unknown, not 0
                print(f"{'cached share the requests reported':<44}{'unknown':>10} ({unknown} of {n} calls without a count)")
            else:
                print(f"{'cached share the requests reported':<44}{(cached or 0) / max(prompt, 1):>10.3f}")
    except Exception as e:  # the summary above stands without the records
        print(f"(records not read: {e})")
    print(f"snakemake exit {run.returncode}; its log: {workdir / 'snakemake.out'}")


if __name__ == "__main__":
    main()
