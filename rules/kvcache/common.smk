# KV-cache reuse study (seed 001): ALFWorld actor runs per (model, prompt format, seed) recording
# every request's token ids and the server's cached tokens -> request streams -> prefix-cache simulations
# (retain vs flush, capacities, lockstep concurrency) -> tables and the seminar's figures per model -> a
# comparison of the models. With kvcache.replay, recorded trajectories stand in for the model.
# Target: kvcache_all. Here: its settings and paths; runs.smk: the runs and the simulation; analysis.smk:
# tables and figures.

from skillrepro.studies.kvcache.paths import (KV_ENGINE, KV_FIGURES, KV_RESULTS, KV_RUN, KV_SIM, KV_TABLES, KV_TASKS,
                                              KV_TIMINGS, KV_TRAJECTORIES, KVRun)

# Each rule's `settings` (the study's one kind of job) reruns a job whose settings changed; the job rebuilds its
# typed settings from the config and checks them against it (skillrepro.pipeline.start_job).
KV = study_settings("kvcache")
_KV_LLMS = KV.model_llms(config)  # model name -> its llm settings
_KV_WALL = config["budgets"]["rollout_wall_s"]
# what served the runs: the LLM backend, or "replay" when kvcache.replay plays trajectories without one
_KV_BACKEND = "replay" if KV.replay else LLM.backend

# the runs replayed on the vLLM engine at each kvcache.engine_kv_blocks size (runs.smk: kvcache_engine)
_KV_ENGINE_FORMATS = KV.engine_formats or KV.formats


# What its wildcards match (global, as every study's block: rules/speedrunner/common.smk).
wildcard_constraints:
    kvmodel="|".join(_KV_LLMS),
    kvfmt="|".join(KV.formats),
    kvseed=r"\d+",
    kvblocks=r"\d+",


_KV_TABLE_NAMES = ("headline", "reuse", "steps", "load", "success", "server", "overload", "counters")
_KV_FIGURE_NAMES = ("reuse", "prefix", "load", "reuse_steps", "recomputed", "preemptions", "success", "server")


# every (format, seed) instance of a path pattern, for the job's model
_kv_model_runs = lambda pattern: lambda w: [
    pattern.format(kvmodel=w.kvmodel, kvfmt=f, kvseed=s) for f in KV.formats for s in KV.seeds
]
# Where a run's model is served. A model other than the llm section's cannot use the invocation's shared
# server: its job starts its own. On this machine, two vLLM servers the pipeline starts do not fit one GPU (the
# shared one holds its memory share for the whole invocation), so when several models are served that way every
# run starts its own server, one at a time (the kv_vllm_server resource), each from an empty cache. On a
# cluster every LLM job starts its own server on its node anyway (rules/common.smk).
_KV_SELF_SERVED = [m for m in _KV_LLMS.values() if m.backend == "vllm" and not served(m)]
_KV_SERVER_PER_RUN = workflow.local_exec and not KV.replay and len(_KV_SELF_SERVED) > 1
_kv_own_server = lambda w: not KV.replay and (_KV_SERVER_PER_RUN or _KV_LLMS[w.kvmodel] != LLM)
if workflow.local_exec:
    workflow.global_resources.setdefault("kv_vllm_server", 1)


def _kv_server_resources(w):
    """(gpu, kv_vllm_server, mem_mb, cpus) for the server a run starts on its node: a vLLM server the pipeline
    starts asks for the GPU it uses (on a cluster, every LLM job starts one); nothing where it uses the shared
    server or plays no model."""
    m = _KV_LLMS[w.kvmodel]
    starts = not KV.replay and (_kv_own_server(w) or not workflow.local_exec)
    vllm = starts and m.backend == "vllm" and not served(m)
    return (1 if vllm else 0, 1 if vllm else 0, server_mb(m) if starts else 0, server_cpus(m) if starts else 0)
