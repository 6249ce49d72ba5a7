# SkillScaffold (seed 002, issue 6): skill-free Scouts -> evidence -> candidate cards -> paired scores ->
# utility -> positive-gated selection -> Post-Scouts; plus the validation experiment (section 5.4) that
# evaluates every candidate with separate downstream rollouts. Target: scaffold_all.
# Paths: results/scaffold/{sbench}/... (per benchmark) and results/scaffold/{sbench}/{svariant}/... (grp|anc).
import os

from snakemake.utils import validate as _scaffold_validate

from skillrepro import config as _scaffold_cfg
from skillrepro.studies.scaffold import ScaffoldConfig, executor_llm

config.setdefault("scaffold", {})
_scaffold_validate(config["scaffold"], str(_scaffold_cfg.ROOT / "schemas" / "scaffold.schema.yaml"), set_default=True)
SCAFFOLD = ScaffoldConfig.from_config(config)
_SC_LLM = _scaffold_cfg.llm_config(config)
_SC_BENCH = {b.name: b for b in _scaffold_cfg.benchmarks(config) if b.name in SCAFFOLD.benchmarks}
_SC_WALL = config.get("budgets", {}).get("rollout_wall_s", 1800)
_SC_TASK_SEED = config.get("protocol", {}).get("task_seed", 42)
_SC_SCORER_LLM = SCAFFOLD.scorer_backend == "vllm" or (SCAFFOLD.scorer_backend == "auto" and _SC_LLM.backend == "vllm")

_SC = "results/scaffold/{sbench}"
_SCV = "results/scaffold/{sbench}/{svariant}"
_SC_SCOUTS = [f"{_SC}/scouts/s{i}/episodes.parquet" for i in range(SCAFFOLD.n_scouts)]
_SC_CONSTRAINTS = dict(sbench="|".join(_SC_BENCH) or "none", svariant="|".join(SCAFFOLD.selection_variants), i=r"\d+")
_SC_COMMON = dict(bench=lambda w: _SC_BENCH[w.sbench], llm=lambda w: executor_llm(_SC_LLM, SCAFFOLD, w.sbench),
                  scaffold=SCAFFOLD,
                  settings=lambda w: _scaffold_cfg.fingerprint([_scaffold_cfg.settings_fingerprint(config, ("llm", "benchmark", "call_budget"), bench=w.sbench), SCAFFOLD]))
# Every benchmark x variant instance of a path pattern: utility variants, or every selection variant.
_sc_all = lambda pattern, variants=SCAFFOLD.variants: [pattern.format(sbench=b, svariant=v) for b in _SC_BENCH for v in variants]  # noqa: E731
_sc_sel = lambda pattern: _sc_all(pattern, SCAFFOLD.selection_variants)  # noqa: E731
# An ablation reads the cards and utilities of the utility variant it is built on.
_sc_base = lambda name: lambda w: f"results/scaffold/{w.sbench}/{SCAFFOLD.ablation(w.svariant).of}/{name}"  # noqa: E731


rule scaffold_all:
    input:
        "results/tables/scaffold_rules.csv",
        "results/tables/scaffold_quintiles.csv",
        "results/tables/scaffold_exploration.csv",
        "results/tables/scaffold_pilot_rollout.csv",
        "results/tables/scaffold_pilot_competence.csv",
        "results/figures/scaffold_validation.png",
        "results/figures/scaffold_exploration.png",


rule scaffold_queries:
    output:
        queries=f"{_SC}/queries.json",
        library=f"{_SC}/library/v0/manifest.json",
    wildcard_constraints:
        **_SC_CONSTRAINTS,
    params:
        task_seed=_SC_TASK_SEED,
        **_SC_COMMON,
    log:
        "logs/scaffold/{sbench}/queries.log",
    benchmark:
        "results/benchmarks/scaffold/{sbench}/queries.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_queries.py"


rule scaffold_scout:
    input:
        queries=f"{_SC}/queries.json",
        library=f"{_SC}/library/v0/manifest.json",
    output:
        episodes=f"{_SC}/scouts/s{{i}}/episodes.parquet",
    wildcard_constraints:
        **_SC_CONSTRAINTS,
    params:
        wall_s=_SC_WALL,
        **_SC_COMMON,
    resources:
        llm=1,
    log:
        "logs/scaffold/{sbench}/scout_{i}.log",
    benchmark:
        "results/benchmarks/scaffold/{sbench}/scout_{i}.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_scout.py"


rule scaffold_evidence:
    input:
        scouts=_SC_SCOUTS,
    output:
        f"{_SCV}/evidence.parquet",
    wildcard_constraints:
        **_SC_CONSTRAINTS,
    params:
        **_SC_COMMON,
    log:
        "logs/scaffold/{sbench}/{svariant}/evidence.log",
    benchmark:
        "results/benchmarks/scaffold/{sbench}/{svariant}/evidence.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_evidence.py"


