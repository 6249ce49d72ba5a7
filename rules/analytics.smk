rule analytics:
    input:
        evaluations=run_files([f"eval/v{k}/episodes.parquet" for k in PROTOCOL.checkpoints]),
        training=run_files([f"train/batch{i}/episodes.parquet" for i in range(PROTOCOL.n_cycles)]),
    output:
        checkpoints="results/analytics/checkpoints.parquet",
        training="results/analytics/training.parquet",
    params:
        pricing=config["pricing"],
        protocol=PROTOCOL,
    log:
        "logs/analytics.log",
    benchmark:
        "results/benchmarks/analytics.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/analytics.py"


rule tables:
    input:
        checkpoints="results/analytics/checkpoints.parquet",
    output:
        main=report("results/tables/main.csv", category="Tables"),
        checkpoints=report("results/tables/checkpoints.csv", category="Tables"),
    log:
        "logs/tables.log",
    benchmark:
        "results/benchmarks/tables.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/tables.py"


rule figure_learning_curves:
    input:
        "results/tables/checkpoints.csv",
    output:
        report("results/figures/learning_curves.png", category="Figures"),
    log:
        "logs/figures/learning_curves.log",
    benchmark:
        "results/benchmarks/figures/learning_curves.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/figure_learning_curves.py"


rule callgraph_table:
    input:
        run_files([f"library/v{PROTOCOL.n_cycles}/manifest.json"]),
    output:
        report("results/tables/callgraph.csv", category="Tables"),
    log:
        "logs/callgraph_table.log",
    benchmark:
        "results/benchmarks/callgraph_table.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/callgraph_table.py"
