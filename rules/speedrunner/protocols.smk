# Protocol variants of the online loop.
# - Distribution shift (section 6.4): a benchmark instance with `after: A` starts each run from the final
#   library (and notes) of the same variant and seed on A, then trains on its own tasks; `evaluate_on`
#   (and `after`) name extra test sets every checkpoint plays (eval_on/{target}/v{k}).
# - Voyager truncation (appendix F, table 8): analysis.truncation re-evaluates a final library showing the
#   actor only its last N skills; the hidden ones stay in the namespace, callable from visible ones.


ruleorder: continue_library > init_library


rule continue_library:
    input:
        lambda w: f"{RUN.format(bench=BENCHMARKS[w.bench].after, variant=w.variant, seed=w.seed)}/library/v{PROTOCOL.n_cycles}/manifest.json",
    output:
        f"{RUN}/library/v0/manifest.json",
    wildcard_constraints:
        bench="|".join(PHASED) or "(?!)",
    params:
        # as init_library's: v0 records the settings of the run it starts
        settings=settings("speedrunner", "run"),
    log:
        f"{RUN_LOG}/continue_library.log",
    benchmark:
        f"{RUN_TIMING}/continue_library.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/continue_library.py"


rule evaluate_on:
    input:
        tasks=f"{TASKS}/{{target}}/seed{{seed}}/test.json",
        library=f"{RUN}/library/v{{k}}/manifest.json",
    output:
        episodes=f"{RUN}/eval_on/{{target}}/v{{k}}/episodes.parquet",
        steps=f"{RUN}/eval_on/{{target}}/v{{k}}/steps.parquet",
        llm_calls=f"{RUN}/eval_on/{{target}}/v{{k}}/llm_calls.parquet",
        skill_calls=f"{RUN}/eval_on/{{target}}/v{{k}}/skill_calls.parquet",
    wildcard_constraints:
        target="|".join(BENCHMARKS),
    params:
        settings=settings("speedrunner", "run"),
        target=settings("speedrunner", "instance", bench="target"),
        wall_s=config["budgets"]["rollout_wall_s"],
    resources:
        llm=1,
        mem_mb=job_mem_mb("evaluate"),
        cpus_per_task=job_cpus("evaluate"),
        runtime=240,  # minutes; profiles/slurm/config.yaml's set-resources decides (tests/project/test_packaging.py)
    log:
        f"{RUN_LOG}/evaluate_on_{{target}}_v{{k}}.log",
    benchmark:
        f"{RUN_TIMING}/evaluate_on_{{target}}_v{{k}}.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/evaluate_on.py"


rule evaluate_truncated:
    input:
        tasks=f"{TASKS}/{{bench}}/seed{{seed}}/test.json",
        library=f"{RUN}/library/v{PROTOCOL.n_cycles}/manifest.json",
    output:
        library=f"{RUN}/truncated/n{{n}}/library/manifest.json",
        episodes=f"{RUN}/truncated/n{{n}}/episodes.parquet",
        steps=f"{RUN}/truncated/n{{n}}/steps.parquet",
        llm_calls=f"{RUN}/truncated/n{{n}}/llm_calls.parquet",
        skill_calls=f"{RUN}/truncated/n{{n}}/skill_calls.parquet",
    wildcard_constraints:
        n=r"\d+|all",
    params:
        settings=settings("speedrunner", "run"),
        options=TRUNCATION["options"] if TRUNCATION else {},
        wall_s=config["budgets"]["rollout_wall_s"],
    resources:
        llm=1,
        mem_mb=job_mem_mb("evaluate"),
        cpus_per_task=job_cpus("evaluate"),
        runtime=240,  # minutes; profiles/slurm/config.yaml's set-resources decides (tests/project/test_packaging.py)
    log:
        f"{RUN_LOG}/evaluate_truncated_n{{n}}.log",
    benchmark:
        f"{RUN_TIMING}/evaluate_truncated_n{{n}}.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/evaluate_truncated.py"