rule scaffold_generate:
    input:
        evidence=f"{_SCV}/evidence.parquet",
    output:
        candidates=f"{_SCV}/candidates.parquet",
        llm_calls=f"{_SCV}/generate/llm_calls.parquet",
    wildcard_constraints:
        **_SC_CONSTRAINTS,
    params:
        # scaffold.executor's per-benchmark sampling (table 5: Executor tokens and top-p) is the Executor's
        **{**_SC_COMMON, "llm": _SC_LLM},
    resources:
        llm=1,
    log:
        "logs/scaffold/{sbench}/{svariant}/generate.log",
    benchmark:
        "results/benchmarks/scaffold/{sbench}/{svariant}/generate.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_generate.py"


rule scaffold_score_free:
    input:
        scouts=_SC_SCOUTS,
        library=f"{_SC}/library/v0/manifest.json",
    output:
        f"{_SC}/scores_free.parquet",
    wildcard_constraints:
        **_SC_CONSTRAINTS,
    params:
        **_SC_COMMON,
    resources:
        llm=1 if _SC_SCORER_LLM else 0,
        mem_mb=8000,
    log:
        "logs/scaffold/{sbench}/score_free.log",
    benchmark:
        "results/benchmarks/scaffold/{sbench}/score_free.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_score_free.py"


rule scaffold_score:
    input:
        scouts=_SC_SCOUTS,
        library=f"{_SC}/library/v0/manifest.json",
        candidates=f"{_SCV}/candidates.parquet",
    output:
        f"{_SCV}/scores.parquet",
    wildcard_constraints:
        **_SC_CONSTRAINTS,
    params:
        **_SC_COMMON,
    resources:
        llm=1 if _SC_SCORER_LLM else 0,
        mem_mb=8000,
    log:
        "logs/scaffold/{sbench}/{svariant}/score.log",
    benchmark:
        "results/benchmarks/scaffold/{sbench}/{svariant}/score.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_score.py"


rule scaffold_utility:
    input:
        scouts=_SC_SCOUTS,
        candidates=f"{_SCV}/candidates.parquet",
        scores_free=f"{_SC}/scores_free.parquet",
        scores=f"{_SCV}/scores.parquet",
    output:
        f"{_SCV}/utilities.parquet",
    wildcard_constraints:
        **_SC_CONSTRAINTS,
    log:
        "logs/scaffold/{sbench}/{svariant}/utility.log",
    benchmark:
        "results/benchmarks/scaffold/{sbench}/{svariant}/utility.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_utility.py"


rule scaffold_select:
    input:
        scouts=_SC_SCOUTS,
        candidates=_sc_base("candidates.parquet"),
        utilities=_sc_base("utilities.parquet"),
    output:
        f"{_SCV}/selection.parquet",
    wildcard_constraints:
        **_SC_CONSTRAINTS,
    params:
        ablation=lambda w: repr(SCAFFOLD.ablation(w.svariant)),
        threshold=SCAFFOLD.threshold,
        **_SC_COMMON,
    log:
        "logs/scaffold/{sbench}/{svariant}/select.log",
    benchmark:
        "results/benchmarks/scaffold/{sbench}/{svariant}/select.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_select.py"


rule scaffold_post_scout:
    input:
        selection=f"{_SCV}/selection.parquet",
        library=f"{_SC}/library/v0/manifest.json",
    output:
        episodes=f"{_SCV}/post/l{{i}}/episodes.parquet",
    wildcard_constraints:
        **_SC_CONSTRAINTS,
    params:
        wall_s=_SC_WALL,
        **_SC_COMMON,
    resources:
        llm=1,
    log:
        "logs/scaffold/{sbench}/{svariant}/post_scout_{i}.log",
    benchmark:
        "results/benchmarks/scaffold/{sbench}/{svariant}/post_scout_{i}.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_post_scout.py"


rule scaffold_eval_free:
    input:
        queries=f"{_SC}/queries.json",
        library=f"{_SC}/library/v0/manifest.json",
    output:
        episodes=f"{_SC}/eval_free/k{{i}}/episodes.parquet",
    wildcard_constraints:
        **_SC_CONSTRAINTS,
    params:
        wall_s=_SC_WALL,
        **_SC_COMMON,
    resources:
        llm=1,
    log:
        "logs/scaffold/{sbench}/eval_free_{i}.log",
    benchmark:
        "results/benchmarks/scaffold/{sbench}/eval_free_{i}.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_eval_free.py"


