"""The seminar's views of the KV-cache study, one PNG each."""
import pandas as pd

from skillrepro.studies.kvcache import figures
from skillrepro.pipeline import setup_logging

log = setup_logging(snakemake)
tables = {name: pd.read_csv(path) for name, path in snakemake.input.items()}
for name, path in snakemake.output.items():
    figures.FIGURES[name](tables, snakemake.params.kv, path)
    log.info("wrote %s", path)
