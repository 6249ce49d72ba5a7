# KV-cache reuse study (seed 001, issue 5): ALFWorld actor runs per (model, prompt format, seed) recording
# every request's token ids and the server's cached tokens -> request streams -> prefix-cache simulations
# (retain vs flush, capacities, lockstep concurrency) -> tables and the seminar's figures per model -> a
# comparison of the models. With kvcache.replay, recorded trajectories stand in for the model.
# Target: kvcache_all.

# Each rule's `settings` (the study's one kind of job) reruns a job whose settings changed; the job rebuilds its
# typed settings from the config and checks them against it (skillrepro.pipeline.start_job).
KV = study_settings("kvcache")
_KV_LLMS = KV.model_llms(config)  # model name -> its llm settings
_KV_WALL = config["budgets"]["rollout_wall_s"]
# what served the runs: the LLM backend, or "replay" when kvcache.replay plays trajectories without one
_KV_BACKEND = "replay" if KV.replay else LLM.backend

_KV_RUN = "results/kvcache/{kvmodel}/runs/{kvfmt}/seed{kvseed}"
_KV_SIM = "results/kvcache/{kvmodel}/sim/{kvfmt}/seed{kvseed}"
_KV_CONSTRAINTS = dict(kvmodel="|".join(_KV_LLMS), kvfmt="|".join(KV.formats), kvseed=r"\d+")
_KV_TABLE_NAMES = ("headline", "reuse", "steps", "load", "success", "server", "overload", "counters")
_KV_FIGURE_NAMES = ("reuse", "prefix", "load", "reuse_steps", "recomputed", "preemptions", "success", "server")


# every (format, seed) instance of a path pattern, for the job's model
_kv_model_runs = lambda pattern: lambda w: [
    pattern.format(kvmodel=w.kvmodel, kvfmt=f, kvseed=s) for f in KV.formats for s in KV.seeds
]
# a model other than the llm section's cannot use the invocation's shared server: its job starts its own
_kv_own_server = lambda w: not KV.replay and _KV_LLMS[w.kvmodel] != LLM


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
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_tasks.py"


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
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_trajectories.py"


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
    wildcard_constraints:
        **_KV_CONSTRAINTS,
    params:
        settings=settings("kvcache", "study"),
        own_server=_kv_own_server,
        wall_s=_KV_WALL,
    resources:
        # a run with P episodes in flight takes P slots of the shared server, so runs do not crowd each
        # other's batch; a replay or a run on its own server takes none
        llm=lambda w: 0 if KV.replay or _kv_own_server(w) else min(KV.parallel_episodes, LLM.slots),
        mem_mb=4000,
    log:
        "logs/kvcache/{kvmodel}/run_{kvfmt}_seed{kvseed}.log",
    benchmark:
        "results/timings/kvcache/{kvmodel}/run_{kvfmt}_seed{kvseed}.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_run.py"


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
    wildcard_constraints:
        **_KV_CONSTRAINTS,
    params:
        settings=settings("kvcache", "study"),
        # a run with P episodes in flight holds min(P, slots) slots of its server (the llm resource)
        slots=lambda w: max(KV.server_slots, min(KV.parallel_episodes, _KV_LLMS[w.kvmodel].slots)),
    log:
        "logs/kvcache/{kvmodel}/simulate_{kvfmt}_seed{kvseed}.log",
    benchmark:
        "results/timings/kvcache/{kvmodel}/simulate_{kvfmt}_seed{kvseed}.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_simulate.py"


rule kvcache_prefix:
    input:
        tasks="results/kvcache/tasks.json",
        **({"trajectories": "results/kvcache/trajectories.json"} if KV.replay else {}),
    output:
        report("results/tables/kvcache_prefix.csv", caption="../report/kvcache_prefix_table.rst", category="KV cache"),
    params:
        settings=settings("kvcache", "study"),
    log:
        "logs/kvcache/prefix.log",
    benchmark:
        "results/timings/kvcache/prefix.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_prefix.py"


