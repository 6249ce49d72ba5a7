# The KV-cache study's tables and figures, per model and across models (common.smk).
rule kvcache_prefix:
    input:
        tasks="results/kvcache/tasks.json",
        **({"trajectories": "results/kvcache/trajectories.json"} if KV.replay else {}),
    output:
        report("results/tables/kvcache_prefix.csv", caption="../../report/kvcache_prefix_table.rst", category="KV cache"),
    params:
        settings=settings("kvcache", "study"),
    log:
        "logs/kvcache/prefix.log",
    benchmark:
        "results/timings/kvcache/prefix.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/prefix.py"


rule kvcache_segments:
    input:
        tasks="results/kvcache/tasks.json",
        **({"trajectories": "results/kvcache/trajectories.json"} if KV.replay else {}),
    output:
        table=report("results/tables/kvcache_segments.csv", caption="../../report/kvcache_segments_table.rst", category="KV cache"),
        figure=report("results/figures/kvcache_segments.png", caption="../../report/kvcache_segments.rst", category="KV cache"),
    params:
        settings=settings("kvcache", "study"),
    log:
        "logs/kvcache/segments.log",
    benchmark:
        "results/timings/kvcache/segments.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/segments.py"


rule kvcache_share:
    input:
        tasks="results/kvcache/tasks.json",
        **({"trajectories": "results/kvcache/trajectories.json"} if KV.replay else {}),
    output:
        report("results/tables/kvcache_share.csv", caption="../../report/kvcache_share_table.rst", category="KV cache"),
    params:
        settings=settings("kvcache", "study"),
    log:
        "logs/kvcache/share.log",
    benchmark:
        "results/timings/kvcache/share.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/share.py"


rule kvcache_breaks:
    input:
        _kv_model_runs(f"{_KV_RUN}/requests.jsonl"),
    output:
        table=report("results/tables/kvcache/{kvmodel}/breaks.csv", caption="../../report/kvcache_breaks_table.rst", category="KV cache", subcategory="{kvmodel}"),
        requests="results/kvcache/{kvmodel}/breaks_per_request.csv",
    params:
        settings=settings("kvcache", "study"),
        runs=lambda w: [(f, s, os.path.join(_KV_RUN.format(kvmodel=w.kvmodel, kvfmt=f, kvseed=s), "requests.jsonl"))
                        for f in KV.formats for s in KV.seeds],
    log:
        "logs/kvcache/{kvmodel}/breaks.log",
    benchmark:
        "results/timings/kvcache/{kvmodel}/breaks.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/breaks.py"


rule kvcache_versions:
    input:
        _kv_model_runs(f"{_KV_RUN}/requests.jsonl"),
    output:
        report("results/tables/kvcache/{kvmodel}/versions.csv", caption="../../report/kvcache_versions_table.rst", category="KV cache", subcategory="{kvmodel}"),
    params:
        settings=settings("kvcache", "study"),
        runs=lambda w: [(f, s, os.path.join(_KV_RUN.format(kvmodel=w.kvmodel, kvfmt=f, kvseed=s), "requests.jsonl"))
                        for f in KV.formats for s in KV.seeds],
    log:
        "logs/kvcache/{kvmodel}/versions.log",
    benchmark:
        "results/timings/kvcache/{kvmodel}/versions.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/versions.py"


rule kvcache_prompt_check:
    input:
        tasks="results/kvcache/tasks.json",
        calls=_kv_model_runs(f"{_KV_RUN}/llm_calls.parquet"),
        episodes=_kv_model_runs(f"{_KV_RUN}/episodes.parquet"),
        steps=_kv_model_runs(f"{_KV_RUN}/steps.parquet"),  # the commands the harness replays
    output:
        report("results/tables/kvcache/{kvmodel}/prompt_check.csv", caption="../../report/kvcache_prompt_check_table.rst", category="KV cache", subcategory="{kvmodel}"),
    params:
        settings=settings("kvcache", "study"),
        runs=lambda w: [(f, s, _KV_RUN.format(kvmodel=w.kvmodel, kvfmt=f, kvseed=s)) for f in KV.formats for s in KV.seeds],
    log:
        "logs/kvcache/{kvmodel}/prompt_check.log",
    benchmark:
        "results/timings/kvcache/{kvmodel}/prompt_check.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/prompt_check.py"


rule kvcache_locations:
    input:
        _kv_model_runs(f"{_KV_RUN}/steps.parquet"),
    output:
        report("results/tables/kvcache/{kvmodel}/locations.csv", caption="../../report/kvcache_locations_table.rst", category="KV cache", subcategory="{kvmodel}"),
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
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/locations.py"


