# The paper's figures, one rule and one script each; every one is a target of `all`. A figure whose runs
# the config does not declare is drawn in its empty state, naming the preset that produces it.
rule figure_2:
    input:
        f"{TABLES}/checkpoints.csv",
    output:
        report(f"{FIGURES}/figure2.png", caption=f"{CAPTIONS}/figure2.rst", category="Figures"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/figures/figure2.log",
    benchmark:
        f"{TIMINGS}/figures/figure2.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/figure_2.py"


rule figure_4:
    input:
        f"{TABLES}/checkpoints.csv",
    output:
        report(f"{FIGURES}/figure4.png", caption=f"{CAPTIONS}/figure4.rst", category="Figures"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/figures/figure4.log",
    benchmark:
        f"{TIMINGS}/figures/figure4.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/figure_4.py"


rule figure_7:
    input:
        f"{TABLES}/checkpoints.csv",
    output:
        report(f"{FIGURES}/figure7.png", caption=f"{CAPTIONS}/figure7.rst", category="Figures"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/figures/figure7.log",
    benchmark:
        f"{TIMINGS}/figures/figure7.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/figure_7.py"


rule figure_12:
    input:
        f"{TABLES}/checkpoints.csv",
    output:
        report(f"{FIGURES}/figure12.png", caption=f"{CAPTIONS}/figure12.rst", category="Figures"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/figures/figure12.log",
    benchmark:
        f"{TIMINGS}/figures/figure12.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/figure_12.py"


rule figure_3:
    input:
        f"{ANALYTICS}/training.parquet",
    output:
        report(f"{FIGURES}/figure3.png", caption=f"{CAPTIONS}/figure3.rst", category="Figures"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/figures/figure3.log",
    benchmark:
        f"{TIMINGS}/figures/figure3.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/figure_3.py"


rule figure_5:
    input:
        checkpoints=f"{ANALYTICS}/checkpoints.parquet",
        libraries=final_libraries(ANALYSIS_STUDY.zombie_levels()),
    output:
        figure=report(f"{FIGURES}/figure5.png", caption=f"{CAPTIONS}/figure5.rst", category="Figures"),
        table=report(f"{TABLES}/figure5.csv", caption=f"{CAPTIONS}/figure5_table.rst", category="Tables"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/figures/figure5.log",
    benchmark:
        f"{TIMINGS}/figures/figure5.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/figure_5.py"


rule figure_6:
    input:
        checkpoints=f"{TABLES}/checkpoints.csv",
        retention=f"{TABLES}/retention.csv",
    output:
        report(f"{FIGURES}/figure6.png", caption=f"{CAPTIONS}/figure6.rst", category="Figures"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/figures/figure6.log",
    benchmark:
        f"{TIMINGS}/figures/figure6.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/figure_6.py"


rule figure_11:
    input:
        main=f"{TABLES}/main.csv",
        others=list(CROSS_MODEL.values()),
    output:
        report(f"{FIGURES}/figure11.png", caption=f"{CAPTIONS}/figure11.rst", category="Figures"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
        labels=[LLM.model, *CROSS_MODEL],
    log:
        "logs/figures/figure11.log",
    benchmark:
        f"{TIMINGS}/figures/figure11.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/figure_11.py"


# Figures 9 and 10 (appendix G.2): figure 2's curves for the model analysis.cross_model_figures names, from
# its own finished run; no empty state (a run that does not exist fails, see study.smk).
rule figure_9_10:
    input:
        lambda w: os.path.join(cross_model_folder(CROSS_FIGURES[int(w.n)], f"figure {w.n}"), "checkpoints.csv"),
    output:
        report(f"{FIGURES}/figure{{n}}.png", caption=f"{CAPTIONS}/figure9_10.rst", category="Figures"),
    wildcard_constraints:
        n="9|10",
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
        model=lambda w: CROSS_FIGURES[int(w.n)],
    log:
        "logs/figures/figure{n}.log",
    benchmark:
        f"{TIMINGS}/figures/figure{{n}}.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/figure_9_10.py"


# Figures 9, 10 and table 7, asked for whatever the config declares: fails naming the runs that are missing.
rule cross_model:
    input:
        f"{FIGURES}/figure9.png",
        f"{FIGURES}/figure10.png",
        f"{TABLES}/table7.csv",


PAPER_TARGETS = [
    f"{TABLES}/main.csv",
    f"{TABLES}/checkpoints.csv",
    f"{TABLES}/stats.csv",
    f"{TABLES}/callgraph.csv",
    f"{TABLES}/table1.csv",
    f"{TABLES}/table8.csv",
    f"{TABLES}/retention.csv",
    f"{TABLES}/figure5.csv",
    *[f"{FIGURES}/figure{n}.png" for n in (2, 3, 4, 5, 6, 7, 11, 12)],
    *CROSS_MODEL_TARGETS,
]
