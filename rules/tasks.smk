rule sample_tasks:
    output:
        "results/tasks/{bench}.json",
    params:
        bench=lambda w: BENCHMARKS[w.bench],
        protocol=PROTOCOL,
    log:
        "logs/sample_tasks/{bench}.log",
    benchmark:
        "results/benchmarks/sample_tasks/{bench}.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/sample_tasks.py"
