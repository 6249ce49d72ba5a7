# SkillScaffold (seed 002, issue 6): skill-free Scouts -> evidence -> candidate cards -> paired scores ->
# utility -> positive-gated selection -> Post-Scouts; plus the validation experiment (section 5.4) that
# evaluates every candidate with separate downstream rollouts. Target: scaffold_all.
# Paths: results/scaffold/{sbench}/... (per benchmark) and results/scaffold/{sbench}/{svariant}/... (grp|anc).
# GRPO joint training (section 4.5, algorithm 1; target scaffold_grpo): iteration k of utility variant v's
# training chain on benchmark b is the scaffold instance "b@v{k}" (its own query batch, played, carded and
# scored by policy checkpoint k; 0 is llm.model), and update k+1 trains checkpoint k on that iteration's records.
import dataclasses
import os

from snakemake.utils import validate as _scaffold_validate

from skillrepro import check as _scaffold_check
from skillrepro import config as _scaffold_cfg
from skillrepro.studies.scaffold.grpo import policy_llm
from skillrepro.studies.scaffold.heldout import heldout_policies
from skillrepro.studies.scaffold.settings import (BASELINE, HeldoutConfig, ScaffoldConfig, executor_llm, parse_instance,
                                                  training_iteration)

config.setdefault("scaffold", {})
_scaffold_validate(config["scaffold"], str(_scaffold_cfg.ROOT / "schemas" / "scaffold.schema.yaml"), set_default=True)
SCAFFOLD = ScaffoldConfig.from_config(config)
_SC_LLM = _scaffold_cfg.llm_config(config)
_SC_BENCH = {b.name: b for b in _scaffold_cfg.benchmarks(config) if b.name in SCAFFOLD.benchmarks}
_SC_WALL = config.get("budgets", {}).get("rollout_wall_s", 1800)
_SC_TASK_SEED = config.get("protocol", {}).get("task_seed", 42)
_SC_SCORER_LLM = SCAFFOLD.scorer_backend == "vllm" or (SCAFFOLD.scorer_backend == "auto" and _SC_LLM.backend == "vllm")
_SC_TRAIN = dict(SCAFFOLD.training)
_SC_PROMPTS = {env: _scaffold_cfg.file_digest(f) for env, f in SCAFFOLD.generator_prompts.items()}  # edited in place: rerun
_SC_STEPS = int(_SC_TRAIN.get("steps", 1))
_SC_GPU = _SC_LLM.backend == "vllm"
_SC_CHAIN_NAMES = [c.name for c in SCAFFOLD.chains]
# What the scaffold rules' settings fingerprint reads: everything but the held-out evaluation's own settings,
# so that changing those reruns the held-out jobs only.
_SC_FP_SETTINGS = dataclasses.replace(SCAFFOLD, heldout=HeldoutConfig())


_sc_instance = lambda w: parse_instance(w.sbench)  # noqa: E731  (benchmark, chain variant or None, iteration)
_sc_checkpoint = lambda bench, variant, k: f"results/scaffold/{bench}/{variant}/grpo/ckpt{k}"  # noqa: E731
# The GRPO checkpoint that plays an instance ("": llm.model on the run's shared server).
_sc_policy = lambda w: (lambda b, chain, k: _sc_checkpoint(b, chain, k) if chain and k > 0 else "")(*_sc_instance(w))  # noqa: E731
# The instance's LLM settings: the Executor's (or the Generator's, executor=False), served from its checkpoint.
_sc_llm = lambda executor=True: lambda w: policy_llm(  # noqa: E731
    executor_llm(_SC_LLM, SCAFFOLD, _sc_instance(w)[0]) if executor else _SC_LLM, _sc_policy(w))
_sc_scaffold = lambda w: training_iteration(SCAFFOLD, *_sc_instance(w)[1:])  # noqa: E731

