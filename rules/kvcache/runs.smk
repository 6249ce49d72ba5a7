# The KV-cache study's runs: tasks, trajectories (replay), actor runs, prefix-cache simulations (common.smk).
rule kvcache_all:
    input:
        expand(f"{KV_TABLES}/{{kvmodel}}/{{name}}.csv", kvmodel=_KV_LLMS, name=_KV_TABLE_NAMES),
        expand(f"{KV_FIGURES}/{{kvmodel}}/{{name}}.png", kvmodel=_KV_LLMS, name=_KV_FIGURE_NAMES),
        f"{TABLES}/kvcache_prefix.csv",
        f"{TABLES}/kvcache_segments.csv",
        f"{FIGURES}/kvcache_segments.png",  # the seminar's 2-3 prompt example
        f"{TABLES}/kvcache_share.csv",
        expand(f"{KV_TABLES}/{{kvmodel}}/breaks.csv", kvmodel=_KV_LLMS),
        expand(f"{KV_TABLES}/{{kvmodel}}/locations.csv", kvmodel=_KV_LLMS),
        expand(f"{KV_TABLES}/{{kvmodel}}/versions.csv", kvmodel=_KV_LLMS),
        # harness vs actor prompts: a replay has no actor prompts to compare
        [] if KV.replay else expand(f"{KV_TABLES}/{{kvmodel}}/prompt_check.csv", kvmodel=_KV_LLMS),
        f"{TABLES}/kvcache_models.csv",
        f"{FIGURES}/kvcache_models.png",
        # the runs replayed on the vLLM engine at each KV size, when kvcache.engine_kv_blocks names sizes
        expand(f"{KV_TABLES}/{{kvmodel}}/engine.csv", kvmodel=_KV_LLMS) if KV.engine_kv_blocks else [],
        expand(f"{KV_FIGURES}/{{kvmodel}}/engine.png", kvmodel=_KV_LLMS) if KV.engine_kv_blocks else [],
        # the non-prefix reuse experiment, when kvcache.blend.model names a model
        [f"{TABLES}/kvcache_blend_summary.csv", f"{FIGURES}/kvcache_blend.png"]
        if KV.blend_settings.get("model")
        else [],


rule kvcache_tasks:
    output:
        KV_TASKS,
    params:
        settings=settings("kvcache", "tasks"),
    log:
        "logs/kvcache/tasks.log",
    benchmark:
        f"{KV_TIMINGS}/tasks.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/tasks.py"


rule kvcache_trajectories:
    input:
        tasks=KV_TASKS,
    output:
        KV_TRAJECTORIES,
    params:
        settings=settings("kvcache", "run"),
    log:
        "logs/kvcache/trajectories.log",
    benchmark:
        f"{KV_TIMINGS}/trajectories.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/trajectories.py"


rule kvcache_run:
    input:
        tasks=KV_TASKS,
        # replay mode: every format replays the same recorded games
        **({"trajectories": KV_TRAJECTORIES} if KV.replay else {}),
    output:
        episodes=f"{KV_RUN}/episodes.parquet",
        steps=f"{KV_RUN}/steps.parquet",
        llm_calls=f"{KV_RUN}/llm_calls.parquet",
        requests=f"{KV_RUN}/requests.jsonl",
        counters=f"{KV_RUN}/server_counters.json",
    params:
        settings=settings("kvcache", "run"),
        own_server=_kv_own_server,
        wall_s=_KV_WALL,
    resources:
        # a run takes the shared server whole: its cache (vLLM's prefix cache, llama.cpp's slots) is emptied when
        # the run starts, which must not touch another run's, and vLLM's counters' difference is its own; a
        # replay or a run on its own server takes none
        llm=lambda w: 0 if KV.replay or _kv_own_server(w) else LLM.slots,
        # a server of its own: the GPU it uses, one at a time on this machine, its memory and CPUs beside the job's
        gpu=lambda w: _kv_server_resources(w)[0],
        kv_vllm_server=lambda w: _kv_server_resources(w)[1],
        mem_mb=lambda w: 4000 + _kv_server_resources(w)[2],
        cpus_per_task=lambda w: 1 + _kv_server_resources(w)[3],
        runtime=480,  # minutes; the Slurm profile decides
    log:
        "logs/kvcache/{kvmodel}/run_{kvfmt}_seed{kvseed}.log",
    benchmark:
        f"{KV_TIMINGS}/{{kvmodel}}/run_{{kvfmt}}_seed{{kvseed}}.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/run.py"


rule kvcache_simulate:
    input:
        requests=f"{KV_RUN}/requests.jsonl",
        counters=f"{KV_RUN}/server_counters.json",
    output:
        summary=f"{KV_SIM}/summary.parquet",
        steps=f"{KV_SIM}/steps.parquet",
        load=f"{KV_SIM}/load.parquet",
        server=f"{KV_SIM}/server.parquet",
        counters=f"{KV_SIM}/counters.parquet",
    params:
        settings=settings("kvcache", "simulate"),
        # a run with P episodes in flight holds min(P, slots) slots of its server (the llm resource)
        slots=lambda w: max(KV.server_slots, min(KV.parallel_episodes, _KV_LLMS[w.kvmodel].slots)),
    log:
        "logs/kvcache/{kvmodel}/simulate_{kvfmt}_seed{kvseed}.log",
    benchmark:
        f"{KV_TIMINGS}/{{kvmodel}}/simulate_{{kvfmt}}_seed{{kvseed}}.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/simulate.py"


rule kvcache_engine:
    input:
        requests=f"{KV_RUN}/requests.jsonl",
    output:
        f"{KV_ENGINE}/blocks{{kvblocks}}.parquet",
    params:
        settings=settings("kvcache", "engine"),
    resources:
        # a vLLM server of its own (llm=0: it uses no shared server), with the GPU it uses off a CPU machine
        gpu=LLM_GPUS,
        kv_vllm_server=1,
        mem_mb=6000,
        runtime=240,  # minutes; the Slurm profile decides
    log:
        "logs/kvcache/{kvmodel}/engine_{kvfmt}_seed{kvseed}_blocks{kvblocks}.log",
    benchmark:
        f"{KV_TIMINGS}/{{kvmodel}}/engine_{{kvfmt}}_seed{{kvseed}}_blocks{{kvblocks}}.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/engine.py"
