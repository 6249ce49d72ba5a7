# SkillScaffold (seed 002, issue 6): skill-free Scouts -> evidence -> candidate cards -> paired scores ->
# utility -> positive-gated selection -> Post-Scouts; plus the validation experiment (section 5.4) that
# evaluates every candidate with separate downstream rollouts. Target: scaffold_all.
# Paths: results/scaffold/{sbench}/... (per benchmark) and results/scaffold/{sbench}/{svariant}/... (grp|anc).
# GRPO joint training (section 4.5, algorithm 1; target scaffold_grpo): iteration k of utility variant v's
# training chain on benchmark b is the scaffold instance "b@v{k}" (its own query batch, played, carded and
# scored by policy checkpoint k; 0 is llm.model), and update k+1 trains checkpoint k on that iteration's records.
include: "scaffold_common.smk"


rule scaffold_all:
    input:
        "results/tables/scaffold_rules.csv",
        "results/tables/scaffold_quintiles.csv",
        "results/tables/scaffold_exploration.csv",
        "results/tables/scaffold_pilot_rollout.csv",
        "results/tables/scaffold_pilot_competence.csv",
        "results/figures/scaffold_validation.png",
        "results/figures/scaffold_exploration.png",
        "results/figures/scaffold_figure3b.png",


rule scaffold_queries:
    output:
        queries=f"{SC}/queries.json",
        library=f"{SC}/library/v0/manifest.json",
    wildcard_constraints:
        **SC_CONSTRAINTS,
    params:
        # a training iteration's batch: a seed of its own, shared by the chains of every utility variant
        task_seed=scaffold_task_seed,
        settings=settings("scaffold", "play"),
        policy=scaffold_policy,
    log:
        "logs/scaffold/{sbench}/queries.log",
    benchmark:
        "results/timings/scaffold/{sbench}/queries.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_queries.py"


rule scaffold_scout:
    input:
        queries=f"{SC}/queries.json",
        library=f"{SC}/library/v0/manifest.json",
        policy=scaffold_policy_input,
    output:
        episodes=f"{SC}/scouts/s{{i}}/episodes.parquet",
    wildcard_constraints:
        **SC_CONSTRAINTS,
    params:
        wall_s=SC_WALL,
        settings=settings("scaffold", "play"),
        policy=scaffold_policy,
    resources:
        llm=scaffold_llm_units,
    log:
        "logs/scaffold/{sbench}/scout_{i}.log",
    benchmark:
        "results/timings/scaffold/{sbench}/scout_{i}.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_scout.py"


rule scaffold_evidence:
    input:
        scouts=SC_SCOUTS,
    output:
        f"{SCV}/evidence.parquet",
    wildcard_constraints:
        **SC_CONSTRAINTS,
    params:
        settings=settings("scaffold", "evidence"),
        policy=scaffold_policy,
    log:
        "logs/scaffold/{sbench}/{svariant}/evidence.log",
    benchmark:
        "results/timings/scaffold/{sbench}/{svariant}/evidence.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_evidence.py"


rule scaffold_generate:
    input:
        evidence=f"{SCV}/evidence.parquet",
        policy=scaffold_policy_input,
    output:
        candidates=f"{SCV}/candidates.parquet",
        llm_calls=f"{SCV}/generate/llm_calls.parquet",
    wildcard_constraints:
        **SC_CONSTRAINTS,
    params:
        # scaffold.executor's per-benchmark sampling (table 5: Executor tokens and top-p) is the Executor's
        settings=settings("scaffold", "generate"),
        policy=scaffold_policy,
    resources:
        llm=scaffold_llm_units,
    log:
        "logs/scaffold/{sbench}/{svariant}/generate.log",
    benchmark:
        "results/timings/scaffold/{sbench}/{svariant}/generate.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_generate.py"


rule scaffold_score_free:
    input:
        scouts=SC_SCOUTS,
        library=f"{SC}/library/v0/manifest.json",
        policy=scaffold_policy_input,
    output:
        f"{SC}/scores_free.parquet",
    wildcard_constraints:
        **SC_CONSTRAINTS,
    params:
        settings=settings("scaffold", "score"),
        policy=scaffold_policy,
    resources:
        llm=scaffold_scorer_units,
        mem_mb=8000,
    log:
        "logs/scaffold/{sbench}/score_free.log",
    benchmark:
        "results/timings/scaffold/{sbench}/score_free.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_score_free.py"