_SC = "results/scaffold/{sbench}"
_SCV = "results/scaffold/{sbench}/{svariant}"
_SC_SCOUTS = [f"{_SC}/scouts/s{i}/episodes.parquet" for i in range(SCAFFOLD.n_scouts)]
_SC_CONSTRAINTS = dict(sbench=f"(?:{'|'.join(_SC_BENCH) or 'none'})(?:@(?:{'|'.join(_SC_CHAIN_NAMES)})\\d+)?",
                       svariant="|".join(SCAFFOLD.variants + tuple(SCAFFOLD.ablations) + (BASELINE,)), i=r"\d+")
_SC_COMMON = dict(bench=lambda w: _SC_BENCH[_sc_instance(w)[0]], llm=_sc_llm(), scaffold=_sc_scaffold,
                  policy=_sc_policy,
                  settings=lambda w: _scaffold_cfg.fingerprint([_scaffold_check.settings_fingerprint(config, ("llm", "benchmark", "call_budget"), bench=_sc_instance(w)[0]), _SC_FP_SETTINGS] + ([_SC_PROMPTS] if _SC_PROMPTS else [])))
# A job played by a checkpoint reads it (and starts its own server for it).
_sc_policy_input = lambda w: _sc_policy(w) or []  # noqa: E731
# ... and takes every `llm` unit: two llama.cpp servers on the same cores slow each other many times over.
_sc_llm_units = lambda w: _SC_LLM.slots if _sc_policy(w) else 1  # noqa: E731
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
        # a training iteration's batch: a seed of its own, shared by the chains of every utility variant
        task_seed=lambda w: _SC_TASK_SEED + (1 + _sc_instance(w)[2] if "@" in w.sbench else 0),
        **_SC_COMMON,
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
        queries=f"{_SC}/queries.json",
        library=f"{_SC}/library/v0/manifest.json",
        policy=_sc_policy_input,
    output:
        episodes=f"{_SC}/scouts/s{{i}}/episodes.parquet",
    wildcard_constraints:
        **_SC_CONSTRAINTS,
    params:
        wall_s=_SC_WALL,
        **_SC_COMMON,
    resources:
        llm=_sc_llm_units,
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
        "results/timings/scaffold/{sbench}/{svariant}/evidence.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_evidence.py"


rule scaffold_generate:
    input:
        evidence=f"{_SCV}/evidence.parquet",
        policy=_sc_policy_input,
    output:
        candidates=f"{_SCV}/candidates.parquet",
        llm_calls=f"{_SCV}/generate/llm_calls.parquet",
    wildcard_constraints:
        **_SC_CONSTRAINTS,
    params:
        # scaffold.executor's per-benchmark sampling (table 5: Executor tokens and top-p) is the Executor's
        **{**_SC_COMMON, "llm": _sc_llm(executor=False)},
    resources:
        llm=_sc_llm_units,
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
        scouts=_SC_SCOUTS,
        library=f"{_SC}/library/v0/manifest.json",
        policy=_sc_policy_input,
    output:
        f"{_SC}/scores_free.parquet",
    wildcard_constraints:
        **_SC_CONSTRAINTS,
    params:
        **_SC_COMMON,
    resources:
        llm=lambda w: _sc_llm_units(w) if _SC_SCORER_LLM else 0,
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
        scouts=_SC_SCOUTS,
        library=f"{_SC}/library/v0/manifest.json",
        candidates=f"{_SCV}/candidates.parquet",
        policy=_sc_policy_input,
    output:
        f"{_SCV}/scores.parquet",
    wildcard_constraints:
        **_SC_CONSTRAINTS,
    params:
        **_SC_COMMON,
    resources:
        llm=lambda w: _sc_llm_units(w) if _SC_SCORER_LLM else 0,
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
        "results/timings/scaffold/{sbench}/{svariant}/utility.tsv"
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
        "results/timings/scaffold/{sbench}/{svariant}/select.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_select.py"


