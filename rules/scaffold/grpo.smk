# GRPO joint training (section 4.5): update k trains checkpoint k-1 on iteration k-1 of its chain; not part of
# scaffold_all. Held-out evaluation and figures 6-8 belong to it (SC_HELDOUT_TARGETS).
rule scaffold_grpo:
    input:
        scaffold_last_checkpoints(),
        f"{TABLES}/scaffold_internalization.csv",
        SC_HELDOUT_TARGETS,


rule scaffold_grpo_update:
    input:
        scouts=scaffold_previous(*(f"scouts/s{i}/episodes.parquet" for i in range(SCAFFOLD.n_scouts))),
        post=scaffold_previous(*(f"{{svariant}}/post/l{i}/episodes.parquet" for i in range(SCAFFOLD.n_post))),
        # the cards of the chain's utility variant (a trained ablation selects among them); plain GRPO has none
        candidates=scaffold_cards("candidates.parquet"),
        utilities=scaffold_cards("utilities.parquet"),
        generator_calls=scaffold_cards("generate/llm_calls.parquet"),
        policy=scaffold_update_input,
    output:
        directory(SC_CHECKPOINT),
    wildcard_constraints:
        sbench="|".join(SC_BENCH) or "none",
        svariant="|".join(SC_CHAIN_NAMES),
        k=r"[1-9]\d*",
    params:
        # the chain's own switches (table 3's training ablations; plain GRPO has neither) are in the settings
        settings=settings("scaffold", "update"),
        policy=scaffold_update_policy,
        base_model=SCAFFOLD.training.get("model") or SC_LLM.model,
        m=scaffold_m,
        group_size=scaffold_group_size,
        use_cpu=not SC_GPU,
    # torch's threads: Snakemake sets OMP_NUM_THREADS to the job's threads, 1 where a rule names none (the CPU
    # update then ran on one core of two); llm.threads, as the scorer's
    threads: SC_LLM.threads
    resources:
        gpu=1 if SC_GPU else 0,
        llm=scaffold_torch_units,
        mem_mb=64000 if SC_GPU else 12000,
        runtime=480,  # minutes; the Slurm profile decides
    log:
        "logs/scaffold/{sbench}/{svariant}/grpo_update_{k}.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/{{sbench}}/{{svariant}}/grpo_update_{{k}}.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/grpo_update.py"


# Internalization (table 4): the cohort of the first `training.cohort_iterations` iterations' queries that
# skill-assisted exploration helped, played skill-free by the checkpoint that chose it and by each later one.
rule scaffold_cohort_early:
    input:
        selections=[f"{SCV}/selection.parquet"],
        post=[f"{SCV}/post/l{i}/episodes.parquet" for i in range(SCAFFOLD.n_post)],
        library=f"{SC}/library/v0/manifest.json",
        policy=scaffold_policy_input,
    output:
        episodes=f"{SCV}/cohort_early/episodes.parquet",
    params:
        rollouts=SCAFFOLD.n_scouts,
        wall_s=SC_WALL,
        settings=settings("scaffold", "play"),
        policy=scaffold_policy,
    resources:
        llm=scaffold_llm_units,
        mem_mb=scaffold_mem_mb(),
        cpus_per_task=SC_CPUS,
        runtime=480,  # minutes; the Slurm profile decides
    log:
        "logs/scaffold/{sbench}/{svariant}/cohort_early.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/{{sbench}}/{{svariant}}/cohort_early.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/cohort_eval.py"


rule scaffold_cohort_eval:
    input:
        selections=scaffold_cohort_files("{v}/selection.parquet"),
        post=scaffold_cohort_files("{v}/post/l{i}/episodes.parquet"),
        library=scaffold_chain_library,
        policy=SC_CHECKPOINT,
    output:
        episodes=f"{SC_COHORT}/episodes.parquet",
    wildcard_constraints:
        sbench="|".join(SC_BENCH) or "none",
        svariant="|".join(SCAFFOLD.variants),
        k=r"[1-9]\d*",
    params:
        settings=settings("scaffold", "play"),
        policy=scaffold_cohort_policy,
        rollouts=SCAFFOLD.n_scouts,
        wall_s=SC_WALL,
    resources:
        llm=SC_LLM.slots,  # a server of its own (see scaffold_llm_units)
        mem_mb=scaffold_mem_mb(),
        cpus_per_task=SC_CPUS,
        runtime=480,  # minutes; the Slurm profile decides
    log:
        "logs/scaffold/{sbench}/{svariant}/cohort_eval_{k}.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/{{sbench}}/{{svariant}}/cohort_eval_{{k}}.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/cohort_eval.py"


rule scaffold_cohort_control:
    """Table 4's plain-GRPO control: chain {svariant}'s cohort played skill-free by plain GRPO's checkpoint k (same
    query batches, no skill pathway), so a reader can tell internalization from what ordinary RL gives the cohort."""
    input:
        selections=scaffold_cohort_files("{v}/selection.parquet"),
        post=scaffold_cohort_files("{v}/post/l{i}/episodes.parquet"),
        library=scaffold_chain_library,
        policy=scaffold_control_policy,
    output:
        episodes=f"{SC_COHORT_CONTROL}/episodes.parquet",
    wildcard_constraints:
        sbench="|".join(SC_BENCH) or "none",
        svariant="|".join(SCAFFOLD.variants),
        k=r"[1-9]\d*",
    params:
        settings=settings("scaffold", "play"),
        policy=scaffold_control_policy,
        rollouts=SCAFFOLD.n_scouts,
        wall_s=SC_WALL,
        played_by=BASELINE,
    resources:
        llm=SC_LLM.slots,  # a server of its own (see scaffold_llm_units)
        mem_mb=scaffold_mem_mb(),
        cpus_per_task=SC_CPUS,
        runtime=480,  # minutes; the Slurm profile decides
    log:
        "logs/scaffold/{sbench}/{svariant}/cohort_control_{k}.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/{{sbench}}/{{svariant}}/cohort_control_{{k}}.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/cohort_eval.py"


rule scaffold_internalization:
    input:
        selections=[f"{Instance(b, v, j).folder}/{v}/selection.parquet" for b, v in SC_CHAINS
                    for j in range(SC_COHORT_ITERS)],
        post=[f"{Instance(b, v, j).folder}/{v}/post/l{i}/episodes.parquet" for b, v in SC_CHAINS
              for j in range(SC_COHORT_ITERS) for i in range(SCAFFOLD.n_post)],
        scouts=[f"{Instance(b, v, j).folder}/scouts/s{i}/episodes.parquet" for b, v in SC_CHAINS
                for j in range(SC_COHORT_ITERS) for i in range(SCAFFOLD.n_scouts)],
        early=[f"{Instance(b, v, j).folder}/{v}/cohort_early/episodes.parquet" for b, v in SC_CHAINS
               for j in range(SC_COHORT_ITERS)],
        later=[f"{CohortEval(b, v, k).folder}/episodes.parquet" for b, v in SC_CHAINS for k in scaffold_later(b)],
        # with plain GRPO trained (training.baseline): its checkpoints on the same cohorts, the control rows
        control=[f"{CohortEval(b, v, k, control=True).folder}/episodes.parquet" for b, v in SC_CHAINS
                 for k in scaffold_later(b) if any(c.name == BASELINE for c in SCAFFOLD.chains)],
    params:
        interval=SCAFFOLD.bootstrap_interval,
    output:
        report(f"{TABLES}/scaffold_internalization.csv", caption="../../report/scaffold_internalization.rst", category="SkillScaffold"),
    log:
        "logs/scaffold/internalization.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/internalization.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/internalization.py"
