# SkillScaffold (seed 002): skill-free Scouts -> evidence -> candidate cards -> paired scores ->
# utility -> positive-gated selection -> Post-Scouts; plus the validation experiment (section 5.4) that
# evaluates every candidate with separate downstream rollouts. Target: scaffold_all.
# Paths: results/scaffold/{sbench}/... (per benchmark) and results/scaffold/{sbench}/{svariant}/... (grp|anc).
# GRPO joint training (section 4.5, algorithm 1; target scaffold_grpo): iteration k of utility variant v's
# training chain on benchmark b is the scaffold instance "b@v{k}" (its own query batch, played, carded and
# scored by policy checkpoint k; 0 is llm.model), and update k+1 trains checkpoint k on that iteration's records.
# Here: Scouts to figures; grpo.smk: training and internalization; heldout.smk: held-out evaluation; common.smk:
# what they share.


rule scaffold_all:
    input:
        f"{TABLES}/scaffold_rules.csv",
        f"{TABLES}/scaffold_quintiles.csv",
        f"{TABLES}/scaffold_exploration.csv",
        f"{TABLES}/scaffold_pilot_rollout.csv",
        f"{TABLES}/scaffold_pilot_competence.csv",
        f"{FIGURES}/scaffold_validation.png",
        f"{FIGURES}/scaffold_exploration.png",
        f"{FIGURES}/scaffold_figure3b.png",


rule scaffold_queries:
    output:
        queries=f"{SC}/queries.json",
        library=f"{SC}/library/v0/manifest.json",
    params:
        # a training iteration's batch: a seed of its own, shared by the chains of every utility variant
        task_seed=scaffold_task_seed,
        settings=settings("scaffold", "play"),
        policy=scaffold_policy,
    log:
        "logs/scaffold/{sbench}/queries.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/{{sbench}}/queries.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/queries.py"


rule scaffold_scout:
    input:
        queries=f"{SC}/queries.json",
        library=f"{SC}/library/v0/manifest.json",
        policy=scaffold_policy_input,
    output:
        episodes=f"{SC}/scouts/s{{i}}/episodes.parquet",
    params:
        wall_s=SC_WALL,
        settings=settings("scaffold", "play"),
        policy=scaffold_policy,
    resources:
        llm=scaffold_llm_units,
        mem_mb=scaffold_mem_mb(),
        cpus_per_task=SC_CPUS,
        runtime=480,  # minutes; the Slurm profile decides
    log:
        "logs/scaffold/{sbench}/scout_{i}.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/{{sbench}}/scout_{{i}}.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/scout.py"


rule scaffold_evidence:
    input:
        scouts=SC_SCOUTS,
    output:
        f"{SCV}/evidence.parquet",
    params:
        settings=settings("scaffold", "evidence"),
        policy=scaffold_policy,
    log:
        "logs/scaffold/{sbench}/{svariant}/evidence.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/{{sbench}}/{{svariant}}/evidence.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/evidence.py"


rule scaffold_generate:
    input:
        evidence=f"{SCV}/evidence.parquet",
        policy=scaffold_policy_input,
    output:
        candidates=f"{SCV}/candidates.parquet",
        llm_calls=f"{SCV}/generate/llm_calls.parquet",
    params:
        # scaffold.executor's per-benchmark sampling (table 5: Executor tokens and top-p) is the Executor's
        settings=settings("scaffold", "generate"),
        policy=scaffold_policy,
    resources:
        llm=scaffold_llm_units,
        mem_mb=scaffold_mem_mb(plays=False),
        cpus_per_task=SC_CPUS,
        runtime=240,  # minutes; the Slurm profile decides
    log:
        "logs/scaffold/{sbench}/{svariant}/generate.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/{{sbench}}/{{svariant}}/generate.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/generate.py"


rule scaffold_score_free:
    input:
        scouts=SC_SCOUTS,
        library=f"{SC}/library/v0/manifest.json",
        policy=scaffold_policy_input,
    output:
        f"{SC}/scores_free.parquet",
    params:
        settings=settings("scaffold", "score"),
        policy=scaffold_policy,
    resources:
        llm=scaffold_scorer_units,
        # the scorer on the policy's server, or transformers in this job
        mem_mb=scaffold_mem_mb(plays=False) if SC_SCORER_LLM else 8000,
        cpus_per_task=SC_CPUS if SC_SCORER_LLM else 1,
        runtime=240,  # minutes; the Slurm profile decides
    log:
        "logs/scaffold/{sbench}/score_free.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/{{sbench}}/score_free.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/score_free.py"