rule kvcache_segments:
    input:
        tasks="results/kvcache/tasks.json",
        **({"trajectories": "results/kvcache/trajectories.json"} if KV.replay else {}),
    output:
        table=report("results/tables/kvcache_segments.csv", caption="../report/kvcache_segments_table.rst", category="KV cache"),
        figure=report("results/figures/kvcache_segments.png", caption="../report/kvcache_segments.rst", category="KV cache"),
    params:
        settings=settings("kvcache", "study"),
    log:
        "logs/kvcache/segments.log",
    benchmark:
        "results/timings/kvcache/segments.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_segments.py"


rule kvcache_share:
    input:
        tasks="results/kvcache/tasks.json",
        **({"trajectories": "results/kvcache/trajectories.json"} if KV.replay else {}),
    output:
        report("results/tables/kvcache_share.csv", caption="../report/kvcache_share_table.rst", category="KV cache"),
    params:
        settings=settings("kvcache", "study"),
    log:
        "logs/kvcache/share.log",
    benchmark:
        "results/timings/kvcache/share.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_share.py"


rule kvcache_breaks:
    input:
        _kv_model_runs(f"{_KV_RUN}/requests.jsonl"),
    output:
        table=report("results/tables/kvcache/{kvmodel}/breaks.csv", caption="../report/kvcache_breaks_table.rst", category="KV cache", subcategory="{kvmodel}"),
        requests="results/kvcache/{kvmodel}/breaks_per_request.csv",
    wildcard_constraints:
        kvmodel=_KV_CONSTRAINTS["kvmodel"],
    params:
        settings=settings("kvcache", "study"),
        runs=lambda w: [(f, s, os.path.join(_KV_RUN.format(kvmodel=w.kvmodel, kvfmt=f, kvseed=s), "requests.jsonl"))
                        for f in KV.formats for s in KV.seeds],
    log:
        "logs/kvcache/{kvmodel}/breaks.log",
    benchmark:
        "results/timings/kvcache/{kvmodel}/breaks.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_breaks.py"


rule kvcache_versions:
    input:
        _kv_model_runs(f"{_KV_RUN}/requests.jsonl"),
    output:
        report("results/tables/kvcache/{kvmodel}/versions.csv", caption="../report/kvcache_versions_table.rst", category="KV cache", subcategory="{kvmodel}"),
    wildcard_constraints:
        kvmodel=_KV_CONSTRAINTS["kvmodel"],
    params:
        settings=settings("kvcache", "study"),
        runs=lambda w: [(f, s, os.path.join(_KV_RUN.format(kvmodel=w.kvmodel, kvfmt=f, kvseed=s), "requests.jsonl"))
                        for f in KV.formats for s in KV.seeds],
    log:
        "logs/kvcache/{kvmodel}/versions.log",
    benchmark:
        "results/timings/kvcache/{kvmodel}/versions.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_versions.py"


rule kvcache_prompt_check:
    input:
        tasks="results/kvcache/tasks.json",
        calls=_kv_model_runs(f"{_KV_RUN}/llm_calls.parquet"),
        episodes=_kv_model_runs(f"{_KV_RUN}/episodes.parquet"),
        steps=_kv_model_runs(f"{_KV_RUN}/steps.parquet"),  # the commands the harness replays
    output:
        report("results/tables/kvcache/{kvmodel}/prompt_check.csv", caption="../report/kvcache_prompt_check_table.rst", category="KV cache", subcategory="{kvmodel}"),
    wildcard_constraints:
        kvmodel=_KV_CONSTRAINTS["kvmodel"],
    params:
        settings=settings("kvcache", "study"),
        runs=lambda w: [(f, s, _KV_RUN.format(kvmodel=w.kvmodel, kvfmt=f, kvseed=s)) for f in KV.formats for s in KV.seeds],
    log:
        "logs/kvcache/{kvmodel}/prompt_check.log",
    benchmark:
        "results/timings/kvcache/{kvmodel}/prompt_check.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_prompt_check.py"


rule kvcache_locations:
    input:
        _kv_model_runs(f"{_KV_RUN}/steps.parquet"),
    output:
        report("results/tables/kvcache/{kvmodel}/locations.csv", caption="../report/kvcache_locations_table.rst", category="KV cache", subcategory="{kvmodel}"),
    wildcard_constraints:
        kvmodel=_KV_CONSTRAINTS["kvmodel"],
    params:
        settings=settings("kvcache", "study"),
        mode="replay" if KV.replay else "model",
        runs=lambda w: [(f, s, os.path.join(_KV_RUN.format(kvmodel=w.kvmodel, kvfmt=f, kvseed=s), "steps.parquet"))
                        for f in KV.formats for s in KV.seeds],
    log:
        "logs/kvcache/{kvmodel}/locations.log",
    benchmark:
        "results/timings/kvcache/{kvmodel}/locations.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_locations.py"


