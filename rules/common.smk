import os

from skillrepro import config as cfg

LLM = cfg.llm_config(config)
PROTOCOL = cfg.protocol(config)
BENCHMARKS = {b.name: b for b in cfg.benchmarks(config)}
METHODS = {m.variant: m for m in cfg.methods(config)}
RUN = "results/runs/{bench}/{variant}/seed{seed}"

# One shared server: jobs that call the LLM take one `llm` unit; there are as many units as server slots.
workflow.global_resources.setdefault("llm", LLM.slots)


wildcard_constraints:
    bench="|".join(BENCHMARKS),
    variant="|".join(METHODS),
    seed=r"\d+",
    k=r"\d+",


def all_runs(pattern):
    """`pattern` expanded over every (benchmark, method variant, seed) of the config."""
    return [
        pattern.format(bench=b, variant=v, seed=s)
        for b in BENCHMARKS
        for v in METHODS
        for s in PROTOCOL.seeds
    ]


def eval_outputs(wildcards=None):
    return [
        f + f"/eval/v{k}/episodes.parquet"
        for f in all_runs(RUN)
        for k in PROTOCOL.checkpoints
    ]


_server = None


def start_llm_server():
    """Start the configured server unless one is given (llm.base_url) or already exported."""
    global _server
    from skillrepro.llm import servers

    if LLM.base_url or os.environ.get(servers.URL_ENV):
        return
    _server = servers.start(LLM, workdir=".")
    os.environ[servers.URL_ENV] = _server.url
    logger.info(f"LLM server ({LLM.backend}, {LLM.model}) at {_server.url}")


def stop_llm_server():
    if _server is not None:
        _server.stop()