rule scaffold_score:
    input:
        scouts=SC_SCOUTS,
        library=f"{SC}/library/v0/manifest.json",
        candidates=f"{SCV}/candidates.parquet",
        policy=scaffold_policy_input,
    output:
        f"{SCV}/scores.parquet",
    params:
        settings=settings("scaffold", "score"),
        policy=scaffold_policy,
    resources:
        llm=scaffold_scorer_units,
        # the scorer on the policy's server, or transformers in this job
        mem_mb=scaffold_mem_mb(plays=False) if SC_SCORER_LLM else 8000,
        cpus_per_task=SC_CPUS if SC_SCORER_LLM else 1,
        runtime=240,  # minutes; the Slurm profile decides
    log:
        "logs/scaffold/{sbench}/{svariant}/score.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/{{sbench}}/{{svariant}}/score.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/score.py"


rule scaffold_utility:
    input:
        scouts=SC_SCOUTS,
        candidates=f"{SCV}/candidates.parquet",
        scores_free=f"{SC}/scores_free.parquet",
        scores=f"{SCV}/scores.parquet",
    output:
        f"{SCV}/utilities.parquet",
    log:
        "logs/scaffold/{sbench}/{svariant}/utility.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/{{sbench}}/{{svariant}}/utility.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/utility.py"


rule scaffold_select:
    input:
        scouts=SC_SCOUTS,
        candidates=scaffold_base("candidates.parquet"),
        utilities=scaffold_base("utilities.parquet"),
    output:
        f"{SCV}/selection.parquet",
    params:
        threshold=SCAFFOLD.threshold,
        settings=settings("scaffold", "select"),
        policy=scaffold_policy,
    log:
        "logs/scaffold/{sbench}/{svariant}/select.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/{{sbench}}/{{svariant}}/select.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/select.py"


rule scaffold_post_scout:
    input:
        # plain GRPO has no Generator: its Post-Scouts play the iteration's queries skill-free
        selection=scaffold_post_selection,
        queries=f"{SC}/queries.json",
        library=f"{SC}/library/v0/manifest.json",
        policy=scaffold_policy_input,
    output:
        episodes=f"{SCV}/post/l{{i}}/episodes.parquet",
    params:
        wall_s=SC_WALL,
        # table 3's "Generator learning without injection": a training chain's Post-Scouts stay skill-free
        inject=scaffold_inject,
        settings=settings("scaffold", "play"),
        policy=scaffold_policy,
    resources:
        llm=scaffold_llm_units,
        mem_mb=scaffold_mem_mb(),
        cpus_per_task=SC_CPUS,
        runtime=480,  # minutes; the Slurm profile decides
    log:
        "logs/scaffold/{sbench}/{svariant}/post_scout_{i}.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/{{sbench}}/{{svariant}}/post_scout_{{i}}.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/post_scout.py"


rule scaffold_eval_free:
    input:
        queries=f"{SC}/queries.json",
        library=f"{SC}/library/v0/manifest.json",
    output:
        episodes=f"{SC}/eval_free/k{{i}}/episodes.parquet",
    params:
        wall_s=SC_WALL,
        settings=settings("scaffold", "play"),
        policy=scaffold_policy,
    resources:
        llm=scaffold_llm_units,
        mem_mb=scaffold_mem_mb(),
        cpus_per_task=SC_CPUS,
        runtime=480,  # minutes; the Slurm profile decides
    log:
        "logs/scaffold/{sbench}/eval_free_{i}.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/{{sbench}}/eval_free_{{i}}.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/eval_free.py"


rule scaffold_eval:
    input:
        candidates=f"{SCV}/candidates.parquet",
        library=f"{SC}/library/v0/manifest.json",
    output:
        episodes=f"{SCV}/eval/k{{i}}/episodes.parquet",
    params:
        wall_s=SC_WALL,
        settings=settings("scaffold", "play"),
        policy=scaffold_policy,
    resources:
        llm=scaffold_llm_units,
        mem_mb=scaffold_mem_mb(),
        cpus_per_task=SC_CPUS,
        runtime=480,  # minutes; the Slurm profile decides
    log:
        "logs/scaffold/{sbench}/{svariant}/eval_{i}.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/{{sbench}}/{{svariant}}/eval_{{i}}.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/eval.py"


