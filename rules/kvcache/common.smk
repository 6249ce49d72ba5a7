# KV-cache reuse study (seed 001, issue 5): ALFWorld actor runs per (model, prompt format, seed) recording
# every request's token ids and the server's cached tokens -> request streams -> prefix-cache simulations
# (retain vs flush, capacities, lockstep concurrency) -> tables and the seminar's figures per model -> a
# comparison of the models. With kvcache.replay, recorded trajectories stand in for the model.
# Target: kvcache_all. Here: its settings and paths; runs.smk: the runs and the simulation; analysis.smk:
# tables and figures.

# Each rule's `settings` (the study's one kind of job) reruns a job whose settings changed; the job rebuilds its
# typed settings from the config and checks them against it (skillrepro.pipeline.start_job).
KV = study_settings("kvcache")
_KV_LLMS = KV.model_llms(config)  # model name -> its llm settings
_KV_WALL = config["budgets"]["rollout_wall_s"]
# what served the runs: the LLM backend, or "replay" when kvcache.replay plays trajectories without one
_KV_BACKEND = "replay" if KV.replay else LLM.backend

_KV_RUN = "results/kvcache/{kvmodel}/runs/{kvfmt}/seed{kvseed}"
_KV_SIM = "results/kvcache/{kvmodel}/sim/{kvfmt}/seed{kvseed}"
_KV_ENGINE = "results/kvcache/{kvmodel}/engine/{kvfmt}/seed{kvseed}"
# the runs replayed on the vLLM engine at each kvcache.engine_kv_blocks size (runs.smk: kvcache_engine)
_KV_ENGINE_FORMATS = KV.engine_formats or KV.formats
# what its wildcards match (the Snakefile's wildcard_constraints)
KV_WILDCARDS = dict(kvmodel="|".join(_KV_LLMS), kvfmt="|".join(KV.formats), kvseed=r"\d+", kvblocks=r"\d+")
_KV_TABLE_NAMES = ("headline", "reuse", "steps", "load", "success", "server", "overload", "counters")
_KV_FIGURE_NAMES = ("reuse", "prefix", "load", "reuse_steps", "recomputed", "preemptions", "success", "server")


# every (format, seed) instance of a path pattern, for the job's model
_kv_model_runs = lambda pattern: lambda w: [
    pattern.format(kvmodel=w.kvmodel, kvfmt=f, kvseed=s) for f in KV.formats for s in KV.seeds
]
# a model other than the llm section's cannot use the invocation's shared server: its job starts its own
_kv_own_server = lambda w: not KV.replay and _KV_LLMS[w.kvmodel] != LLM
