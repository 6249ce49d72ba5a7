"""One (format, seed) run: the ALFWorld actor in that prompt format, every request's token ids recorded;
with `kvcache.replay`, the recorded trajectories replayed in that format without an LLM."""
import json
import os
from pathlib import Path

from skillrepro.studies.kvcache.actor import record_run
from skillrepro.studies.kvcache.replay import replay_run
from skillrepro.llm.servers import URL_ENV
from skillrepro.config import seeded
from skillrepro.pipeline import start_job

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
w, p, kv = snakemake.wildcards, snakemake.params, job.settings.kv
tasks = json.loads(Path(snakemake.input.tasks).read_text())
out_dir = str(Path(snakemake.output.requests).parent)
if p.own_server:  # another model than the shared server's: record_run starts this job's own server
    os.environ.pop(URL_ENV, None)
if kv.replay:
    stream = replay_run(fmt=w.kvfmt, seed=int(w.kvseed), bench_name=job.settings.bench.name, split=tasks["split"],
                        trajectories=snakemake.input.trajectories, out_dir=out_dir, tokenizer=kv.prefix_tokenizer,
                        bank_path=kv.bank, templates_dir=kv.templates_dir)
else:
    log.info("live run: %s", f"lockstep, groups of {kv.parallel_episodes}" if kv.lockstep and
             kv.parallel_episodes > 1 else f"free-running, {kv.parallel_episodes} episode(s) in flight")
    stream = record_run(fmt=w.kvfmt, seed=int(w.kvseed), bench=job.settings.bench, llm=seeded(job.settings.llm, w.kvseed),
                        task_ids=tasks["tasks"], call_budget=kv.call_budget, out_dir=out_dir, split=tasks["split"],
                        bank_path=kv.bank, templates_dir=kv.templates_dir, max_tokens=kv.max_tokens,
                        parallel=kv.parallel_episodes, lockstep=kv.lockstep, wall_s=p.wall_s,
                        log=log.info).stream
prompt = sum(len(r.token_ids) for r in stream)
if kv.replay:  # no server: nothing measured
    log.info("%s seed %s: %d requests, %d prompt tokens (replay: no server count)", w.kvfmt, w.kvseed, len(stream),
             prompt)
else:  # record_run failed at the first reply without a count: every request has one
    cached = sum(r.server_cached_tokens for r in stream)
    log.info("%s seed %s: %d requests, %d prompt tokens, server cached %d (%.3f)", w.kvfmt, w.kvseed, len(stream),
             prompt, cached, cached / max(prompt, 1))
