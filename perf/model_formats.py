"""The embedded llama.cpp server's speed on a shipped model as shipped and as it is served (re-encoded).

    python perf/model_formats.py [--model smollm2-135m] [--threads 2] [--trials 3]

For each file, one server at a time (its own process, the suite's settings: 2 slots of 4096 tokens), `--trials`
chat requests of about 1,400 prompt tokens each, none of them in the prefix cache, 48 tokens generated; prints
llama.cpp's own prefill and generation rates. Baseline: the shipped file. On this project's 2-core machine:
SmolLM2-135M prefills at 230-280 tokens/s from its Q4_1 file and 340-450 from the Q8_0
re-encoding, generation 55-70 tokens/s for both. Compare the rows of one run: a shared machine moves the figures.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import urllib.request


def _measure(path: str, threads: int, trials: int, out) -> None:
    from skillrepro.llm.servers import serve_embedded

    server = serve_embedded(path, slots=2, ctx_per_slot=4096, threads=threads)
    words = " ".join(f"word{i} is near the red ball and" for i in range(150))
    rates = []
    for trial in range(trials):
        body = {"model": "x", "max_tokens": 48, "temperature": 0.7, "cache_prompt": False,
                "messages": [{"role": "system", "content": f"trial {trial} {words}"},
                             {"role": "user", "content": "Say hello."}]}
        req = urllib.request.Request(server.listening_address + "/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            t = json.load(r)["timings"]
        rates.append((t["prompt_n"], t["prompt_per_second"], t["predicted_per_second"]))
    out.put(rates)


def main() -> None:
    from skillrepro.llm.models import MODELS, cache_dir, resolve

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m", choices=[m for m, s in MODELS.items() if s.served_as])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--trials", type=int, default=3)
    a = ap.parse_args()
    served = resolve(a.model)
    files = {"shipped (baseline)": cache_dir() / MODELS[a.model].filename, f"served ({MODELS[a.model].served_as})": served}
    print(f"{a.model}, {a.threads} threads, {a.trials} requests each (prompt tokens, prefill and generation tokens/s)")
    first = None
    for label, path in files.items():
        q = mp.get_context("spawn").Queue()
        p = mp.get_context("spawn").Process(target=_measure, args=(str(path), a.threads, a.trials, q))
        p.start()
        rates = q.get()
        p.join()
        pp, tg = statistics.median(r[1] for r in rates), statistics.median(r[2] for r in rates)
        first = first or pp
        print(f"  {label:20s} {path.name}: prompt {rates[0][0]} tokens, prefill {pp:5.0f}/s "
              f"({pp / first:.2f}x the shipped file), generation {tg:4.0f}/s")


if __name__ == "__main__":
    main()
