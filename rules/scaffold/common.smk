# SkillScaffold's settings, paths and input functions, shared by its rules (scouts.smk, grpo.smk, heldout.smk):
# snakemake --lint asks for a rule file's functions to live apart from its rules.
import dataclasses
import os

from skillrepro import config as scaffold_cfg
from skillrepro.studies.scaffold.heldout import heldout_policies
from skillrepro.studies.scaffold.paths import (DIRECT_POLICY, SC, SC_CHECKPOINT, SC_COHORT, SC_COHORT_CONTROL, SC_HO,
                                               SCAFFOLD_RESULTS, SCAFFOLD_TIMINGS, SCV, Checkpoint, CohortEval,
                                               HeldoutPolicy, Instance)
from skillrepro.studies.scaffold.settings import BASELINE, instance_policy

# The section checked against src/skillrepro/schemas/scaffold.schema.yaml and the rest of the config (a ConfigError naming the
# key, before anything is scheduled); the jobs rebuild the same settings (skillrepro.pipeline.start_job).
SCAFFOLD = study_settings("scaffold")
SC_LLM = scaffold_cfg.llm_config(config)
SC_BENCH = [b for b in config["benchmarks"] if b in SCAFFOLD.benchmarks]
SC_WALL = config["budgets"]["rollout_wall_s"]
SC_TASK_SEED = SCAFFOLD.task_seed
SC_SCORER_LLM = SCAFFOLD.scorer_backend == "vllm" or (SCAFFOLD.scorer_backend == "auto" and SC_LLM.backend == "vllm")
SC_GPU = SC_LLM.backend == "vllm"
SC_CHAIN_NAMES = [c.name for c in SCAFFOLD.chains]
SC_STEPS = {b: SCAFFOLD.steps(b) for b in SC_BENCH}  # GRPO updates per chain on each benchmark
SC_COHORT_ITERS = SCAFFOLD.training["cohort_iterations"]


# ---- What a SkillScaffold LLM job asks a cluster for: its Python, the environments it plays at once (ENV_MB) and
# the server it starts on its node (rules/common.smk: llm.model's or a GRPO checkpoint's, where nothing serves the
# model). Runtimes, in minutes: profiles/slurm/config.yaml decides (tests/project/test_packaging.py).
SC_JOB_MB = 400  # a job's Python, as SpeedRunner's (measured 130-260 MB)
SC_IN_FLIGHT = max(1, min(SC_LLM.episodes_in_flight, SC_LLM.slots))


def scaffold_mem_mb(bench="sbench", plays=True):
    """mem_mb of a job on the benchmark its wildcard `bench` names (sbench: an instance, hbench: a benchmark);
    `plays`: it plays episodes (a Generator or scorer job plays none)."""

    def mem_mb(wildcards):
        name = Instance.named(wildcards.sbench).bench if bench == "sbench" else getattr(wildcards, bench)
        envs = SC_IN_FLIGHT * ENV_MB.get(config["benchmarks"][name]["env"], 500) if plays else 0
        return cluster_mb(SC_JOB_MB + envs + server_mb(SC_LLM))

    return mem_mb


SC_CPUS = 1 + server_cpus(SC_LLM)


SC_SCOUTS = [f"{SC}/scouts/s{i}/episodes.parquet" for i in range(SCAFFOLD.n_scouts)]


# What its wildcards match (global, as every study's block: rules/speedrunner/common.smk).
wildcard_constraints:
    sbench=f"(?:{'|'.join(SC_BENCH) or 'none'})(?:@(?:{'|'.join(SC_CHAIN_NAMES)})\\d+)?",
    svariant="|".join(SCAFFOLD.variants + tuple(SCAFFOLD.ablations) + (BASELINE,)),
    i=r"\d+",
    # the held-out evaluation's benchmark and policy folder: base, base-skill, {chain}/ckpt{k}
    hbench="|".join(SC_BENCH) or "none",
    hpolicy=f"base|{DIRECT_POLICY}|(?:" + "|".join(SC_CHAIN_NAMES) + r")/ckpt[1-9]\d*",


def scaffold_policy(wildcards):
    """The GRPO checkpoint that plays an instance ("": llm.model on the run's shared server)."""
    return instance_policy(wildcards.sbench)


def scaffold_policy_input(wildcards):
    """A job played by a checkpoint reads it (and starts its own server for it)."""
    return instance_policy(wildcards.sbench) or []


def scaffold_llm_units(wildcards):
    """`llm` units: every one for a job serving a checkpoint itself (two llama.cpp servers on the same cores slow
    each other many times over), else one."""
    return SC_LLM.slots if instance_policy(wildcards.sbench) else 1