rule scaffold_post_scout:
    input:
        # plain GRPO has no Generator: its Post-Scouts play the iteration's queries skill-free
        selection=lambda w: [] if w.svariant == BASELINE else f"results/scaffold/{w.sbench}/{w.svariant}/selection.parquet",
        queries=f"{_SC}/queries.json",
        library=f"{_SC}/library/v0/manifest.json",
        policy=_sc_policy_input,
    output:
        episodes=f"{_SCV}/post/l{{i}}/episodes.parquet",
    wildcard_constraints:
        **_SC_CONSTRAINTS,
    params:
        wall_s=_SC_WALL,
        # table 3's "Generator learning without injection": a training chain's Post-Scouts stay skill-free
        inject=lambda w: "@" not in w.sbench or SCAFFOLD.chain(_sc_instance(w)[1]).inject,
        **_SC_COMMON,
    resources:
        llm=_sc_llm_units,
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
        llm=_sc_llm_units,
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
        llm=_sc_llm_units,
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
        utilities=_sc_all(f"{_SCV}/utilities.parquet"),
        selections=_sc_sel(f"{_SCV}/selection.parquet"),
        post=[f for i in range(SCAFFOLD.n_post) for f in _sc_sel(f"{_SCV}/post/l{i}/episodes.parquet")],
        evals=[f for i in range(SCAFFOLD.n_eval) for f in _sc_all(f"{_SCV}/eval/k{i}/episodes.parquet")],
        # k < n_eval: the skill-free baseline; the next n_probes: figure 3(b)'s independent competence probes
        eval_free=[f"results/scaffold/{b}/eval_free/k{i}/episodes.parquet" for b in _SC_BENCH for i in range(SCAFFOLD.n_eval + SCAFFOLD.n_probes)],
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
    output:
        validation=report("results/figures/scaffold_validation.png", caption="../report/scaffold_validation.rst", category="SkillScaffold"),
        exploration=report("results/figures/scaffold_exploration.png", caption="../report/scaffold_exploration_figure.rst", category="SkillScaffold"),
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


# GRPO joint training (section 4.5): update k trains checkpoint k-1 on iteration k-1 of its chain. Not part
# of scaffold_all. On the CPU the policy is the GGUF model dequantised into transformers and each checkpoint is
# written back as GGUF for llama.cpp; at paper scale set scaffold.training.model to the Hugging Face id.
_SC_CHAIN = "results/scaffold/{sbench}@{svariant}{prev}"
# the records of iteration k-1 (which update k trains on), for pattern(s) under _SC_CHAIN
_sc_prev = lambda *patterns: lambda w: [p.format(sbench=w.sbench, svariant=w.svariant, prev=int(w.k) - 1) for p in patterns]  # noqa: E731
# a file of iteration k-1's cards, under the chain's utility variant (plain GRPO: none)
_sc_cards = lambda name: lambda w: [] if w.svariant == BASELINE else [  # noqa: E731
    f"results/scaffold/{w.sbench}@{w.svariant}{int(w.k) - 1}/{SCAFFOLD.chain(w.svariant).of}/{name}"]


# Held-out evaluation (appendix A.1; tables 1, 2, 3, 6, figures 1 and 7; rules at the end of this file).
_SC_HELDOUT_TARGETS = [f"results/tables/scaffold_{t}.csv" for t in ("heldout", "table1", "table2", "table3", "table6",
                                                                     "training_curve", "injection")] + [
    f"results/figures/scaffold_{f}.png" for f in ("figure1", "figure7")]


rule scaffold_grpo:
    input:
        [_sc_checkpoint(b, v, _SC_STEPS) for b in _SC_BENCH for v in _SC_CHAIN_NAMES],
        "results/tables/scaffold_internalization.csv",
        _SC_HELDOUT_TARGETS,