rule scaffold_score:
    input:
        scouts=SC_SCOUTS,
        library=f"{SC}/library/v0/manifest.json",
        candidates=f"{SCV}/candidates.parquet",
        policy=scaffold_policy_input,
    output:
        f"{SCV}/scores.parquet",
    wildcard_constraints:
        **SC_CONSTRAINTS,
    params:
        settings=settings("scaffold", "score"),
        policy=scaffold_policy,
    resources:
        llm=scaffold_scorer_units,
        mem_mb=8000,
    log:
        "logs/scaffold/{sbench}/{svariant}/score.log",
    benchmark:
        "results/timings/scaffold/{sbench}/{svariant}/score.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_score.py"


rule scaffold_utility:
    input:
        scouts=SC_SCOUTS,
        candidates=f"{SCV}/candidates.parquet",
        scores_free=f"{SC}/scores_free.parquet",
        scores=f"{SCV}/scores.parquet",
    output:
        f"{SCV}/utilities.parquet",
    wildcard_constraints:
        **SC_CONSTRAINTS,
    log:
        "logs/scaffold/{sbench}/{svariant}/utility.log",
    benchmark:
        "results/timings/scaffold/{sbench}/{svariant}/utility.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_utility.py"


rule scaffold_select:
    input:
        scouts=SC_SCOUTS,
        candidates=scaffold_base("candidates.parquet"),
        utilities=scaffold_base("utilities.parquet"),
    output:
        f"{SCV}/selection.parquet",
    wildcard_constraints:
        **SC_CONSTRAINTS,
    params:
        threshold=SCAFFOLD.threshold,
        settings=settings("scaffold", "select"),
        policy=scaffold_policy,
    log:
        "logs/scaffold/{sbench}/{svariant}/select.log",
    benchmark:
        "results/timings/scaffold/{sbench}/{svariant}/select.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_select.py"


rule scaffold_post_scout:
    input:
        # plain GRPO has no Generator: its Post-Scouts play the iteration's queries skill-free
        selection=scaffold_post_selection,
        queries=f"{SC}/queries.json",
        library=f"{SC}/library/v0/manifest.json",
        policy=scaffold_policy_input,
    output:
        episodes=f"{SCV}/post/l{{i}}/episodes.parquet",
    wildcard_constraints:
        **SC_CONSTRAINTS,
    params:
        wall_s=SC_WALL,
        # table 3's "Generator learning without injection": a training chain's Post-Scouts stay skill-free
        inject=scaffold_inject,
        settings=settings("scaffold", "play"),
        policy=scaffold_policy,
    resources:
        llm=scaffold_llm_units,
    log:
        "logs/scaffold/{sbench}/{svariant}/post_scout_{i}.log",
    benchmark:
        "results/timings/scaffold/{sbench}/{svariant}/post_scout_{i}.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_post_scout.py"


rule scaffold_eval_free:
    input:
        queries=f"{SC}/queries.json",
        library=f"{SC}/library/v0/manifest.json",
    output:
        episodes=f"{SC}/eval_free/k{{i}}/episodes.parquet",
    wildcard_constraints:
        **SC_CONSTRAINTS,
    params:
        wall_s=SC_WALL,
        settings=settings("scaffold", "play"),
        policy=scaffold_policy,
    resources:
        llm=scaffold_llm_units,
    log:
        "logs/scaffold/{sbench}/eval_free_{i}.log",
    benchmark:
        "results/timings/scaffold/{sbench}/eval_free_{i}.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_eval_free.py"


rule scaffold_eval:
    input:
        candidates=f"{SCV}/candidates.parquet",
        library=f"{SC}/library/v0/manifest.json",
    output:
        episodes=f"{SCV}/eval/k{{i}}/episodes.parquet",
    wildcard_constraints:
        **SC_CONSTRAINTS,
    params:
        wall_s=SC_WALL,
        settings=settings("scaffold", "play"),
        policy=scaffold_policy,
    resources:
        llm=scaffold_llm_units,
    log:
        "logs/scaffold/{sbench}/{svariant}/eval_{i}.log",
    benchmark:
        "results/timings/scaffold/{sbench}/{svariant}/eval_{i}.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_eval.py"