rule kvcache_tables:
    input:
        summary=_kv_model_runs(f"{_KV_SIM}/summary.parquet"),
        steps=_kv_model_runs(f"{_KV_SIM}/steps.parquet"),
        load=_kv_model_runs(f"{_KV_SIM}/load.parquet"),
        server=_kv_model_runs(f"{_KV_SIM}/server.parquet"),
        counters=_kv_model_runs(f"{_KV_SIM}/counters.parquet"),
        episodes=_kv_model_runs(f"{_KV_RUN}/episodes.parquet"),
    output:
        **{n: report(f"results/tables/kvcache/{{kvmodel}}/{n}.csv", caption=f"../report/kvcache_{n}_table.rst", category="KV cache", subcategory="{kvmodel}")
           for n in _KV_TABLE_NAMES},
    wildcard_constraints:
        kvmodel=_KV_CONSTRAINTS["kvmodel"],
    params:
        settings=settings("kvcache", "study"),
        backend=lambda w: "replay" if KV.replay else _KV_LLMS[w.kvmodel].backend,
    log:
        "logs/kvcache/{kvmodel}/tables.log",
    benchmark:
        "results/timings/kvcache/{kvmodel}/tables.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_tables.py"


rule kvcache_figures:
    input:
        prefix="results/tables/kvcache_prefix.csv",
        **{n: f"results/tables/kvcache/{{kvmodel}}/{n}.csv" for n in _KV_TABLE_NAMES},
    output:
        **{n: report(f"results/figures/kvcache/{{kvmodel}}/{n}.png", caption=f"../report/kvcache_{n}.rst", category="KV cache", subcategory="{kvmodel}")
           for n in _KV_FIGURE_NAMES},
    wildcard_constraints:
        kvmodel=_KV_CONSTRAINTS["kvmodel"],
    params:
        settings=settings("kvcache", "study"),
    log:
        "logs/kvcache/{kvmodel}/figures.log",
    benchmark:
        "results/timings/kvcache/{kvmodel}/figures.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_figures.py"


rule kvcache_models:
    input:
        headline=expand("results/tables/kvcache/{kvmodel}/headline.csv", kvmodel=_KV_LLMS),  # measured first
        reuse=expand("results/tables/kvcache/{kvmodel}/reuse.csv", kvmodel=_KV_LLMS),
        success=expand("results/tables/kvcache/{kvmodel}/success.csv", kvmodel=_KV_LLMS),
        overload=expand("results/tables/kvcache/{kvmodel}/overload.csv", kvmodel=_KV_LLMS),
    output:
        table=report("results/tables/kvcache_models.csv", caption="../report/kvcache_models_table.rst", category="KV cache"),
        figure=report("results/figures/kvcache_models.png", caption="../report/kvcache_models.rst", category="KV cache"),
    params:
        settings=settings("kvcache", "study"),
        models=list(_KV_LLMS),
    log:
        "logs/kvcache/models.log",
    benchmark:
        "results/timings/kvcache/models.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_models.py"


rule kvcache_blend:
    input:
        trajectories="results/kvcache/trajectories.json",
    output:
        table=report("results/tables/kvcache_blend.csv", caption="../report/kvcache_blend_table.rst", category="KV cache"),
        summary=report("results/tables/kvcache_blend_summary.csv", caption="../report/kvcache_blend_summary.rst", category="KV cache"),
        samples=report("results/tables/kvcache_blend_samples.csv", caption="../report/kvcache_blend_samples.rst", category="KV cache"),
        figure=report("results/figures/kvcache_blend.png", caption="../report/kvcache_blend.rst", category="KV cache"),
    params:
        settings=settings("kvcache", "study"),
    resources:
        mem_mb=6000,  # a 0.5B model dequantised to float32, and its activations over ~1.5k tokens
    threads: KV.blend_settings["threads"]
    log:
        "logs/kvcache/blend.log",
    benchmark:
        "results/timings/kvcache/blend.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_blend.py"
