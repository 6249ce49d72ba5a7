# Records -> per-episode and per-seed tables (DuckDB over exactly the files of the runs this config
# declares, never a glob of results/) -> the paper's tables. Figures: figures.smk.


rule analytics:
    input:
        # Each batch's episodes.parquet stands for its job's four record files (llm_calls, steps and
        # skill_calls are written by the same job, so they change together): one edge per job, not four,
        # keeps the paper preset's DAG small. The script reads the siblings.
        test_episodes=run_files([f"eval/v{k}/episodes.parquet" for k in PROTOCOL.checkpoints])
        + cross_eval_files(["episodes.parquet"]),
        train_episodes=run_files([f"train/batch{i}/episodes.parquet" for i in range(PROTOCOL.n_cycles)]),
        sleep_calls=sleep_files(),
    output:
        episodes=f"{ANALYTICS}/test_episodes.parquet",
        checkpoints=f"{ANALYTICS}/checkpoints.parquet",
        training=f"{ANALYTICS}/training.parquet",
        terminations=report(f"{TABLES}/terminations.csv", caption=f"{CAPTIONS}/terminations.rst", category="Tables"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/analytics.log",
    benchmark:
        f"{TIMINGS}/analytics.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/analytics.py"


rule tables:
    input:
        checkpoints=f"{ANALYTICS}/checkpoints.parquet",
    output:
        main=report(f"{TABLES}/main.csv", caption=f"{CAPTIONS}/main.rst", category="Tables"),
        checkpoints=report(f"{TABLES}/checkpoints.csv", caption=f"{CAPTIONS}/checkpoints.rst", category="Tables"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/tables.log",
    benchmark:
        f"{TIMINGS}/tables.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/tables.py"


rule stats:
    input:
        f"{ANALYTICS}/test_episodes.parquet",
    output:
        report(f"{TABLES}/stats.csv", caption=f"{CAPTIONS}/stats.rst", category="Tables"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/stats.log",
    benchmark:
        f"{TIMINGS}/stats.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/stats.py"


rule callgraph_table:
    input:
        run_files([f"library/v{k}/manifest.json" for k in range(PROTOCOL.n_cycles + 1)]),
    output:
        report(f"{TABLES}/callgraph.csv", caption=f"{CAPTIONS}/callgraph.rst", category="Tables"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/callgraph_table.log",
    benchmark:
        f"{TIMINGS}/callgraph_table.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/callgraph_table.py"


rule table_1:
    input:
        f"{TABLES}/callgraph.csv",
    output:
        report(f"{TABLES}/table1.csv", caption=f"{CAPTIONS}/table1.rst", category="Tables"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/table_1.log",
    benchmark:
        f"{TIMINGS}/table_1.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/table_1.py"


rule table_8:
    input:
        checkpoints=f"{ANALYTICS}/checkpoints.parquet",
        episodes=[f for f in TRUNCATION_FILES if f.endswith("episodes.parquet")],
        calls=[f for f in TRUNCATION_FILES if f.endswith("llm_calls.parquet")],
        skill_calls=[f for f in TRUNCATION_FILES if f.endswith("skill_calls.parquet")],
        libraries=[f.replace("episodes.parquet", "library/manifest.json") for f in TRUNCATION_FILES
                   if f.endswith("episodes.parquet")],
    output:
        report(f"{TABLES}/table8.csv", caption=f"{CAPTIONS}/table8.rst", category="Tables"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/table_8.log",
    benchmark:
        f"{TIMINGS}/table_8.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/table_8.py"


rule table_7:
    input:
        lambda w: [f"{cross_model_folder(m, 'table 7')}/{name}" for m in table7_models()
                   for name in ("checkpoints.csv", "stats.csv")],
    output:
        report(f"{TABLES}/table7.csv", caption=f"{CAPTIONS}/table7.rst", category="Tables"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
        models=lambda w: table7_models(),
    log:
        "logs/table_7.log",
    benchmark:
        f"{TIMINGS}/table_7.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/table_7.py"


rule retention:
    input:
        f"{ANALYTICS}/checkpoints.parquet",
    output:
        report(f"{TABLES}/retention.csv", caption=f"{CAPTIONS}/retention.rst", category="Tables"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/retention.log",
    benchmark:
        f"{TIMINGS}/retention.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/retention.py"
