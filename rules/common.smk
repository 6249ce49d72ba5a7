import functools
import os

from skillrepro import check
from skillrepro import config as cfg
from skillrepro import pipeline
from skillrepro.benchmarks import load_benchmark
from skillrepro.llm import models

LLM = cfg.llm_config(config)
INDUCER = cfg.inducer_limits(config)
PROTOCOL = cfg.protocol(config)
BENCHMARKS = {b.name: b for b in cfg.benchmarks(config)}
METHODS = {m.variant: m for m in cfg.methods(config)}

# One shared server: the `llm` resource counts requests in flight, as many units as the server's slots.
# A job playing N episodes at once takes N units (llm_units), any other LLM job one.
workflow.global_resources.setdefault("llm", LLM.slots)


def llm_units(n_episodes, split):
    """`llm` units of a job that plays `n_episodes` episodes of `split`: as many as it has in flight."""

    def units(wildcards):
        if _one_at_a_time(wildcards.bench, wildcards.variant, split):
            return 1
        return max(1, min(LLM.episodes_in_flight, n_episodes, LLM.slots))

    return units


# The GPU an LLM job asks a cluster for. Off the local machine every LLM job starts its own server on the
# node it is given (skillrepro.llm.client.session): `vllm serve` needs a GPU, the embedded llama.cpp runs
# on the job's CPUs, and a served model (llm.base_url, backend openai) needs nothing on the node.
LLM_GPUS = 1 if LLM.backend == "vllm" and not LLM.base_url else 0


def request_gpus(rules):
    """Give each job that takes `llm` units a `gpu` resource: LLM_GPUS for a job that takes at least one
    unit, 0 otherwise (the slurm plugin asks for --gpus only when it is not 0). Called once every rule is
    defined (end of the Snakefile); a rule or profile that sets `gpu` itself keeps its own."""
    for r in rules:
        units = r.resources.get("llm")
        if units is None or "gpu" in r.resources:
            continue
        if units.is_evaluable():
            r.resources["gpu"] = _gpus_of(units)
        elif units.value:
            r.resources["gpu"] = LLM_GPUS


def _gpus_of(units):
    def gpu(wildcards, input, threads, attempt):
        taken = units.evaluate(wildcards, input=input, threads=threads, attempt=attempt).value
        return LLM_GPUS if taken else 0

    return gpu


@functools.cache
def _one_at_a_time(bench, variant, split):
    from skillrepro.runner import plays_one_at_a_time

    return plays_one_at_a_time(load_benchmark(BENCHMARKS[bench]), METHODS[variant], split)


# A snakemake killed with -9 leaves its locks behind; release them so the plain rerun works (see pipeline).
if workflow.is_main_process:
    for _lock in pipeline.release_stale_locks():
        logger.info(f"released the lock {_lock} of a snakemake run that no longer exists")


def variants_whose_sleep(works):
    """The variants whose sleep phase does work (rule induce) or only carries the library forward (rule
    carry_library), as a wildcard pattern; one that matches nothing when there are none."""
    from skillrepro.methods import get_method

    names = [v for v, m in METHODS.items() if get_method(m.method).sleeps == works]
    return "|".join(names) or "(?!)"


wildcard_constraints:
    bench="|".join(BENCHMARKS),
    variant="|".join(METHODS),
    seed=r"\d+",
    k=r"\d+",
    split="train|test",


# What every rollout, sleep phase and evaluation of a run reads from the config (its seed is in its path).
RUN_SETTINGS = ("llm", "actor", "benchmark", "call_budget", "method")


def settings(*reads):
    """A params entry: the fingerprint of exactly the config settings a job reads (see
    skillrepro.check.settings_fingerprint). Snakemake records params of plain types only, so the scripts
    rebuild their typed settings from snakemake.config and the rule carries this string instead; the job
    reruns when one of those settings changes, and only then (key order is no change). Each distinct
    fingerprint is computed once per invocation (the config does not change during one), not once per job."""

    def fingerprint(w):
        key = (reads, getattr(w, "bench", None), getattr(w, "variant", None))
        if key not in _FINGERPRINTS:
            _FINGERPRINTS[key] = check.settings_fingerprint(config, reads, bench=key[1], variant=key[2])
        return _FINGERPRINTS[key]

    return fingerprint


_FINGERPRINTS: dict = {}


