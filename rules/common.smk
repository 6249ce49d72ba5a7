import os

from skillrepro import config as cfg

LLM = cfg.llm_config(config)
PROTOCOL = cfg.protocol(config)
BENCHMARKS = {b.name: b for b in cfg.benchmarks(config)}
METHODS = {m.variant: m for m in cfg.methods(config)}

# One shared server: jobs that call the LLM take one `llm` unit; there are as many units as server slots.
workflow.global_resources.setdefault("llm", LLM.slots)


wildcard_constraints:
    bench="|".join(BENCHMARKS),
    variant="|".join(METHODS),
    seed=r"\d+",
    k=r"\d+",
    split="train|test",


# What every rollout, sleep phase and evaluation of a run reads from the config (its seed is in its path).
RUN_SETTINGS = ("llm", "benchmark", "call_budget", "method")


def settings(*reads):
    """A params entry: the fingerprint of exactly the config settings a job reads (see
    skillrepro.config.settings_fingerprint). Snakemake records params of plain types only, so the scripts
    rebuild their typed settings from snakemake.config and the rule carries this string instead; the job
    reruns when one of those settings changes, and only then (key order is no change)."""
    return lambda w: cfg.settings_fingerprint(
        config, reads, bench=getattr(w, "bench", None), variant=getattr(w, "variant", None)
    )


def run_path(wildcards, name):
    """A file of one run (benchmark x method variant x seed)."""
    return f"results/runs/{wildcards.bench}/{wildcards.variant}/seed{wildcards.seed}/{name}"


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


def start_llm_server():
    """Start the configured server unless one is given (llm.base_url) or already exported. On a cluster
    each LLM job starts its own (skillrepro.llm.session) on the node it gets, with the resources it asks for."""
    global _server
    from skillrepro.llm import servers

    if LLM.base_url or LLM.backend == "openai" or os.environ.get(servers.URL_ENV) or not workflow.local_exec:
        return
    if not any(job.resources.get("llm", 0) for job in workflow.dag.needrun_jobs()):
        return  # no job of this invocation asks for the model (e.g. the KV-cache study's replay mode)
    _server = servers.start(LLM, workdir=".")
    os.environ[servers.URL_ENV] = _server.url
    logger.info(f"LLM server ({LLM.backend}, {LLM.model}) at {_server.url}")


def stop_llm_server():
    if _server is not None:
        _server.stop()
