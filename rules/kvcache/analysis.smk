# The KV-cache study's tables and figures, per model and across models (common.smk).
rule kvcache_prefix:
    input:
        tasks=KV_TASKS,
        **({"trajectories": KV_TRAJECTORIES} if KV.replay else {}),
    output:
        report(f"{TABLES}/kvcache_prefix.csv", caption="../../report/kvcache_prefix_table.rst", category="KV cache"),
    params:
        settings=settings("kvcache", "study"),
    log:
        "logs/kvcache/prefix.log",
    benchmark:
        f"{KV_TIMINGS}/prefix.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/prefix.py"


rule kvcache_segments:
    input:
        tasks=KV_TASKS,
        **({"trajectories": KV_TRAJECTORIES} if KV.replay else {}),
    output:
        table=report(f"{TABLES}/kvcache_segments.csv", caption="../../report/kvcache_segments_table.rst", category="KV cache"),
        figure=report(f"{FIGURES}/kvcache_segments.png", caption="../../report/kvcache_segments.rst", category="KV cache"),
    params:
        settings=settings("kvcache", "study"),
    log:
        "logs/kvcache/segments.log",
    benchmark:
        f"{KV_TIMINGS}/segments.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/segments.py"


rule kvcache_share:
    input:
        tasks=KV_TASKS,
        **({"trajectories": KV_TRAJECTORIES} if KV.replay else {}),
    output:
        report(f"{TABLES}/kvcache_share.csv", caption="../../report/kvcache_share_table.rst", category="KV cache"),
    params:
        settings=settings("kvcache", "study"),
    log:
        "logs/kvcache/share.log",
    benchmark:
        f"{KV_TIMINGS}/share.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/share.py"


rule kvcache_breaks:
    input:
        _kv_model_runs(f"{KV_RUN}/requests.jsonl"),
    output:
        table=report(f"{KV_TABLES}/{{kvmodel}}/breaks.csv", caption="../../report/kvcache_breaks_table.rst", category="KV cache", subcategory="{kvmodel}"),
        requests=f"{KV_RESULTS}/{{kvmodel}}/breaks_per_request.csv",
    params:
        settings=settings("kvcache", "study"),
        runs=lambda w: [(f, s, f"{KVRun(w.kvmodel, f, s).folder}/requests.jsonl")
                        for f in KV.formats for s in KV.seeds],
    log:
        "logs/kvcache/{kvmodel}/breaks.log",
    benchmark:
        f"{KV_TIMINGS}/{{kvmodel}}/breaks.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/breaks.py"


rule kvcache_versions:
    input:
        _kv_model_runs(f"{KV_RUN}/requests.jsonl"),
    output:
        report(f"{KV_TABLES}/{{kvmodel}}/versions.csv", caption="../../report/kvcache_versions_table.rst", category="KV cache", subcategory="{kvmodel}"),
    params:
        settings=settings("kvcache", "study"),
        runs=lambda w: [(f, s, f"{KVRun(w.kvmodel, f, s).folder}/requests.jsonl")
                        for f in KV.formats for s in KV.seeds],
    log:
        "logs/kvcache/{kvmodel}/versions.log",
    benchmark:
        f"{KV_TIMINGS}/{{kvmodel}}/versions.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/versions.py"


rule kvcache_prompt_check:
    input:
        tasks=KV_TASKS,
        calls=_kv_model_runs(f"{KV_RUN}/llm_calls.parquet"),
        episodes=_kv_model_runs(f"{KV_RUN}/episodes.parquet"),
        steps=_kv_model_runs(f"{KV_RUN}/steps.parquet"),  # the commands the harness replays
    output:
        report(f"{KV_TABLES}/{{kvmodel}}/prompt_check.csv", caption="../../report/kvcache_prompt_check_table.rst", category="KV cache", subcategory="{kvmodel}"),
    params:
        settings=settings("kvcache", "study"),
        runs=lambda w: [(f, s, KVRun(w.kvmodel, f, s).folder) for f in KV.formats for s in KV.seeds],
    log:
        "logs/kvcache/{kvmodel}/prompt_check.log",
    benchmark:
        f"{KV_TIMINGS}/{{kvmodel}}/prompt_check.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/prompt_check.py"


rule kvcache_locations:
    input:
        _kv_model_runs(f"{KV_RUN}/steps.parquet"),
    output:
        report(f"{KV_TABLES}/{{kvmodel}}/locations.csv", caption="../../report/kvcache_locations_table.rst", category="KV cache", subcategory="{kvmodel}"),
    params:
        settings=settings("kvcache", "study"),
        mode="replay" if KV.replay else "model",
        runs=lambda w: [(f, s, f"{KVRun(w.kvmodel, f, s).folder}/steps.parquet")
                        for f in KV.formats for s in KV.seeds],
    log:
        "logs/kvcache/{kvmodel}/locations.log",
    benchmark:
        f"{KV_TIMINGS}/{{kvmodel}}/locations.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/locations.py"