rule scaffold_grpo_update:
    input:
        scouts=_sc_prev(*(f"{_SC_CHAIN}/scouts/s{i}/episodes.parquet" for i in range(SCAFFOLD.n_scouts))),
        post=_sc_prev(*(f"{_SC_CHAIN}/{{svariant}}/post/l{i}/episodes.parquet" for i in range(SCAFFOLD.n_post))),
        # the cards of the chain's utility variant (a trained ablation selects among them); plain GRPO has none
        candidates=_sc_cards("candidates.parquet"),
        utilities=_sc_cards("utilities.parquet"),
        generator_calls=_sc_cards("generate/llm_calls.parquet"),
        policy=lambda w: _sc_checkpoint(w.sbench, w.svariant, int(w.k) - 1) if int(w.k) > 1 else [],
    output:
        directory("results/scaffold/{sbench}/{svariant}/grpo/ckpt{k}"),
    wildcard_constraints:
        sbench="|".join(_SC_BENCH) or "none",
        svariant="|".join(_SC_CHAIN_NAMES),
        k=r"[1-9]\d*",
    params:
        # a chain's own switches (table 3's training ablations; plain GRPO has neither)
        training=lambda w: {**_SC_TRAIN, "generator_learning": SCAFFOLD.chain(w.svariant).generator_learning},
        chain=lambda w: SCAFFOLD.chain(w.svariant),
        threshold=SCAFFOLD.threshold,
        base_model=_SC_TRAIN.get("model") or _SC_LLM.model,
        m=lambda w: 0 if w.svariant == BASELINE else SCAFFOLD.n_candidates,
        group_size=lambda w: SCAFFOLD.n_scouts + SCAFFOLD.n_post + (0 if w.svariant == BASELINE else SCAFFOLD.n_candidates),
        use_cpu=not _SC_GPU,
    resources:
        gpu=1 if _SC_GPU else 0,
        mem_mb=64000 if _SC_GPU else 12000,
    log:
        "logs/scaffold/{sbench}/{svariant}/grpo_update_{k}.log",
    benchmark:
        "results/timings/scaffold/{sbench}/{svariant}/grpo_update_{k}.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_grpo_update.py"


# Internalization (table 4): the cohort of the first `training.cohort_iterations` iterations' queries that
# skill-assisted exploration helped (chosen on their Scouts and Post-Scouts), played skill-free N times each by
# the checkpoint that chose it (fresh, independent rollouts: the early success) and by each later checkpoint.
_SC_COHORT_ITERS = int(_SC_TRAIN.get("cohort_iterations", 1))
_SC_LATER = range(_SC_COHORT_ITERS, _SC_STEPS + 1)  # checkpoints trained on every cohort iteration
# the selection and Post-Scouts of each cohort iteration of a chain (pattern keys: sbench, svariant)
_sc_cohort_inputs = lambda chain_of: dict(  # noqa: E731
    selections=lambda w: [f"results/scaffold/{chain_of(w)}{j}/{w.svariant}/selection.parquet" for j in range(_SC_COHORT_ITERS)],
    post=lambda w: [f"results/scaffold/{chain_of(w)}{j}/{w.svariant}/post/l{i}/episodes.parquet"
                    for j in range(_SC_COHORT_ITERS) for i in range(SCAFFOLD.n_post)])


rule scaffold_cohort_early:
    input:
        selections=[f"{_SCV}/selection.parquet"],
        post=[f"{_SCV}/post/l{i}/episodes.parquet" for i in range(SCAFFOLD.n_post)],
        library=f"{_SC}/library/v0/manifest.json",
        policy=_sc_policy_input,
    output:
        episodes=f"{_SCV}/cohort_early/episodes.parquet",
    wildcard_constraints:
        **_SC_CONSTRAINTS,
    params:
        rollouts=SCAFFOLD.n_scouts,
        wall_s=_SC_WALL,
        **_SC_COMMON,
    resources:
        llm=_sc_llm_units,
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
        **_sc_cohort_inputs(lambda w: f"{w.sbench}@{w.svariant}"),
        library="results/scaffold/{sbench}@{svariant}0/library/v0/manifest.json",
        policy="results/scaffold/{sbench}/{svariant}/grpo/ckpt{k}",
    output:
        episodes="results/scaffold/{sbench}/{svariant}/cohort/ckpt{k}/episodes.parquet",
    wildcard_constraints:
        sbench="|".join(_SC_BENCH) or "none",
        svariant="|".join(SCAFFOLD.variants),
        k=r"[1-9]\d*",
    params:
        bench=lambda w: _SC_BENCH[w.sbench],
        llm=lambda w: policy_llm(executor_llm(_SC_LLM, SCAFFOLD, w.sbench), _sc_checkpoint(w.sbench, w.svariant, w.k)),
        policy=lambda w: _sc_checkpoint(w.sbench, w.svariant, w.k),
        rollouts=SCAFFOLD.n_scouts,
        wall_s=_SC_WALL,
    resources:
        llm=_SC_LLM.slots,  # a server of its own (see _sc_llm_units)
    log:
        "logs/scaffold/{sbench}/{svariant}/cohort_eval_{k}.log",
    benchmark:
        "results/timings/scaffold/{sbench}/{svariant}/cohort_eval_{k}.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_cohort_eval.py"


