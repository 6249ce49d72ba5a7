rule sample_tasks:
    output:
        "results/tasks/{bench}.json",
    params:
        bench=lambda w: BENCHMARKS[w.bench],
        # Plain values, so that Snakemake redraws the lists when one of them changes.
        task_seed=PROTOCOL.task_seed,
        seeds=list(PROTOCOL.seeds),
        n_train=PROTOCOL.train_rollouts,
        n_test=PROTOCOL.n_test,
    log:
        "logs/sample_tasks/{bench}.log",
    benchmark:
        "results/benchmarks/sample_tasks/{bench}.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/sample_tasks.py"