rule scaffold_tables:
    input:
        utilities=scaffold_files(f"{SCV}/utilities.parquet"),
        selections=scaffold_files(f"{SCV}/selection.parquet", SCAFFOLD.selection_variants),
        post=[f for i in range(SCAFFOLD.n_post)
              for f in scaffold_files(f"{SCV}/post/l{i}/episodes.parquet", SCAFFOLD.selection_variants)],
        evals=[f for i in range(SCAFFOLD.n_eval) for f in scaffold_files(f"{SCV}/eval/k{i}/episodes.parquet")],
        # k < n_eval: the skill-free baseline; the next n_probes: figure 3(b)'s independent competence probes
        eval_free=[f"results/scaffold/{b}/eval_free/k{i}/episodes.parquet" for b in SC_BENCH
                   for i in range(SCAFFOLD.n_eval + SCAFFOLD.n_probes)],
    output:
        rules=report("results/tables/scaffold_rules.csv", caption="../report/scaffold_rules.rst", category="SkillScaffold"),
        quintiles=report("results/tables/scaffold_quintiles.csv", caption="../report/scaffold_quintiles.rst", category="SkillScaffold"),
        exploration=report("results/tables/scaffold_exploration.csv", caption="../report/scaffold_exploration.rst", category="SkillScaffold"),
        evals="results/scaffold/evaluations.csv",
        pilot_rollout=report("results/tables/scaffold_pilot_rollout.csv", category="SkillScaffold"),
        pilot_competence=report("results/tables/scaffold_pilot_competence.csv", caption="../report/scaffold_pilot_competence.rst", category="SkillScaffold"),
    params:
        variants=list(SCAFFOLD.variants),
        threshold=SCAFFOLD.threshold,
        n_eval=SCAFFOLD.n_eval,
        n_probes=SCAFFOLD.n_probes,
        pilot_ks=list(SCAFFOLD.figure2_ks),  # figure 2(a)'s K, each with 2K <= n_eval
        interval=SCAFFOLD.bootstrap_interval,
    log:
        "logs/scaffold/tables.log",
    benchmark:
        "results/timings/scaffold/tables.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_tables.py"


rule scaffold_figures:
    input:
        rules="results/tables/scaffold_rules.csv",
        quintiles="results/tables/scaffold_quintiles.csv",
        exploration="results/tables/scaffold_exploration.csv",
        competence="results/tables/scaffold_pilot_competence.csv",
    output:
        validation=report("results/figures/scaffold_validation.png", caption="../report/scaffold_validation.rst", category="SkillScaffold"),
        exploration=report("results/figures/scaffold_exploration.png", caption="../report/scaffold_exploration_figure.rst", category="SkillScaffold"),
        competence=report("results/figures/scaffold_figure3b.png", caption="../report/scaffold_pilot_competence.rst", category="SkillScaffold"),
    log:
        "logs/scaffold/figures.log",
    benchmark:
        "results/timings/scaffold/figures.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_figures.py"


if SCAFFOLD.webshop_data:

    rule scaffold_webshop_split:
        """WebShop's category-generalization split (seed 002, appendix A.1) from the user's WebShop data."""
        input:
            products=os.path.join(SCAFFOLD.webshop_data, "items_shuffle.json"),
            human=os.path.join(SCAFFOLD.webshop_data, "items_human_ins.json"),
        output:
            splits="results/scaffold/webshop/splits.json",
            counts=report("results/tables/scaffold_webshop_split.csv", category="SkillScaffold"),
        log:
            "logs/scaffold/webshop_split.log",
        benchmark:
            "results/timings/scaffold/webshop_split.tsv"
        conda:
            "../envs/scaffold.yaml"
        script:
            "../workflow/scripts/scaffold_webshop_split.py"


# GRPO joint training (section 4.5): update k trains checkpoint k-1 on iteration k-1 of its chain; not part of
# scaffold_all. Held-out evaluation and figures 6-8 belong to it (SC_HELDOUT_TARGETS).
rule scaffold_grpo:
    input:
        scaffold_last_checkpoints(),
        "results/tables/scaffold_internalization.csv",
        SC_HELDOUT_TARGETS,


rule scaffold_grpo_update:
    input:
        scouts=scaffold_previous(*(f"{SC_CHAIN}/scouts/s{i}/episodes.parquet" for i in range(SCAFFOLD.n_scouts))),
        post=scaffold_previous(*(f"{SC_CHAIN}/{{svariant}}/post/l{i}/episodes.parquet"
                                 for i in range(SCAFFOLD.n_post))),
        # the cards of the chain's utility variant (a trained ablation selects among them); plain GRPO has none
        candidates=scaffold_cards("candidates.parquet"),
        utilities=scaffold_cards("utilities.parquet"),
        generator_calls=scaffold_cards("generate/llm_calls.parquet"),
        policy=scaffold_update_input,
    output:
        directory("results/scaffold/{sbench}/{svariant}/grpo/ckpt{k}"),
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
    resources:
        gpu=1 if SC_GPU else 0,
        mem_mb=64000 if SC_GPU else 12000,
    log:
        "logs/scaffold/{sbench}/{svariant}/grpo_update_{k}.log",
    benchmark:
        "results/timings/scaffold/{sbench}/{svariant}/grpo_update_{k}.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_grpo_update.py"


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
    wildcard_constraints:
        **SC_CONSTRAINTS,
    params:
        rollouts=SCAFFOLD.n_scouts,
        wall_s=SC_WALL,
        settings=settings("scaffold", "play"),
        policy=scaffold_policy,
    resources:
        llm=scaffold_llm_units,
    log:
        "logs/scaffold/{sbench}/{svariant}/cohort_early.log",
    benchmark:
        "results/timings/scaffold/{sbench}/{svariant}/cohort_early.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_cohort_eval.py"