rule kvcache_tables:
    input:
        summary=_kv_model_runs(f"{_KV_SIM}/summary.parquet"),
        steps=_kv_model_runs(f"{_KV_SIM}/steps.parquet"),
        load=_kv_model_runs(f"{_KV_SIM}/load.parquet"),
        server=_kv_model_runs(f"{_KV_SIM}/server.parquet"),
        counters=_kv_model_runs(f"{_KV_SIM}/counters.parquet"),
        episodes=_kv_model_runs(f"{_KV_RUN}/episodes.parquet"),
    output:
        **{n: report(f"results/tables/kvcache/{{kvmodel}}/{n}.csv", caption=f"../../report/kvcache_{n}_table.rst", category="KV cache", subcategory="{kvmodel}")
           for n in _KV_TABLE_NAMES},
    params:
        settings=settings("kvcache", "study"),
        backend=lambda w: "replay" if KV.replay else _KV_LLMS[w.kvmodel].backend,
    log:
        "logs/kvcache/{kvmodel}/tables.log",
    benchmark:
        "results/timings/kvcache/{kvmodel}/tables.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/tables.py"


rule kvcache_figures:
    input:
        prefix="results/tables/kvcache_prefix.csv",
        **{n: f"results/tables/kvcache/{{kvmodel}}/{n}.csv" for n in _KV_TABLE_NAMES},
    output:
        **{n: report(f"results/figures/kvcache/{{kvmodel}}/{n}.png", caption=f"../../report/kvcache_{n}.rst", category="KV cache", subcategory="{kvmodel}")
           for n in _KV_FIGURE_NAMES},
    params:
        settings=settings("kvcache", "study"),
    log:
        "logs/kvcache/{kvmodel}/figures.log",
    benchmark:
        "results/timings/kvcache/{kvmodel}/figures.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/figures.py"


rule kvcache_models:
    input:
        headline=expand("results/tables/kvcache/{kvmodel}/headline.csv", kvmodel=_KV_LLMS),  # measured first
        reuse=expand("results/tables/kvcache/{kvmodel}/reuse.csv", kvmodel=_KV_LLMS),
        success=expand("results/tables/kvcache/{kvmodel}/success.csv", kvmodel=_KV_LLMS),
        overload=expand("results/tables/kvcache/{kvmodel}/overload.csv", kvmodel=_KV_LLMS),
    output:
        table=report("results/tables/kvcache_models.csv", caption="../../report/kvcache_models_table.rst", category="KV cache"),
        figure=report("results/figures/kvcache_models.png", caption="../../report/kvcache_models.rst", category="KV cache"),
    params:
        settings=settings("kvcache", "study"),
        models=list(_KV_LLMS),
    log:
        "logs/kvcache/models.log",
    benchmark:
        "results/timings/kvcache/models.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/models.py"


rule kvcache_blend:
    input:
        trajectories="results/kvcache/trajectories.json",
    output:
        table=report("results/tables/kvcache_blend.csv", caption="../../report/kvcache_blend_table.rst", category="KV cache"),
        summary=report("results/tables/kvcache_blend_summary.csv", caption="../../report/kvcache_blend_summary.rst", category="KV cache"),
        samples=report("results/tables/kvcache_blend_samples.csv", caption="../../report/kvcache_blend_samples.rst", category="KV cache"),
        figure=report("results/figures/kvcache_blend.png", caption="../../report/kvcache_blend.rst", category="KV cache"),
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
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/blend.py"


rule kvcache_engine_table:
    input:
        lambda w: [f"{_KV_ENGINE}/blocks{b}.parquet".format(kvmodel=w.kvmodel, kvfmt=f, kvseed=s)
                   for f in _KV_ENGINE_FORMATS for s in KV.seeds for b in KV.engine_kv_blocks],
    output:
        table=report("results/tables/kvcache/{kvmodel}/engine.csv", caption="../../report/kvcache_engine_table.rst", category="KV cache", subcategory="{kvmodel}"),
        figure=report("results/figures/kvcache/{kvmodel}/engine.png", caption="../../report/kvcache_engine.rst", category="KV cache", subcategory="{kvmodel}"),
    params:
        settings=settings("kvcache", "study"),
    log:
        "logs/kvcache/{kvmodel}/engine_table.log",
    benchmark:
        "results/timings/kvcache/{kvmodel}/engine_table.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/kvcache/engine_table.py"
