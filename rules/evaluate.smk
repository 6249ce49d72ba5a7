rule evaluate:
    input:
        tasks="results/tasks/{bench}.json",
        library=RUN + "/library/v{k}/manifest.json",
    output:
        episodes=RUN + "/eval/v{k}/episodes.parquet",
        steps=RUN + "/eval/v{k}/steps.parquet",
        llm_calls=RUN + "/eval/v{k}/llm_calls.parquet",
        skill_calls=RUN + "/eval/v{k}/skill_calls.parquet",
    params:
        bench=lambda w: BENCHMARKS[w.bench],
        method=lambda w: METHODS[w.variant],
        llm=LLM,
        protocol=PROTOCOL,
        wall_s=config["budgets"]["rollout_wall_s"],
    resources:
        llm=1,
        mem_mb=4000,
        runtime=240,
    log:
        "logs/" + RUN + "/evaluate_v{k}.log",
    benchmark:
        "results/benchmarks/" + RUN + "/evaluate_v{k}.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/evaluate.py"