rule kvcache_tables:
    input:
        summary=_kv_model_runs(f"{KV_SIM}/summary.parquet"),
        steps=_kv_model_runs(f"{KV_SIM}/steps.parquet"),
        load=_kv_model_runs(f"{KV_SIM}/load.parquet"),
        server=_kv_model_runs(f"{KV_SIM}/server.parquet"),
        counters=_kv_model_runs(f"{KV_SIM}/counters.parquet"),
        episodes=_kv_model_runs(f"{KV_RUN}/episodes.parquet"),
    output:
        **{n: report(f"{KV_TABLES}/{{kvmodel}}/{n}.csv", caption=f"../../report/kvcache_{n}_table.rst", category="KV cache", subcategory="{kvmodel}")
           for n in _KV_TABLE_NAMES},
    params:
        settings=settings("kvcache", "study"),
        backend=lambda w: "replay" if KV.replay else _KV_LLMS[w.kvmodel].backend,
    log:
        "logs/kvcache/{kvmodel}/tables.log",
    benchmark:
        f"{KV_TIMINGS}/{{kvmodel}}/tables.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/tables.py"


rule kvcache_figures:
    input:
        prefix=f"{TABLES}/kvcache_prefix.csv",
        **{n: f"{KV_TABLES}/{{kvmodel}}/{n}.csv" for n in _KV_TABLE_NAMES},
    output:
        **{n: report(f"{KV_FIGURES}/{{kvmodel}}/{n}.png", caption=f"../../report/kvcache_{n}.rst", category="KV cache", subcategory="{kvmodel}")
           for n in _KV_FIGURE_NAMES},
    params:
        settings=settings("kvcache", "study"),
    log:
        "logs/kvcache/{kvmodel}/figures.log",
    benchmark:
        f"{KV_TIMINGS}/{{kvmodel}}/figures.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/figures.py"


rule kvcache_models:
    input:
        headline=expand(f"{KV_TABLES}/{{kvmodel}}/headline.csv", kvmodel=_KV_LLMS),  # measured first
        reuse=expand(f"{KV_TABLES}/{{kvmodel}}/reuse.csv", kvmodel=_KV_LLMS),
        success=expand(f"{KV_TABLES}/{{kvmodel}}/success.csv", kvmodel=_KV_LLMS),
        overload=expand(f"{KV_TABLES}/{{kvmodel}}/overload.csv", kvmodel=_KV_LLMS),
    output:
        table=report(f"{TABLES}/kvcache_models.csv", caption="../../report/kvcache_models_table.rst", category="KV cache"),
        figure=report(f"{FIGURES}/kvcache_models.png", caption="../../report/kvcache_models.rst", category="KV cache"),
    params:
        settings=settings("kvcache", "study"),
        models=list(_KV_LLMS),
    log:
        "logs/kvcache/models.log",
    benchmark:
        f"{KV_TIMINGS}/models.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/models.py"


rule kvcache_blend:
    input:
        trajectories=KV_TRAJECTORIES,
    output:
        table=report(f"{TABLES}/kvcache_blend.csv", caption="../../report/kvcache_blend_table.rst", category="KV cache"),
        summary=report(f"{TABLES}/kvcache_blend_summary.csv", caption="../../report/kvcache_blend_summary.rst", category="KV cache"),
        samples=report(f"{TABLES}/kvcache_blend_samples.csv", caption="../../report/kvcache_blend_samples.rst", category="KV cache"),
        figure=report(f"{FIGURES}/kvcache_blend.png", caption="../../report/kvcache_blend.rst", category="KV cache"),
    params:
        settings=settings("kvcache", "study"),
    resources:
        mem_mb=6000,  # a 0.5B model dequantised to float32, and its activations over ~1.5k tokens
    threads: KV.blend_settings["threads"]
    log:
        "logs/kvcache/blend.log",
    benchmark:
        f"{KV_TIMINGS}/blend.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/blend.py"


rule kvcache_engine_table:
    input:
        lambda w: [f"{KVRun(w.kvmodel, f, s, 'engine').folder}/blocks{b}.parquet"
                   for f in _KV_ENGINE_FORMATS for s in KV.seeds for b in KV.engine_kv_blocks],
    output:
        table=report(f"{KV_TABLES}/{{kvmodel}}/engine.csv", caption="../../report/kvcache_engine_table.rst", category="KV cache", subcategory="{kvmodel}"),
        figure=report(f"{KV_FIGURES}/{{kvmodel}}/engine.png", caption="../../report/kvcache_engine.rst", category="KV cache", subcategory="{kvmodel}"),
    params:
        settings=settings("kvcache", "study"),
    log:
        "logs/kvcache/{kvmodel}/engine_table.log",
    benchmark:
        f"{KV_TIMINGS}/{{kvmodel}}/engine_table.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/engine_table.py"
