# Held-out evaluation (appendix A.1): every policy played skill-free on each benchmark's held-out splits.
rule scaffold_heldout:
    input:
        SC_HELDOUT_TARGETS,


rule scaffold_heldout_tasks:
    output:
        tasks=f"{SC_HO}/tasks.json",
        library=f"{SC_HO}/library/v0/manifest.json",
    params:
        task_seed=SC_TASK_SEED,
        settings=settings("scaffold", "heldout"),
        policy="",
    log:
        "logs/scaffold/{hbench}/heldout_tasks.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/{{hbench}}/heldout_tasks.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/heldout_tasks.py"


rule scaffold_heldout_eval:
    input:
        tasks=f"{SC_HO}/tasks.json",
        library=f"{SC_HO}/library/v0/manifest.json",
        policy=scaffold_heldout_input,
        card=scaffold_heldout_card,
    output:
        episodes=f"{SC_HO}/{{hpolicy}}/episodes.parquet",
    params:
        policy=scaffold_heldout_policy,
        rollouts=SCAFFOLD.heldout.rollouts,
        wall_s=SC_WALL,
        settings=settings("scaffold", "heldout"),
    resources:
        llm=scaffold_heldout_units,
        mem_mb=scaffold_mem_mb("hbench"),
        cpus_per_task=SC_CPUS,
        runtime=480,  # minutes; the Slurm profile decides
    log:
        "logs/scaffold/{hbench}/heldout/{hpolicy}.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/{{hbench}}/heldout/{{hpolicy}}.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/heldout_eval.py"


rule scaffold_heldout_tables:
    input:
        episodes=[f"{pol.folder}/episodes.parquet" for b in SC_BENCH for pol in SC_HO_POLICIES[b]],
        # figure 7: the skill-free Scouts of every training iteration; figure 1: the injections
        scouts=scaffold_chain_files("scouts/s{i}/episodes.parquet"),
        selections=sorted(set(scaffold_chain_files("{c}/selection.parquet",
                                                   [c for c in SCAFFOLD.chains if c.of]))),
        # figures 6 and 8-12: the Post-Scouts of every SkillScaffold chain's iterations
        post=[f"{Instance(b, c.name, j).folder}/{c.name}/post/l{i}/episodes.parquet" for b in SC_BENCH
              for c in SCAFFOLD.chains if c.of for j in range(SC_STEPS[b]) for i in range(SCAFFOLD.n_post)],
    output:
        heldout=report(f"{TABLES}/scaffold_heldout.csv", caption="../../report/scaffold_heldout.rst", category="SkillScaffold"),
        table1=report(f"{TABLES}/scaffold_table1.csv", caption="../../report/scaffold_heldout.rst", category="SkillScaffold"),
        table2=report(f"{TABLES}/scaffold_table2.csv", caption="../../report/scaffold_heldout.rst", category="SkillScaffold"),
        table3=report(f"{TABLES}/scaffold_table3.csv", caption="../../report/scaffold_heldout.rst", category="SkillScaffold"),
        table6=report(f"{TABLES}/scaffold_table6.csv", caption="../../report/scaffold_heldout.rst", category="SkillScaffold"),
        curve=f"{TABLES}/scaffold_training_curve.csv",
        injection=f"{TABLES}/scaffold_injection.csv",
        exploration=f"{TABLES}/scaffold_training_exploration.csv",
    params:
        threshold=SCAFFOLD.threshold,
        # plain values (Snakemake compares them between runs): each chain's switches, each benchmark's env
        chains=[dataclasses.asdict(c) for c in SCAFFOLD.chains],
        envs={b: config["benchmarks"][b]["env"] for b in SC_BENCH},
    log:
        "logs/scaffold/heldout_tables.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/heldout_tables.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/heldout_tables.py"


rule scaffold_heldout_figures:
    input:
        heldout=f"{TABLES}/scaffold_heldout.csv",
        curve=f"{TABLES}/scaffold_training_curve.csv",
        injection=f"{TABLES}/scaffold_injection.csv",
        exploration=f"{TABLES}/scaffold_training_exploration.csv",
    output:
        figure1=report(f"{FIGURES}/scaffold_figure1.png", caption="../../report/scaffold_heldout.rst", category="SkillScaffold"),
        figure6=report(f"{FIGURES}/scaffold_figure6.png", caption="../../report/scaffold_heldout.rst", category="SkillScaffold"),
        figure7=report(f"{FIGURES}/scaffold_figure7.png", caption="../../report/scaffold_heldout.rst", category="SkillScaffold"),
        figure8=report(f"{FIGURES}/scaffold_figure8.png", caption="../../report/scaffold_heldout.rst", category="SkillScaffold"),
    log:
        "logs/scaffold/heldout_figures.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/heldout_figures.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/heldout_figures.py"