def run_path(wildcards, name):
    """A file of one run (benchmark x method variant x seed)."""
    return f"results/runs/{wildcards.bench}/{wildcards.variant}/seed{wildcards.seed}/{name}"


def previous_batch(wildcards):
    """Training batch k-1 (none before batch 1), the last of the batches 0..k-1 that rollout k and sleep
    phase k read (pipeline.training_history): each batch is an ancestor of the next through the library
    chain, so one edge keeps them all in order. Listing every earlier batch made the paper preset's DAG
    quadratic in the cycles: 43,200 of its 61,784 input edges."""
    k = int(wildcards.k)
    return [run_path(wildcards, f"train/batch{k - 1}/episodes.parquet")] if k else []


def run_files(names):
    """Every name in `names`, for every run of the config."""
    return [
        f"results/runs/{b}/{v}/seed{s}/{name}"
        for b in BENCHMARKS
        for v, m in METHODS.items()
        if m.runs_on(b)
        for s in PROTOCOL.seeds
        for name in names
    ]


_server = None


def on_start():
    # A billed backend's key and prices: a dry run plans without them, a real run stops here, before any job.
    try:
        cfg.check_billing(config)
    except cfg.ConfigError as e:
        logger.error(str(e))
        raise SystemExit(1) from None
    # Which lock files this run holds (snakemake's own record; absent in other persistence backends).
    pipeline.record_lock_owner(getattr(workflow.persistence, "_lockfile", {}).values())
    pipeline.announce_logs(logger, LLM.backend)
    start_llm_server()


def on_success():
    from skillrepro.runner import forget_finished

    # Every job of this run is recorded now: the batches' resume folders are no longer needed.
    forget_finished(f for job in workflow.dag.jobs for f in job.output)
    stop_llm_server()


def start_llm_server():
    """Start the configured server unless one is given (llm.base_url) or already exported. On a cluster
    each LLM job starts its own (skillrepro.llm.session) on the node it gets, with the resources it asks for."""
    global _server
    from skillrepro.llm import servers

    if LLM.base_url or LLM.backend == "openai" or os.environ.get(servers.URL_ENV) or not workflow.local_exec:
        return
    if not any(job.resources.get("llm", 0) for job in workflow.dag.needrun_jobs()):
        return  # no job of this invocation asks for the model (e.g. the KV-cache study's replay mode)
    if LLM.backend == "embedded":  # a first run fetches the model here, with its progress on the console
        try:
            for model in {LLM.model, INDUCER.sleep_llm(LLM).model}:  # the sleep phases' too (inducer.model)
                models.resolve(model, report=logger.info)
        except models.ModelError as e:  # one line naming the model and pip's reason, not a traceback
            logger.error(str(e))
            raise SystemExit(1) from None
    _server = servers.start(LLM, workdir=".")
    os.environ[servers.URL_ENV] = _server.url
    logger.info(f"LLM server ({LLM.backend}, {LLM.model}) at {_server.url}")


def stop_llm_server():
    if _server is not None:
        _server.stop()


# The library, sleep phase and episode views of a run (rules/views.smk).
def library_page(bench, variant, seed):
    """A run's library page: unique by file name, which is how the report's captions link results."""
    return f"results/views/library/library.{bench}.{variant}.seed{seed}.html"


def view_libraries(wildcards):
    """Every library version of one run, v0 to the last sleep phase's."""
    return [run_path(wildcards, f"library/v{k}/manifest.json") for k in range(PROTOCOL.n_cycles + 1)]


def view_evaluations(table):
    """One record table of every evaluation checkpoint of one run."""

    def files(wildcards):
        return [run_path(wildcards, f"eval/v{k}/{table}.parquet") for k in PROTOCOL.checkpoints]

    return files


def view_run_id(wildcards):
    return f"{wildcards.bench}/{wildcards.variant}/seed{wildcards.seed}"


def view_library_page(wildcards):
    return library_page(wildcards.bench, wildcards.variant, wildcards.seed)


def view_transcripts(wildcards):
    """What each sleep phase of one run did: induce/v{k}/transcript.jsonl, k = 1 .. the last."""
    return [run_path(wildcards, f"induce/v{k}/transcript.jsonl") for k in range(1, PROTOCOL.n_cycles + 1)]


def sleep_pages(bench, variant, seed):
    """The folder of a run's sleep phase pages (rule sleep_view)."""
    return f"results/views/sleep/{bench}/{variant}/seed{seed}"


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