_sc_chains = [(b, v) for b in _SC_BENCH for v in SCAFFOLD.variants]


rule scaffold_internalization:
    input:
        selections=[f"results/scaffold/{b}@{v}{j}/{v}/selection.parquet" for b, v in _sc_chains for j in range(_SC_COHORT_ITERS)],
        post=[f"results/scaffold/{b}@{v}{j}/{v}/post/l{i}/episodes.parquet" for b, v in _sc_chains for j in range(_SC_COHORT_ITERS) for i in range(SCAFFOLD.n_post)],
        scouts=[f"results/scaffold/{b}@{v}{j}/scouts/s{i}/episodes.parquet" for b, v in _sc_chains for j in range(_SC_COHORT_ITERS) for i in range(SCAFFOLD.n_scouts)],
        early=[f"results/scaffold/{b}@{v}{j}/{v}/cohort_early/episodes.parquet" for b, v in _sc_chains for j in range(_SC_COHORT_ITERS)],
        later=[f"results/scaffold/{b}/{v}/cohort/ckpt{k}/episodes.parquet" for b, v in _sc_chains for k in _SC_LATER],
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



# Held-out evaluation (appendix A.1): every policy, the base model (llm.model: checkpoint 0 of every chain) and
# each evaluated checkpoint of every chain (plain GRPO included), played skill-free on each benchmark's held-out
# splits (scaffold.heldout; ALFWorld valid_unseen, ScienceWorld Test-ID / Test-OOD), `heldout.rollouts` times per
# task. Part of scaffold_grpo.
_SC_HO = "results/scaffold/{hbench}/heldout"
_SC_HO_CKPTS = SCAFFOLD.heldout.checkpoints(_SC_STEPS)
_SC_HO_POLICIES = heldout_policies(SCAFFOLD.chains, _SC_HO_CKPTS)
_SC_HO_CHAIN_CKPT = {pol: (chain, k) for pol, chain, k in _SC_HO_POLICIES}
# a policy folder {chain}/ckpt{k} -> the checkpoint it plays ("": llm.model on the run's shared server)
_sc_ho_policy = lambda w: "" if w.hpolicy == "base" else _sc_checkpoint(w.hbench, *_SC_HO_CHAIN_CKPT[w.hpolicy])  # noqa: E731
_SC_HO_CONSTRAINTS = dict(hbench="|".join(_SC_BENCH) or "none",
                          hpolicy="base|(?:" + "|".join(_SC_CHAIN_NAMES) + r")/ckpt[1-9]\d*")
# The held-out jobs read the Executor's settings and the held-out ones, not the scaffold's training settings.
_sc_ho_settings = lambda w: _scaffold_cfg.fingerprint([_scaffold_check.settings_fingerprint(  # noqa: E731
    config, ("llm", "benchmark", "call_budget"), bench=w.hbench), SCAFFOLD.heldout.of(w.hbench),
    SCAFFOLD.heldout.rollouts, SCAFFOLD.executor.get(w.hbench, {}), dict(SCAFFOLD.splits.get(w.hbench, {}))])


rule scaffold_heldout:
    input:
        _SC_HELDOUT_TARGETS,


