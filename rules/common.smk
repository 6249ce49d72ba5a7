import functools
import os

from skillrepro import config as cfg
from skillrepro import pipeline
from skillrepro.benchmarks import load_benchmark
from skillrepro.llm import models
from skillrepro.skills.isolation import SandboxLimits


include: "settings.smk"


_RUN = study_settings("speedrunner")
LLM, INDUCER, PROTOCOL, BENCHMARKS, METHODS = _RUN.llm, _RUN.inducer, _RUN.protocol, _RUN.benchmarks, _RUN.methods

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


# ---- What an LLM job asks a cluster for (mem_mb, cpus_per_task): every figure in this one block.
# A job needs its own Python process, an environment per episode in flight, room for one sandboxed skill call,
# and the model server it starts on its node, if any. It starts none where the model is served: llm.base_url,
# backend openai, or SKILLREPRO_LLM_URL exported before snakemake (sbatch --export=ALL hands it to every job).
# A job without LLM work asks for the profile's default-resources.
JOB_MB = {"rollout": 300, "evaluate": 300, "induce": 400}  # the job's Python; measured max_rss 130-260 MB
ENV_MB = {"babyai": 50, "crafter": 300, "scienceworld": 600, "alfworld": 400}  # per environment (scienceworld:
# a JVM at -Xmx512m, measured 350-480 MB; the others estimated); an env not listed here counts 500
SANDBOX_MB = SandboxLimits().memory_bytes >> 20  # a skill call's memory limit (skills.sandbox), once a job
# The embedded llama.cpp server: its GGUF file, its KV cache (f16, kB per token of context: layers x KV heads
# x head size x 2 x 2 bytes) for slots x ctx_per_slot tokens, and 250 MB of runtime (SmolLM2 at 2 x 4096
# tokens: 94 + 184 + 250 = 528 MB against 430-600 MB measured). A .gguf path counts its size and 64 kB/token.
EMBEDDED = {"smollm2-135m": (94, 22.5), "qwen2.5-coder-0.5b": (469, 12), "qwen2.5-coder-1.5b": (1066, 28)}
EMBEDDED_RUNTIME_MB = 250
VLLM_MB, VLLM_CPUS = 16000, 4  # `vllm serve` on the job's node: host memory and CPUs beside its GPU (estimate)
HEADROOM = 1.5  # Slurm kills a job over its memory: ask half as much again


def served(llm=LLM) -> bool:
    """Whether LLM jobs reach a served model instead of starting a server on their node."""
    from skillrepro.llm import servers

    return bool(llm.base_url) or llm.backend == "openai" or bool(os.environ.get(servers.URL_ENV))


# The GPU an LLM job asks a cluster for. Off the local machine every LLM job starts its own server on the
# node it is given (skillrepro.llm.client.session) unless the model is served: `vllm serve` needs a GPU, the
# embedded llama.cpp runs on the job's CPUs, and a served model needs nothing on the node.
LLM_GPUS = 1 if LLM.backend == "vllm" and not served() else 0


def server_mb(llm) -> int:
    """Memory of the server an LLM job starts on its node for `llm` (0 where it starts none)."""
    if served(llm):
        return 0
    if llm.backend == "vllm":
        return VLLM_MB
    gguf_mb, kv_kb = EMBEDDED.get(llm.model) or (os.path.getsize(llm.model) >> 20, 64)
    return gguf_mb + int(kv_kb * llm.slots * llm.ctx_per_slot / 1024) + EMBEDDED_RUNTIME_MB


def server_cpus(llm) -> int:
    """CPUs of the server an LLM job starts on its node: llama.cpp's threads, vLLM's engine and API processes."""
    return 0 if served(llm) else VLLM_CPUS if llm.backend == "vllm" else llm.threads


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
        return int(-(-need * HEADROOM // 100) * 100)  # rounded up to 100 MB

    return mem_mb


def job_cpus(kind):
    """cpus_per_task of an LLM job of `kind`: one for the job, and its node's server's."""
    return 1 + server_cpus(_job_llm(kind))


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
    from skillrepro.methods import bind
    from skillrepro.runner import plays_one_at_a_time

    return plays_one_at_a_time(load_benchmark(BENCHMARKS[bench]), bind(METHODS[variant]), split)


# A snakemake killed with -9 leaves its locks behind; release them so the plain rerun works (see pipeline).
if workflow.is_main_process:
    for _lock in pipeline.release_stale_locks():
        logger.info(f"released the lock {_lock} of a snakemake run that no longer exists")


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
    each LLM job starts its own (skillrepro.llm.client.session) on the node it gets, with the resources it asks for."""
    global _server
    from skillrepro.llm import servers

    needed = any(job.resources.get("llm", 0) for job in workflow.dag.needrun_jobs())
    if LLM.backend == "vllm" and LLM.base_url and needed:  # a server started by hand: can it be measured?
        from skillrepro.llm import vllm_env

        try:
            vllm_env.check_server(LLM.base_url, LLM.model)
        except vllm_env.VLLMSetupError as e:
            logger.error(f"llm.base_url: {e}")
            raise SystemExit(1) from None
    if LLM.base_url or LLM.backend == "openai" or os.environ.get(servers.URL_ENV) or not workflow.local_exec:
        return
    if not needed:
        return  # no job of this invocation asks for the model (e.g. the KV-cache study's replay mode)
    if LLM.backend == "embedded":  # a first run fetches the model here, with its progress on the console
        try:
            for model in {LLM.model, INDUCER.sleep_llm(LLM).model}:  # the sleep phases' too (inducer.model)
                models.resolve(model, report=logger.info)
        except models.ModelError as e:  # one line naming the model and pip's reason, not a traceback
            logger.error(str(e))
            raise SystemExit(1) from None
    try:
        _server = servers.start(LLM, workdir=".")
    except (models.ModelError, RuntimeError) as e:  # vLLM's setup and start errors: one line naming why
        logger.error(str(e))
        raise SystemExit(1) from None
    os.environ[servers.URL_ENV] = _server.url
    logger.info(f"LLM server ({LLM.backend}, {LLM.model}) at {_server.url}")


def stop_llm_server():
    if _server is not None:
        _server.stop()