rule scaffold_cohort_eval:
    input:
        selections=scaffold_cohort_files("results/scaffold/{chain}{j}/{v}/selection.parquet"),
        post=scaffold_cohort_files("results/scaffold/{chain}{j}/{v}/post/l{i}/episodes.parquet"),
        library="results/scaffold/{sbench}@{svariant}0/library/v0/manifest.json",
        policy="results/scaffold/{sbench}/{svariant}/grpo/ckpt{k}",
    output:
        episodes="results/scaffold/{sbench}/{svariant}/cohort/ckpt{k}/episodes.parquet",
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
    log:
        "logs/scaffold/{sbench}/{svariant}/cohort_eval_{k}.log",
    benchmark:
        "results/timings/scaffold/{sbench}/{svariant}/cohort_eval_{k}.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_cohort_eval.py"


rule scaffold_cohort_control:
    """Table 4's plain-GRPO control: chain {svariant}'s cohort played skill-free by plain GRPO's checkpoint k (same
    query batches, no skill pathway), so a reader can tell internalization from what ordinary RL gives the cohort."""
    input:
        selections=scaffold_cohort_files("results/scaffold/{chain}{j}/{v}/selection.parquet"),
        post=scaffold_cohort_files("results/scaffold/{chain}{j}/{v}/post/l{i}/episodes.parquet"),
        library="results/scaffold/{sbench}@{svariant}0/library/v0/manifest.json",
        policy=f"results/scaffold/{{sbench}}/{BASELINE}/grpo/ckpt{{k}}",
    output:
        episodes="results/scaffold/{sbench}/{svariant}/cohort_grpo/ckpt{k}/episodes.parquet",
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
    log:
        "logs/scaffold/{sbench}/{svariant}/cohort_control_{k}.log",
    benchmark:
        "results/timings/scaffold/{sbench}/{svariant}/cohort_control_{k}.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_cohort_eval.py"


rule scaffold_internalization:
    input:
        selections=[f"results/scaffold/{b}@{v}{j}/{v}/selection.parquet" for b, v in SC_CHAINS
                    for j in range(SC_COHORT_ITERS)],
        post=[f"results/scaffold/{b}@{v}{j}/{v}/post/l{i}/episodes.parquet" for b, v in SC_CHAINS
              for j in range(SC_COHORT_ITERS) for i in range(SCAFFOLD.n_post)],
        scouts=[f"results/scaffold/{b}@{v}{j}/scouts/s{i}/episodes.parquet" for b, v in SC_CHAINS
                for j in range(SC_COHORT_ITERS) for i in range(SCAFFOLD.n_scouts)],
        early=[f"results/scaffold/{b}@{v}{j}/{v}/cohort_early/episodes.parquet" for b, v in SC_CHAINS
               for j in range(SC_COHORT_ITERS)],
        later=[f"results/scaffold/{b}/{v}/cohort/ckpt{k}/episodes.parquet" for b, v in SC_CHAINS
               for k in scaffold_later(b)],
        # with plain GRPO trained (training.baseline): its checkpoints on the same cohorts, the control rows
        control=[f"results/scaffold/{b}/{v}/cohort_grpo/ckpt{k}/episodes.parquet" for b, v in SC_CHAINS
                 for k in scaffold_later(b) if any(c.name == BASELINE for c in SCAFFOLD.chains)],
    params:
        interval=SCAFFOLD.bootstrap_interval,
    output:
        report("results/tables/scaffold_internalization.csv", caption="../report/scaffold_internalization.rst", category="SkillScaffold"),
    log:
        "logs/scaffold/internalization.log",
    benchmark:
        "results/timings/scaffold/internalization.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_internalization.py"


# Held-out evaluation (appendix A.1): every policy played skill-free on each benchmark's held-out splits.
rule scaffold_heldout:
    input:
        SC_HELDOUT_TARGETS,


