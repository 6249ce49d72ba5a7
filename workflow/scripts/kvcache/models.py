"""The study's models side by side: reuse, preemptions, first step over capacity and success per format."""
import pandas as pd

from skillrepro.studies.kvcache import figures, study
from skillrepro.pipeline import start_job
from skillrepro.store import write_text

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
inp = snakemake.input


def cat(paths):
    return pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)


table = study.model_comparison(cat(inp.reuse), cat(inp.success), cat(inp.overload), job.settings.kv,
                               headline=cat(inp.headline))
write_text(snakemake.output.table, table.to_csv(index=False))
figures.models(table, job.settings.kv, snakemake.output.figure)
log.info("models %s:\n%s", ", ".join(snakemake.params.models), table.to_string(index=False))
