"""A model's tables (headline, reuse, steps, load, success, server, overload, counters) from every run's simulations and episodes."""
import pandas as pd

from skillrepro.studies.kvcache import study
from skillrepro.pipeline import start_job
from skillrepro.store import write_text

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
inp = snakemake.input


def cat(paths):
    return pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)


tables = study.tables(summary=cat(inp.summary), steps=cat(inp.steps), load=cat(inp.load), server=cat(inp.server),
                      episodes=cat(inp.episodes), backend=snakemake.params.backend,
                      capacities=job.settings.kv.capacity_tokens, counters=cat(inp.counters),
                      policies=job.settings.kv.policies, vllm_version=job.settings.kv.vllm_version,
                      reference_format=job.settings.kv.formats[0])
for name, df in tables.items():
    write_text(snakemake.output[name], df.assign(model=snakemake.wildcards.kvmodel).to_csv(index=False))
log.info("headline (measured first):\n%s", tables["headline"].to_string(index=False))
log.info("reuse:\n%s", tables["reuse"].to_string(index=False))
log.info("first step over capacity:\n%s", tables["overload"].to_string(index=False))
log.info("success against %s:\n%s", job.settings.kv.formats[0], tables["success"].to_string(index=False))
log.info("server vs simulated:\n%s", tables["server"].to_string(index=False))