def scaffold_torch_units(wildcards=None):
    """`llm` units of a job computing with torch on the CPU (the scorer, the GRPO update): every one where the
    embedded llama.cpp server shares this machine's cores, so that no request is in flight while it runs; else
    none. Side by side the two each ran about twice as slow or worse on 2 cores (a skill-free scoring job beside
    the Generator's requests: 43 s and 40 s; one after the other, 8 s and 10 s)."""
    return SC_LLM.slots if SC_LLM.backend == "embedded" and workflow.local_exec else 0


def scaffold_scorer_units(wildcards):
    """`llm` units of a scoring job: as a playing job's where the scorer is the LLM server, else a torch job's."""
    return scaffold_llm_units(wildcards) if SC_SCORER_LLM else scaffold_torch_units()


def scaffold_task_seed(wildcards):
    """A training iteration's query batch has a seed of its own, shared by the chains of every utility variant."""
    inst = Instance.named(wildcards.sbench)
    return SC_TASK_SEED + (1 + inst.iteration if inst.chain else 0)


def scaffold_files(pattern, variants=SCAFFOLD.variants):
    """Every benchmark x variant instance of a path pattern (keys sbench, svariant)."""
    return [pattern.format(sbench=b, svariant=v) for b in SC_BENCH for v in variants]


def scaffold_base(name):
    """An ablation's input `name`: the file of the utility variant it is built on (its cards and utilities)."""

    def path(wildcards):
        return f"{Instance.named(wildcards.sbench).folder}/{SCAFFOLD.ablation(wildcards.svariant).of}/{name}"

    return path


def scaffold_post_selection(wildcards):
    """The selection the Post-Scouts follow (plain GRPO has no Generator: its Post-Scouts play skill-free)."""
    if wildcards.svariant == BASELINE:
        return []
    return f"{Instance.named(wildcards.sbench).folder}/{wildcards.svariant}/selection.parquet"


def scaffold_inject(wildcards):
    """Table 3's "Generator learning without injection": a training chain's Post-Scouts stay skill-free."""
    chain = Instance.named(wildcards.sbench).chain
    return chain is None or SCAFFOLD.chain(chain).inject


# GRPO joint training (section 4.5): update k trains checkpoint k-1 on iteration k-1 of its chain. Not part
# of scaffold_all. On the CPU the policy is the GGUF model dequantised into transformers and each checkpoint is
# written back as GGUF for llama.cpp; at paper scale set scaffold.training.model to the Hugging Face id.
def scaffold_previous(*names):
    """Inputs: files `names` (key svariant: the job's) of iteration k-1 of the job's chain, which update k trains
    on."""

    def files(wildcards):
        folder = Instance(wildcards.sbench, wildcards.svariant, int(wildcards.k) - 1).folder
        return [f"{folder}/{n.format(svariant=wildcards.svariant)}" for n in names]

    return files


def scaffold_cards(name):
    """An input: a file of iteration k-1's cards, under the chain's utility variant (plain GRPO has none)."""

    def files(wildcards):
        if wildcards.svariant == BASELINE:
            return []
        chain = SCAFFOLD.chain(wildcards.svariant)
        return [f"{Instance(wildcards.sbench, wildcards.svariant, int(wildcards.k) - 1).folder}/{chain.of}/{name}"]

    return files


def scaffold_update_policy(wildcards):
    """The checkpoint update k starts from (update 1: the base model, no input)."""
    k = int(wildcards.k)
    return Checkpoint(wildcards.sbench, wildcards.svariant, k - 1).folder if k > 1 else ""


def scaffold_update_input(wildcards):
    """Update k reads checkpoint k-1 (none for update 1)."""
    return scaffold_update_policy(wildcards) or []


def scaffold_group_size(wildcards):
    """Samples per query of an update: N + L Executor trajectories, and M cards but for plain GRPO."""
    return SCAFFOLD.n_scouts + SCAFFOLD.n_post + (0 if wildcards.svariant == BASELINE else SCAFFOLD.n_candidates)


def scaffold_m(wildcards):
    """Cards per query an update trains the Generator on (plain GRPO: none)."""
    return 0 if wildcards.svariant == BASELINE else SCAFFOLD.n_candidates


def scaffold_last_checkpoints():
    """Every chain's last checkpoint on every benchmark (table 5's steps per benchmark)."""
    return [Checkpoint(b, c, SC_STEPS[b]).folder for b in SC_BENCH for c in SC_CHAIN_NAMES]