rule scaffold_eval:
    input:
        candidates=f"{_SCV}/candidates.parquet",
        library=f"{_SC}/library/v0/manifest.json",
    output:
        episodes=f"{_SCV}/eval/k{{i}}/episodes.parquet",
    wildcard_constraints:
        **_SC_CONSTRAINTS,
    params:
        wall_s=_SC_WALL,
        **_SC_COMMON,
    resources:
        llm=1,
    log:
        "logs/scaffold/{sbench}/{svariant}/eval_{i}.log",
    benchmark:
        "results/benchmarks/scaffold/{sbench}/{svariant}/eval_{i}.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_eval.py"


rule scaffold_tables:
    input:
        utilities=_sc_all(f"{_SCV}/utilities.parquet"),
        selections=_sc_sel(f"{_SCV}/selection.parquet"),
        post=[f for i in range(SCAFFOLD.n_post) for f in _sc_sel(f"{_SCV}/post/l{i}/episodes.parquet")],
        evals=[f for i in range(SCAFFOLD.n_eval) for f in _sc_all(f"{_SCV}/eval/k{i}/episodes.parquet")],
        eval_free=[f"results/scaffold/{b}/eval_free/k{i}/episodes.parquet" for b in _SC_BENCH for i in range(SCAFFOLD.n_eval)],
    output:
        rules=report("results/tables/scaffold_rules.csv", caption="../report/scaffold_rules.rst", category="SkillScaffold"),
        quintiles=report("results/tables/scaffold_quintiles.csv", caption="../report/scaffold_quintiles.rst", category="SkillScaffold"),
        exploration=report("results/tables/scaffold_exploration.csv", caption="../report/scaffold_exploration.rst", category="SkillScaffold"),
        evals="results/scaffold/evaluations.csv",
        pilot_rollout=report("results/tables/scaffold_pilot_rollout.csv", category="SkillScaffold"),
        pilot_competence=report("results/tables/scaffold_pilot_competence.csv", category="SkillScaffold"),
    params:
        variants=list(SCAFFOLD.variants),
        threshold=SCAFFOLD.threshold,
    log:
        "logs/scaffold/tables.log",
    benchmark:
        "results/benchmarks/scaffold/tables.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_tables.py"


rule scaffold_figures:
    input:
        rules="results/tables/scaffold_rules.csv",
        quintiles="results/tables/scaffold_quintiles.csv",
        exploration="results/tables/scaffold_exploration.csv",
    output:
        validation=report("results/figures/scaffold_validation.png", caption="../report/scaffold_validation.rst", category="SkillScaffold"),
        exploration=report("results/figures/scaffold_exploration.png", caption="../report/scaffold_exploration_figure.rst", category="SkillScaffold"),
    log:
        "logs/scaffold/figures.log",
    benchmark:
        "results/benchmarks/scaffold/figures.tsv"
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
            "results/benchmarks/scaffold/webshop_split.tsv"
        conda:
            "../envs/scaffold.yaml"
        script:
            "../workflow/scripts/scaffold_webshop_split.py"


# GRPO joint training (section 4.5): one update of the shared policy from one scaffold iteration of a utility
# variant. Not part of scaffold_all: `snakemake scaffold_grpo`. On the CPU the policy is the GGUF model
# dequantised into transformers; at paper scale set scaffold.training.model to the Hugging Face id.
_SC_TRAIN = dict(SCAFFOLD.training)
_SC_GPU = _SC_LLM.backend == "vllm"


rule scaffold_grpo:
    input:
        _sc_all(f"{_SCV}/grpo/step1"),


rule scaffold_grpo_update:
    input:
        scouts=_SC_SCOUTS,
        post=[f"{_SCV}/post/l{i}/episodes.parquet" for i in range(SCAFFOLD.n_post)],
        candidates=f"{_SCV}/candidates.parquet",
        utilities=f"{_SCV}/utilities.parquet",
        generator_calls=f"{_SCV}/generate/llm_calls.parquet",
    output:
        directory(f"{_SCV}/grpo/step1"),
    wildcard_constraints:
        **_SC_CONSTRAINTS,
    params:
        training=_SC_TRAIN,
        model=_SC_TRAIN.get("model") or _SC_LLM.model,
        m=SCAFFOLD.n_candidates,
        group_size=SCAFFOLD.n_scouts + SCAFFOLD.n_post + SCAFFOLD.n_candidates,
        steps=1,
        use_cpu=not _SC_GPU,
    resources:
        gpu=1 if _SC_GPU else 0,
        mem_mb=64000 if _SC_GPU else 12000,
    log:
        "logs/scaffold/{sbench}/{svariant}/grpo_update.log",
    benchmark:
        "results/benchmarks/scaffold/{sbench}/{svariant}/grpo_update.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_grpo_update.py"
