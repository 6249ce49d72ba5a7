"""The study's models side by side: reuse, preemptions, first step over capacity and success per format."""
import pandas as pd

from skillrepro.studies.kvcache import figures, study
from skillrepro.pipeline import setup_logging
from skillrepro.store import write_text

log = setup_logging(snakemake)
inp = snakemake.input


def cat(paths):
    return pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)


table = study.model_comparison(cat(inp.reuse), cat(inp.success), cat(inp.overload), snakemake.params.kv,
                               headline=cat(inp.headline))
write_text(snakemake.output.table, table.to_csv(index=False))
figures.models(table, snakemake.params.kv, snakemake.output.figure)
log.info("models %s:\n%s", ", ".join(snakemake.params.models), table.to_string(index=False))
