# The paper's figures, one rule and one script each; every one is a target of `all`. A figure whose runs
# the config does not declare is drawn in its empty state, naming the preset that produces it.
rule figure_2:
    input:
        "results/tables/checkpoints.csv",
    output:
        report("results/figures/figure2.png", caption=f"{CAPTIONS}/figure2.rst", category="Figures"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/figures/figure2.log",
    benchmark:
        "results/timings/figures/figure2.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/figure_2.py"


rule figure_4:
    input:
        "results/tables/checkpoints.csv",
    output:
        report("results/figures/figure4.png", caption=f"{CAPTIONS}/figure4.rst", category="Figures"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/figures/figure4.log",
    benchmark:
        "results/timings/figures/figure4.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/figure_4.py"


rule figure_7:
    input:
        "results/tables/checkpoints.csv",
    output:
        report("results/figures/figure7.png", caption=f"{CAPTIONS}/figure7.rst", category="Figures"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/figures/figure7.log",
    benchmark:
        "results/timings/figures/figure7.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/figure_7.py"


rule figure_12:
    input:
        "results/tables/checkpoints.csv",
    output:
        report("results/figures/figure12.png", caption=f"{CAPTIONS}/figure12.rst", category="Figures"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/figures/figure12.log",
    benchmark:
        "results/timings/figures/figure12.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/figure_12.py"


rule figure_3:
    input:
        "results/analytics/training.parquet",
    output:
        report("results/figures/figure3.png", caption=f"{CAPTIONS}/figure3.rst", category="Figures"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/figures/figure3.log",
    benchmark:
        "results/timings/figures/figure3.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/figure_3.py"


rule figure_5:
    input:
        checkpoints="results/analytics/checkpoints.parquet",
        libraries=final_libraries(ANALYSIS_STUDY.zombie_levels()),
    output:
        figure=report("results/figures/figure5.png", caption=f"{CAPTIONS}/figure5.rst", category="Figures"),
        table=report("results/tables/figure5.csv", caption=f"{CAPTIONS}/figure5_table.rst", category="Tables"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/figures/figure5.log",
    benchmark:
        "results/timings/figures/figure5.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/figure_5.py"


rule figure_6:
    input:
        checkpoints="results/tables/checkpoints.csv",
        retention="results/tables/retention.csv",
    output:
        report("results/figures/figure6.png", caption=f"{CAPTIONS}/figure6.rst", category="Figures"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
    log:
        "logs/figures/figure6.log",
    benchmark:
        "results/timings/figures/figure6.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/figure_6.py"


rule figure_11:
    input:
        main="results/tables/main.csv",
        others=list(CROSS_MODEL.values()),
    output:
        report("results/figures/figure11.png", caption=f"{CAPTIONS}/figure11.rst", category="Figures"),
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
        labels=[LLM.model, *CROSS_MODEL],
    log:
        "logs/figures/figure11.log",
    benchmark:
        "results/timings/figures/figure11.tsv"
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
        report("results/figures/figure{n}.png", caption=f"{CAPTIONS}/figure9_10.rst", category="Figures"),
    wildcard_constraints:
        n="9|10",
    params:
        settings=settings("speedrunner", "tables"),
        config_name=CONFIG_NAME,
        model=lambda w: CROSS_FIGURES[int(w.n)],
    log:
        "logs/figures/figure{n}.log",
    benchmark:
        "results/timings/figures/figure{n}.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/figure_9_10.py"


# Figures 9, 10 and table 7, asked for whatever the config declares: fails naming the runs that are missing.
rule cross_model:
    input:
        "results/figures/figure9.png",
        "results/figures/figure10.png",
        "results/tables/table7.csv",


PAPER_TARGETS = [
    "results/tables/main.csv",
    "results/tables/checkpoints.csv",
    "results/tables/stats.csv",
    "results/tables/callgraph.csv",
    "results/tables/table1.csv",
    "results/tables/table8.csv",
    "results/tables/retention.csv",
    "results/tables/figure5.csv",
    *[f"results/figures/figure{n}.png" for n in (2, 3, 4, 5, 6, 7, 11, 12)],
    *CROSS_MODEL_TARGETS,
]