rule scaffold_tables:
    input:
        utilities=scaffold_files(f"{SCV}/utilities.parquet"),
        selections=scaffold_files(f"{SCV}/selection.parquet", SCAFFOLD.selection_variants),
        post=[f for i in range(SCAFFOLD.n_post)
              for f in scaffold_files(f"{SCV}/post/l{i}/episodes.parquet", SCAFFOLD.selection_variants)],
        evals=[f for i in range(SCAFFOLD.n_eval) for f in scaffold_files(f"{SCV}/eval/k{i}/episodes.parquet")],
        # k < n_eval: the skill-free baseline; the next n_probes: figure 3(b)'s independent competence probes
        eval_free=[f"{Instance(b).folder}/eval_free/k{i}/episodes.parquet" for b in SC_BENCH
                   for i in range(SCAFFOLD.n_eval + SCAFFOLD.n_probes)],
    output:
        rules=report(f"{TABLES}/scaffold_rules.csv", caption="../../report/scaffold_rules.rst", category="SkillScaffold"),
        quintiles=report(f"{TABLES}/scaffold_quintiles.csv", caption="../../report/scaffold_quintiles.rst", category="SkillScaffold"),
        exploration=report(f"{TABLES}/scaffold_exploration.csv", caption="../../report/scaffold_exploration.rst", category="SkillScaffold"),
        evals=f"{SCAFFOLD_RESULTS}/evaluations.csv",
        pilot_rollout=report(f"{TABLES}/scaffold_pilot_rollout.csv", category="SkillScaffold"),
        pilot_competence=report(f"{TABLES}/scaffold_pilot_competence.csv", caption="../../report/scaffold_pilot_competence.rst", category="SkillScaffold"),
    params:
        variants=list(SCAFFOLD.variants),
        threshold=SCAFFOLD.threshold,
        n_eval=SCAFFOLD.n_eval,
        n_probes=SCAFFOLD.n_probes,
        pilot_ks=list(SCAFFOLD.figure2_ks),  # figure 2's K, each K <= n_eval (2(a) where 2K <= n_eval)
        interval=SCAFFOLD.bootstrap_interval,
    log:
        "logs/scaffold/tables.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/tables.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/tables.py"


rule scaffold_figures:
    input:
        rules=f"{TABLES}/scaffold_rules.csv",
        quintiles=f"{TABLES}/scaffold_quintiles.csv",
        exploration=f"{TABLES}/scaffold_exploration.csv",
        competence=f"{TABLES}/scaffold_pilot_competence.csv",
    output:
        validation=report(f"{FIGURES}/scaffold_validation.png", caption="../../report/scaffold_validation.rst", category="SkillScaffold"),
        exploration=report(f"{FIGURES}/scaffold_exploration.png", caption="../../report/scaffold_exploration_figure.rst", category="SkillScaffold"),
        competence=report(f"{FIGURES}/scaffold_figure3b.png", caption="../../report/scaffold_pilot_competence.rst", category="SkillScaffold"),
    log:
        "logs/scaffold/figures.log",
    benchmark:
        f"{SCAFFOLD_TIMINGS}/figures.tsv"
    conda:
        "../../envs/scaffold.yaml"
    script:
        "../../workflow/scripts/scaffold/figures.py"


if SCAFFOLD.webshop_data:

    rule scaffold_webshop_split:
        """WebShop's category-generalization split (seed 002, appendix A.1) from the user's WebShop data."""
        input:
            products=os.path.join(SCAFFOLD.webshop_data, "items_shuffle.json"),
            human=os.path.join(SCAFFOLD.webshop_data, "items_human_ins.json"),
        output:
            splits=f"{SCAFFOLD_RESULTS}/webshop/splits.json",
            counts=report(f"{TABLES}/scaffold_webshop_split.csv", category="SkillScaffold"),
        log:
            "logs/scaffold/webshop_split.log",
        benchmark:
            f"{SCAFFOLD_TIMINGS}/webshop_split.tsv"
        conda:
            "../../envs/scaffold.yaml"
        script:
            "../../workflow/scripts/scaffold/webshop_split.py"