rule scaffold_heldout_tasks:
    output:
        tasks=f"{_SC_HO}/tasks.json",
        library=f"{_SC_HO}/library/v0/manifest.json",
    wildcard_constraints:
        **_SC_HO_CONSTRAINTS,
    params:
        bench=lambda w: _SC_BENCH[w.hbench],
        scaffold=SCAFFOLD,
        task_seed=_SC_TASK_SEED,
        settings=_sc_ho_settings,
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
        tasks=f"{_SC_HO}/tasks.json",
        library=f"{_SC_HO}/library/v0/manifest.json",
        policy=lambda w: _sc_ho_policy(w) or [],
    output:
        episodes=f"{_SC_HO}/{{hpolicy}}/episodes.parquet",
    wildcard_constraints:
        **_SC_HO_CONSTRAINTS,
    params:
        bench=lambda w: _SC_BENCH[w.hbench],
        llm=lambda w: policy_llm(executor_llm(_SC_LLM, SCAFFOLD, w.hbench), _sc_ho_policy(w)),
        policy=_sc_ho_policy,
        rollouts=SCAFFOLD.heldout.rollouts,
        wall_s=_SC_WALL,
        settings=_sc_ho_settings,
    resources:
        llm=lambda w: _SC_LLM.slots if _sc_ho_policy(w) else 1,  # a checkpoint gets a server of its own
    log:
        "logs/scaffold/{hbench}/heldout/{hpolicy}.log",
    benchmark:
        "results/timings/scaffold/{hbench}/heldout/{hpolicy}.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_heldout_eval.py"


_sc_chain_files = lambda pattern, chains=SCAFFOLD.chains: [  # noqa: E731
    pattern.format(b=b, c=c.name, j=j, i=i) for b in _SC_BENCH for c in chains for j in range(_SC_STEPS)
    for i in range(SCAFFOLD.n_scouts)]


rule scaffold_heldout_tables:
    input:
        episodes=[f"results/scaffold/{b}/heldout/{pol}/episodes.parquet" for b in _SC_BENCH for pol, _, _ in _SC_HO_POLICIES],
        # figure 7: the skill-free Scouts of every training iteration; figure 1: the injections
        scouts=_sc_chain_files("results/scaffold/{b}@{c}{j}/scouts/s{i}/episodes.parquet"),
        selections=sorted(set(_sc_chain_files("results/scaffold/{b}@{c}{j}/{c}/selection.parquet",
                                              [c for c in SCAFFOLD.chains if c.of]))),
    output:
        heldout=report("results/tables/scaffold_heldout.csv", caption="../report/scaffold_heldout.rst", category="SkillScaffold"),
        table1=report("results/tables/scaffold_table1.csv", caption="../report/scaffold_heldout.rst", category="SkillScaffold"),
        table2=report("results/tables/scaffold_table2.csv", caption="../report/scaffold_heldout.rst", category="SkillScaffold"),
        table3=report("results/tables/scaffold_table3.csv", caption="../report/scaffold_heldout.rst", category="SkillScaffold"),
        table6=report("results/tables/scaffold_table6.csv", caption="../report/scaffold_heldout.rst", category="SkillScaffold"),
        curve="results/tables/scaffold_training_curve.csv",
        injection="results/tables/scaffold_injection.csv",
    params:
        policies={pol: (c, k) for pol, c, k in _SC_HO_POLICIES},
        chains=list(SCAFFOLD.chains),
        envs={b: bench.env for b, bench in _SC_BENCH.items()},
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
    output:
        figure1=report("results/figures/scaffold_figure1.png", caption="../report/scaffold_heldout.rst", category="SkillScaffold"),
        figure7=report("results/figures/scaffold_figure7.png", caption="../report/scaffold_heldout.rst", category="SkillScaffold"),
    log:
        "logs/scaffold/heldout_figures.log",
    benchmark:
        "results/timings/scaffold/heldout_figures.tsv"
    conda:
        "../envs/scaffold.yaml"
    script:
        "../workflow/scripts/scaffold_heldout_figures.py"
