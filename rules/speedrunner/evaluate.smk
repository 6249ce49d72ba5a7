rule evaluate:
    input:
        tasks="results/tasks/{bench}/seed{seed}/test.json",
        library="results/runs/{bench}/{variant}/seed{seed}/library/v{k}/manifest.json",
    output:
        episodes="results/runs/{bench}/{variant}/seed{seed}/eval/v{k}/episodes.parquet",
        steps="results/runs/{bench}/{variant}/seed{seed}/eval/v{k}/steps.parquet",
        llm_calls="results/runs/{bench}/{variant}/seed{seed}/eval/v{k}/llm_calls.parquet",
        skill_calls="results/runs/{bench}/{variant}/seed{seed}/eval/v{k}/skill_calls.parquet",
    params:
        settings=settings("speedrunner", "run"),
        wall_s=config["budgets"]["rollout_wall_s"],
    resources:
        llm=llm_units(PROTOCOL.n_test, "test"),
        mem_mb=job_mem_mb("evaluate", llm_units(PROTOCOL.n_test, "test")),
        cpus_per_task=job_cpus("evaluate"),
        runtime=240,
    log:
        "logs/runs/{bench}/{variant}/seed{seed}/evaluate_v{k}.log",
    benchmark:
        "results/timings/runs/{bench}/{variant}/seed{seed}/evaluate_v{k}.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/evaluate.py"
