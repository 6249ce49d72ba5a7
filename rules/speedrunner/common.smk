# SpeedRunner's settings, paths and input functions, shared by its rules (tasks.smk ... views.smk): snakemake
# --lint asks for a rule file's functions to live apart from its rules. What every study shares is in
# rules/common.smk.
import functools

from skillrepro.benchmarks import load_benchmark
from skillrepro.skills.isolation import SandboxLimits
from skillrepro.studies.speedrunner.paths import ANALYTICS, RUN, RUN_LOG, RUN_TIMING, TASKS, VIEWS, run_id
from skillrepro.studies.speedrunner.settings import trajectory_tokens


_RUN = study_settings("speedrunner")
INDUCER, PROTOCOL, BENCHMARKS, METHODS = _RUN.inducer, _RUN.protocol, _RUN.benchmarks, _RUN.methods
# A billed model: what the runs will cost, projected from a calibration (studies/speedrunner/cost.py), once, in the
# invocation that plans (not again in every cluster job, which parses the rules too)
_PRICE = _RUN.prices.get(LLM.model)
if workflow.is_main_process and METHODS and (LLM.backend == "openai" or _PRICE and any(vars(_PRICE).values())):
    from skillrepro.studies.speedrunner.cost import summary_line  # lazy: it imports pandas, for this line only

    logger.warning(summary_line(config))
MODELS_TO_FETCH.add(INDUCER.sleep_llm(LLM).model)  # a sleep phase's own model (inducer.model), if it has one


def llm_units(n_episodes, split):
    """`llm` units of a job that plays `n_episodes` episodes of `split`: as many as it has in flight (a job
    playing N episodes at once takes N units, any other LLM job one)."""

    def units(wildcards):
        if _one_at_a_time(wildcards.bench, wildcards.variant, split):
            return 1
        return max(1, min(LLM.episodes_in_flight, n_episodes, LLM.slots))

    return units


@functools.cache
def _one_at_a_time(bench, variant, split):
    from skillrepro.methods import bind
    from skillrepro.runner import plays_one_at_a_time

    return plays_one_at_a_time(load_benchmark(BENCHMARKS[bench]), bind(METHODS[variant]), split)


# ---- What a loop job asks a cluster for (mem_mb, cpus_per_task): every figure in this one block. A job needs
# its own Python process, an environment per episode in flight (ENV_MB), room for one sandboxed skill call, and the
# model server it starts on its node, if any (rules/common.smk). A job without LLM work asks for the profile's
# default-resources.
JOB_MB = {"rollout": 300, "evaluate": 300, "induce": 400}  # the job's Python; measured max_rss 130-260 MB
SANDBOX_MB = SandboxLimits().memory_bytes >> 20  # a skill call's memory limit (skills.sandbox), once a job


def _job_llm(kind):
    """The model settings a job of `kind` starts a server for: a sleep phase's own model (inducer.model)."""
    return INDUCER.sleep_llm(LLM) if kind == "induce" and INDUCER.own_server(LLM) else LLM


def job_mem_mb(kind, units=None):
    """mem_mb of an LLM job of `kind` (a JOB_MB key); `units` (the rule's `llm` units, llm_units) gives the
    episodes it plays at once, one for a sleep phase."""

    def mem_mb(wildcards):
        episodes = units(wildcards) if units else 1
        env = ENV_MB.get(BENCHMARKS[wildcards.bench].env, 500) if kind != "induce" else 0
        need = JOB_MB[kind] + episodes * env + SANDBOX_MB + server_mb(_job_llm(kind))
        return cluster_mb(need)

    return mem_mb


def job_cpus(kind):
    """cpus_per_task of an LLM job of `kind`: one for the job, and its node's server's."""
    return 1 + server_cpus(_job_llm(kind))


def variants_whose_sleep(works):
    """The variants whose sleep phase does work (rule induce) or only carries the library forward (rule
    carry_library), as a wildcard pattern; one that matches nothing when there are none."""
    from skillrepro.methods import get_method

    names = [v for v, m in METHODS.items() if get_method(m.method).sleeps == works]
    return "|".join(names) or "(?!)"


# What SpeedRunner's wildcards match. Global, as every study's block is (Snakemake applies each to every rule, and
# never over a constraint a pattern or an earlier block already gives): a rule narrows its own.
wildcard_constraints:
    bench="|".join(BENCHMARKS),
    variant="|".join(METHODS),
    seed=r"\d+",
    k=r"\d+",
    split="train|test",


def run_path(wildcards, name):
    """A file of one run."""
    return f"{RUN.format(bench=wildcards.bench, variant=wildcards.variant, seed=wildcards.seed)}/{name}"


def previous_batch(wildcards):
    """Training batch k-1 (none before batch 1), the last of the batches 0..k-1 that rollout k and sleep
    phase k read (paths.training_history): each batch is an ancestor of the next through the library
    chain, so one edge keeps them all in order. Listing every earlier batch made the paper preset's DAG
    quadratic in the cycles: 43,200 of its 61,784 input edges."""
    k = int(wildcards.k)
    return [run_path(wildcards, f"train/batch{k - 1}/episodes.parquet")] if k else []


def run_files(names):
    """Every name in `names`, for every run of the config."""
    return [
        f"{RUN.format(bench=b, variant=v, seed=s)}/{name}"
        for b in BENCHMARKS
        for v, m in METHODS.items()
        if m.runs_on(b)
        for s in PROTOCOL.seeds
        for name in names
    ]


_server = None


# The library, sleep phase and episode views of a run (views.smk).
def library_page(bench, variant, seed):
    """A run's library page: unique by file name, which is how the report's captions link results."""
    return f"{VIEWS}/library/library.{bench}.{variant}.seed{seed}.html"


def view_libraries(wildcards):
    """Every library version of one run, v0 to the last sleep phase's."""
    return [run_path(wildcards, f"library/v{k}/manifest.json") for k in range(PROTOCOL.n_cycles + 1)]


def view_evaluations(table):
    """One record table of every evaluation checkpoint of one run."""

    def files(wildcards):
        return [run_path(wildcards, f"eval/v{k}/{table}.parquet") for k in PROTOCOL.checkpoints]

    return files


def view_library_page(wildcards):
    return library_page(wildcards.bench, wildcards.variant, wildcards.seed)


def view_transcripts(wildcards):
    """What each sleep phase of one run did: induce/v{k}/transcript.jsonl, k = 1 .. the last."""
    return [run_path(wildcards, f"induce/v{k}/transcript.jsonl") for k in range(1, PROTOCOL.n_cycles + 1)]


def sleep_pages(bench, variant, seed):
    """The folder of a run's sleep phase pages (rule sleep_view)."""
    return f"{VIEWS}/sleep/{bench}/{variant}/seed{seed}"


def has_sleep_pages(variant):
    """Whether a variant's runs get sleep phase pages: its method's sleep phase does work (rule induce), and
    there is one. A method that learns nothing (react, reference: rule carry_library) writes an empty transcript."""
    from skillrepro.methods import get_method

    return PROTOCOL.n_cycles > 0 and get_method(METHODS[variant].method).sleeps


def view_sleep_pages(wildcards):
    """The library page's link to the run's sleep phase pages, relative to it; "" when it has none."""
    if not has_sleep_pages(wildcards.variant):
        return ""
    page = library_page(wildcards.bench, wildcards.variant, wildcards.seed)
    return os.path.relpath(sleep_pages(wildcards.bench, wildcards.variant, wildcards.seed), os.path.dirname(page))