rule scaffold_heldout_tasks:
    output:
        tasks=f"{SC_HO}/tasks.json",
        library=f"{SC_HO}/library/v0/manifest.json",
    wildcard_constraints:
        **SC_HO_CONSTRAINTS,
    params:
        task_seed=SC_TASK_SEED,
        settings=settings("scaffold", "heldout"),
        policy="",
    log:
        "logs/scaffold/{hbench}/heldout_tasks.log",
    benchmark:
        "results/timings/scaffold/{hbench}/heldout_tasks.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_heldout_tasks.py"


rule scaffold_heldout_eval:
    input:
        tasks=f"{SC_HO}/tasks.json",
        library=f"{SC_HO}/library/v0/manifest.json",
        policy=scaffold_heldout_input,
        card=scaffold_heldout_card,
    output:
        episodes=f"{SC_HO}/{{hpolicy}}/episodes.parquet",
    wildcard_constraints:
        **SC_HO_CONSTRAINTS,
    params:
        policy=scaffold_heldout_policy,
        rollouts=SCAFFOLD.heldout.rollouts,
        wall_s=SC_WALL,
        settings=settings("scaffold", "heldout"),
    resources:
        llm=scaffold_heldout_units,
    log:
        "logs/scaffold/{hbench}/heldout/{hpolicy}.log",
    benchmark:
        "results/timings/scaffold/{hbench}/heldout/{hpolicy}.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_heldout_eval.py"


rule scaffold_heldout_tables:
    input:
        episodes=[f"results/scaffold/{b}/heldout/{pol}/episodes.parquet" for b in SC_BENCH
                  for pol, _, _ in SC_HO_POLICIES[b]],
        # figure 7: the skill-free Scouts of every training iteration; figure 1: the injections
        scouts=scaffold_chain_files("results/scaffold/{b}@{c}{j}/scouts/s{i}/episodes.parquet"),
        selections=sorted(set(scaffold_chain_files("results/scaffold/{b}@{c}{j}/{c}/selection.parquet",
                                                   [c for c in SCAFFOLD.chains if c.of]))),
        # figures 6 and 8-12: the Post-Scouts of every SkillScaffold chain's iterations
        post=[f"results/scaffold/{b}@{c.name}{j}/{c.name}/post/l{i}/episodes.parquet" for b in SC_BENCH
              for c in SCAFFOLD.chains if c.of for j in range(SC_STEPS[b]) for i in range(SCAFFOLD.n_post)],
    output:
        heldout=report("results/tables/scaffold_heldout.csv", caption="../report/scaffold_heldout.rst", category="SkillScaffold"),
        table1=report("results/tables/scaffold_table1.csv", caption="../report/scaffold_heldout.rst", category="SkillScaffold"),
        table2=report("results/tables/scaffold_table2.csv", caption="../report/scaffold_heldout.rst", category="SkillScaffold"),
        table3=report("results/tables/scaffold_table3.csv", caption="../report/scaffold_heldout.rst", category="SkillScaffold"),
        table6=report("results/tables/scaffold_table6.csv", caption="../report/scaffold_heldout.rst", category="SkillScaffold"),
        curve="results/tables/scaffold_training_curve.csv",
        injection="results/tables/scaffold_injection.csv",
        exploration="results/tables/scaffold_training_exploration.csv",
    params:
        threshold=SCAFFOLD.threshold,
        # plain values (Snakemake compares them between runs): each chain's switches, each benchmark's env
        chains=[dataclasses.asdict(c) for c in SCAFFOLD.chains],
        envs={b: config["benchmarks"][b]["env"] for b in SC_BENCH},
    log:
        "logs/scaffold/heldout_tables.log",
    benchmark:
        "results/timings/scaffold/heldout_tables.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_heldout_tables.py"


rule scaffold_heldout_figures:
    input:
        heldout="results/tables/scaffold_heldout.csv",
        curve="results/tables/scaffold_training_curve.csv",
        injection="results/tables/scaffold_injection.csv",
        exploration="results/tables/scaffold_training_exploration.csv",
    output:
        figure1=report("results/figures/scaffold_figure1.png", caption="../report/scaffold_heldout.rst", category="SkillScaffold"),
        figure6=report("results/figures/scaffold_figure6.png", caption="../report/scaffold_heldout.rst", category="SkillScaffold"),
        figure7=report("results/figures/scaffold_figure7.png", caption="../report/scaffold_heldout.rst", category="SkillScaffold"),
        figure8=report("results/figures/scaffold_figure8.png", caption="../report/scaffold_heldout.rst", category="SkillScaffold"),
    log:
        "logs/scaffold/heldout_figures.log",
    benchmark:
        "results/timings/scaffold/heldout_figures.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_heldout_figures.py"
