rule evaluate:
    input:
        tasks=f"{TASKS}/{{bench}}/seed{{seed}}/test.json",
        library=f"{RUN}/library/v{{k}}/manifest.json",
    output:
        episodes=f"{RUN}/eval/v{{k}}/episodes.parquet",
        steps=f"{RUN}/eval/v{{k}}/steps.parquet",
        llm_calls=f"{RUN}/eval/v{{k}}/llm_calls.parquet",
        skill_calls=f"{RUN}/eval/v{{k}}/skill_calls.parquet",
    params:
        settings=settings("speedrunner", "run"),
        wall_s=config["budgets"]["rollout_wall_s"],
    resources:
        llm=llm_units(PROTOCOL.n_test, "test"),
        mem_mb=job_mem_mb("evaluate", llm_units(PROTOCOL.n_test, "test")),
        cpus_per_task=job_cpus("evaluate"),
        runtime=480,  # minutes; profiles/slurm/config.yaml's set-resources decides (tests/project/test_packaging.py)
    log:
        f"{RUN_LOG}/evaluate_v{{k}}.log",
    benchmark:
        f"{RUN_TIMING}/evaluate_v{{k}}.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/evaluate.py"
