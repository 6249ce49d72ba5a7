# The online wake/sleep loop: rollout batch k uses library v{k}; induce k writes v{k+1} from v{k} and
# every training batch <= k of the same run.


rule init_library:
    output:
        # manifest.json is written last and marks a complete version; the other two are declared so that
        # nothing in results/ is written behind Snakemake's back.
        f"{RUN}/library/v0/manifest.json",
        f"{RUN}/library/v0/skills.py",
        f"{RUN}/library/v0/notes.md",
    params:
        # What every job of the run reads; the manifest keeps it, so a changed setting reruns the whole
        # chain here, and a run folder made under other settings is refused, never extended silently.
        settings=settings("speedrunner", "run"),
    log:
        f"{RUN_LOG}/init_library.log",
    benchmark:
        f"{RUN_TIMING}/init_library.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/init_library.py"


rule rollout:
    input:
        tasks=f"{TASKS}/{{bench}}/seed{{seed}}/train.json",
        library=f"{RUN}/library/v{{k}}/manifest.json",
        previous_batch=previous_batch,
    output:
        episodes=f"{RUN}/train/batch{{k}}/episodes.parquet",
        steps=f"{RUN}/train/batch{{k}}/steps.parquet",
        llm_calls=f"{RUN}/train/batch{{k}}/llm_calls.parquet",
        skill_calls=f"{RUN}/train/batch{{k}}/skill_calls.parquet",
    params:
        settings=settings("speedrunner", "run"),
        sleep_every=PROTOCOL.sleep_every,
        wall_s=config["budgets"]["rollout_wall_s"],
    resources:
        llm=llm_units(PROTOCOL.sleep_every, "train"),
        mem_mb=job_mem_mb("rollout", llm_units(PROTOCOL.sleep_every, "train")),
        cpus_per_task=job_cpus("rollout"),
        runtime=480,  # minutes; profiles/slurm/config.yaml's set-resources decides (tests/project/test_packaging.py)
    log:
        f"{RUN_LOG}/rollout_batch{{k}}.log",
    benchmark:
        f"{RUN_TIMING}/rollout_batch{{k}}.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/rollout.py"


rule induce:
    input:
        library=lambda w: run_path(w, f"library/v{int(w.k) - 1}/manifest.json"),
        previous_batch=previous_batch,
    output:
        library=f"{RUN}/library/v{{k}}/manifest.json",
        skills=f"{RUN}/library/v{{k}}/skills.py",
        notes=f"{RUN}/library/v{{k}}/notes.md",
        llm_calls=f"{RUN}/induce/v{{k}}/llm_calls.parquet",
        transcript=f"{RUN}/induce/v{{k}}/transcript.jsonl",
    params:
        settings=settings("speedrunner", "run"),
        request_budget=config["budgets"]["inducer_requests"],
        trajectory_tokens=trajectory_tokens(config),
        # config section inducer: only the sleep phases read it
        inducer=settings("speedrunner", "sleep"),
    wildcard_constraints:
        k=r"[1-9]\d*",  # v0 comes from init_library
        variant=variants_whose_sleep(works=True),
    resources:
        # a model of its own (inducer.model) runs beside the shared server's: nothing else runs meanwhile
        llm=LLM.slots if INDUCER.own_server(LLM) else 1,
        mem_mb=job_mem_mb("induce"),
        cpus_per_task=job_cpus("induce"),
        runtime=240,  # minutes; profiles/slurm/config.yaml's set-resources decides (tests/project/test_packaging.py)
    log:
        f"{RUN_LOG}/induce_v{{k}}.log",
    benchmark:
        f"{RUN_TIMING}/induce_v{{k}}.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/induce.py"


# The sleep phase of a method that learns nothing between batches (react, reference): the same recipe, which
# carries the library forward, run where Snakemake runs (a cluster gets no job asking for a model's resources).
use rule induce as carry_library with:
    wildcard_constraints:
        k=r"[1-9]\d*",
        variant=variants_whose_sleep(works=False),
    resources:
        llm=0,


localrules:
    carry_library,