# Held-out evaluation (appendix A.1; tables 1, 2, 3, 6, figures 1 and 7).
# Figures 6 and 8-12 measured during training: each iteration's Scouts, Post-Scouts and selections (no held-out run).
SC_HELDOUT_TARGETS = [f"{TABLES}/scaffold_{t}.csv" for t in ("heldout", "table1", "table2", "table3", "table6",
                                                             "training_curve", "injection",
                                                             "training_exploration")] + [
    f"{FIGURES}/scaffold_{f}.png" for f in ("figure1", "figure6", "figure7", "figure8")]


# Internalization (table 4): the cohort of the first `training.cohort_iterations` iterations' queries that
# skill-assisted exploration helped (chosen on their Scouts and Post-Scouts), played skill-free N times each by
# the checkpoint that chose it (fresh, independent rollouts: the early success) and by each later checkpoint.
SC_CHAINS = [(b, v) for b in SC_BENCH for v in SCAFFOLD.variants]


def scaffold_later(bench):
    """The checkpoints trained on every cohort iteration, on `bench`."""
    return range(SC_COHORT_ITERS, SC_STEPS[bench] + 1)


def scaffold_cohort_files(name):
    """An input: file `name` (keys v: the chain's variant, i: a Post-Scout index) of each cohort iteration of the
    job's chain, for every Post-Scout if it names one."""

    def files(wildcards):
        post = range(SCAFFOLD.n_post) if "{i}" in name else [0]
        return [f"{Instance(wildcards.sbench, wildcards.svariant, j).folder}/{name.format(v=wildcards.svariant, i=i)}"
                for j in range(SC_COHORT_ITERS) for i in post]

    return files


def scaffold_chain_library(wildcards):
    """The library a chain's cohort is played with: its first iteration's, empty (the cohort plays skill-free)."""
    return f"{Instance(wildcards.sbench, wildcards.svariant, 0).folder}/library/v0/manifest.json"


def scaffold_cohort_policy(wildcards):
    """Checkpoint k of the chain, which a cohort evaluation plays."""
    return Checkpoint(wildcards.sbench, wildcards.svariant, int(wildcards.k)).folder


def scaffold_control_policy(wildcards):
    """Checkpoint k of plain GRPO, which table 4's control plays on a SkillScaffold chain's cohort."""
    return Checkpoint(wildcards.sbench, BASELINE, int(wildcards.k)).folder


# Held-out evaluation (appendix A.1): every policy, the base model (llm.model: checkpoint 0 of every chain) and
# each evaluated checkpoint of every chain (plain GRPO included), played skill-free on each benchmark's held-out
# splits (scaffold.heldout; ALFWorld valid_unseen, ScienceWorld Test-ID / Test-OOD), `heldout.rollouts` times per
# task. Part of scaffold_grpo.
# benchmark -> every evaluated policy: base, {chain}/ckpt{k} (and base-skill: the base model with the card of
# scaffold.heldout.skills, the direct-skill-prompting baseline)
SC_HO_POLICIES = {b: heldout_policies(b, SCAFFOLD.chains, SCAFFOLD.heldout.checkpoints(SC_STEPS[b]),
                                      b in SCAFFOLD.heldout.skills) for b in SC_BENCH}


def scaffold_heldout_policy(wildcards):
    """The checkpoint a held-out policy folder ({chain}/ckpt{k}) plays ("" for base and base-skill: llm.model on the
    shared server)."""
    played = HeldoutPolicy.named(wildcards.hbench, wildcards.hpolicy).checkpoint
    return played.folder if played else ""


def scaffold_heldout_input(wildcards):
    """A held-out job played by a checkpoint reads it."""
    return scaffold_heldout_policy(wildcards) or []


def scaffold_heldout_card(wildcards):
    """The card file base-skill plays with (none for every other policy)."""
    return [SCAFFOLD.heldout.skills[wildcards.hbench]] if wildcards.hpolicy == DIRECT_POLICY else []


def scaffold_heldout_units(wildcards):
    """`llm` units: a checkpoint gets a server of its own (see scaffold_llm_units)."""
    return SC_LLM.slots if scaffold_heldout_policy(wildcards) else 1


def scaffold_chain_files(name, chains=SCAFFOLD.chains):
    """File `name` (keys c: the chain, i: a Scout index) of every benchmark x chain x training iteration x Scout
    index."""
    return [f"{Instance(b, c.name, j).folder}/{name.format(c=c.name, i=i)}" for b in SC_BENCH for c in chains
            for j in range(SC_STEPS[b]) for i in range(SCAFFOLD.n_scouts)]
