# The KV-cache study's runs: tasks, trajectories (replay), actor runs, prefix-cache simulations (common.smk).
rule kvcache_all:
    input:
        expand("results/tables/kvcache/{kvmodel}/{name}.csv", kvmodel=_KV_LLMS, name=_KV_TABLE_NAMES),
        expand("results/figures/kvcache/{kvmodel}/{name}.png", kvmodel=_KV_LLMS, name=_KV_FIGURE_NAMES),
        "results/tables/kvcache_prefix.csv",
        "results/tables/kvcache_segments.csv",
        "results/figures/kvcache_segments.png",  # the seminar's 2-3 prompt example
        "results/tables/kvcache_share.csv",
        expand("results/tables/kvcache/{kvmodel}/breaks.csv", kvmodel=_KV_LLMS),
        expand("results/tables/kvcache/{kvmodel}/locations.csv", kvmodel=_KV_LLMS),
        expand("results/tables/kvcache/{kvmodel}/versions.csv", kvmodel=_KV_LLMS),
        # harness vs actor prompts: a replay has no actor prompts to compare
        [] if KV.replay else expand("results/tables/kvcache/{kvmodel}/prompt_check.csv", kvmodel=_KV_LLMS),
        "results/tables/kvcache_models.csv",
        "results/figures/kvcache_models.png",
        # the runs replayed on the vLLM engine at each KV size, when kvcache.engine_kv_blocks names sizes
        expand("results/tables/kvcache/{kvmodel}/engine.csv", kvmodel=_KV_LLMS) if KV.engine_kv_blocks else [],
        expand("results/figures/kvcache/{kvmodel}/engine.png", kvmodel=_KV_LLMS) if KV.engine_kv_blocks else [],
        # the non-prefix reuse experiment, when kvcache.blend.model names a model
        ["results/tables/kvcache_blend_summary.csv", "results/figures/kvcache_blend.png"]
        if KV.blend_settings.get("model")
        else [],


rule kvcache_tasks:
    output:
        "results/kvcache/tasks.json",
    params:
        settings=settings("kvcache", "study"),
    log:
        "logs/kvcache/tasks.log",
    benchmark:
        "results/timings/kvcache/tasks.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/tasks.py"


rule kvcache_trajectories:
    input:
        tasks="results/kvcache/tasks.json",
    output:
        "results/kvcache/trajectories.json",
    params:
        settings=settings("kvcache", "study"),
    log:
        "logs/kvcache/trajectories.log",
    benchmark:
        "results/timings/kvcache/trajectories.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/trajectories.py"


rule kvcache_run:
    input:
        tasks="results/kvcache/tasks.json",
        # replay mode: every format replays the same recorded games
        **({"trajectories": "results/kvcache/trajectories.json"} if KV.replay else {}),
    output:
        episodes=f"{_KV_RUN}/episodes.parquet",
        steps=f"{_KV_RUN}/steps.parquet",
        llm_calls=f"{_KV_RUN}/llm_calls.parquet",
        requests=f"{_KV_RUN}/requests.jsonl",
        counters=f"{_KV_RUN}/server_counters.json",
    params:
        settings=settings("kvcache", "study"),
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
    log:
        "logs/kvcache/{kvmodel}/run_{kvfmt}_seed{kvseed}.log",
    benchmark:
        "results/timings/kvcache/{kvmodel}/run_{kvfmt}_seed{kvseed}.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/run.py"


rule kvcache_simulate:
    input:
        requests=f"{_KV_RUN}/requests.jsonl",
        counters=f"{_KV_RUN}/server_counters.json",
    output:
        summary=f"{_KV_SIM}/summary.parquet",
        steps=f"{_KV_SIM}/steps.parquet",
        load=f"{_KV_SIM}/load.parquet",
        server=f"{_KV_SIM}/server.parquet",
        counters=f"{_KV_SIM}/counters.parquet",
    params:
        settings=settings("kvcache", "study"),
        # a run with P episodes in flight holds min(P, slots) slots of its server (the llm resource)
        slots=lambda w: max(KV.server_slots, min(KV.parallel_episodes, _KV_LLMS[w.kvmodel].slots)),
    log:
        "logs/kvcache/{kvmodel}/simulate_{kvfmt}_seed{kvseed}.log",
    benchmark:
        "results/timings/kvcache/{kvmodel}/simulate_{kvfmt}_seed{kvseed}.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/simulate.py"


rule kvcache_engine:
    input:
        requests=f"{_KV_RUN}/requests.jsonl",
    output:
        f"{_KV_ENGINE}/blocks{{kvblocks}}.parquet",
    params:
        settings=settings("kvcache", "study"),
    resources:
        # a vLLM server of its own (llm=0: it uses no shared server), with the GPU it uses off a CPU machine
        gpu=LLM_GPUS,
        kv_vllm_server=1,
        mem_mb=6000,
    log:
        "logs/kvcache/{kvmodel}/engine_{kvfmt}_seed{kvseed}_blocks{kvblocks}.log",
    benchmark:
        "results/timings/kvcache/{kvmodel}/engine_{kvfmt}_seed{kvseed}_blocks{kvblocks}.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/engine.py"
