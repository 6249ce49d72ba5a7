"""One (format, seed) run: the ALFWorld actor in that prompt format, every request's token ids recorded;
with `kvcache.replay`, the recorded trajectories replayed in that format without an LLM."""
import json
import os
from pathlib import Path

from skillrepro.studies.kvcache.actor import record_run
from skillrepro.studies.kvcache.replay import replay_run
from skillrepro.llm.servers import URL_ENV
from skillrepro.pipeline import seeded, setup_logging

log = setup_logging(snakemake)
w, p = snakemake.wildcards, snakemake.params
tasks = json.loads(Path(snakemake.input.tasks).read_text())
out_dir = str(Path(snakemake.output.requests).parent)
if p.own_server:  # another model than the shared server's: record_run starts this job's own server
    os.environ.pop(URL_ENV, None)
if p.kv.replay:
    stream = replay_run(fmt=w.kvfmt, seed=int(w.kvseed), bench_name=p.bench.name, split=tasks["split"],
                        trajectories=snakemake.input.trajectories, out_dir=out_dir, tokenizer=p.kv.prefix_tokenizer,
                        bank_path=p.kv.bank, templates_dir=p.kv.templates_dir)
else:
    log.info("live run: %s", f"lockstep, groups of {p.kv.parallel_episodes}" if p.kv.lockstep and
             p.kv.parallel_episodes > 1 else f"free-running, {p.kv.parallel_episodes} episode(s) in flight")
    stream = record_run(fmt=w.kvfmt, seed=int(w.kvseed), bench=p.bench, llm=seeded(p.llm, w.kvseed),
                        task_ids=tasks["tasks"], call_budget=p.kv.call_budget, out_dir=out_dir, split=tasks["split"],
                        bank_path=p.kv.bank, templates_dir=p.kv.templates_dir, max_tokens=p.kv.max_tokens,
                        parallel=p.kv.parallel_episodes, lockstep=p.kv.lockstep, wall_s=p.wall_s,
                        log=log.info).stream
prompt = sum(len(r.token_ids) for r in stream)
if p.kv.replay:  # no server: nothing measured
    log.info("%s seed %s: %d requests, %d prompt tokens (replay: no server count)", w.kvfmt, w.kvseed, len(stream),
             prompt)
else:  # record_run failed at the first reply without a count: every request has one
    cached = sum(r.server_cached_tokens for r in stream)
    log.info("%s seed %s: %d requests, %d prompt tokens, server cached %d (%.3f)", w.kvfmt, w.kvseed, len(stream),
             prompt, cached, cached / max(prompt, 1))
