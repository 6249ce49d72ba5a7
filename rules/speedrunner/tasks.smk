rule sample_tasks:
    output:
        f"{TASKS}/{{bench}}/seed{{seed}}/{{split}}.json",
    params:
        settings=settings("speedrunner", "tasks"),
        # The splits never overlap (Benchmark.sample_tasks), so each is drawn alone: a new n_test leaves
        # the training list, and every rollout that reads it, untouched.
        n_tasks=lambda w: PROTOCOL.train_rollouts if w.split == "train" else PROTOCOL.n_test,
        task_seed=PROTOCOL.task_seed,
    log:
        "logs/sample_tasks/{bench}_seed{seed}_{split}.log",
    benchmark:
        f"{TIMINGS}/sample_tasks/{{bench}}_seed{{seed}}_{{split}}.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/sample_tasks.py"
