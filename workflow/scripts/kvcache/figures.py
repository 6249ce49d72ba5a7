"""The seminar's views of the KV-cache study, one PNG each."""
import pandas as pd

from skillrepro.studies.kvcache import figures
from skillrepro.pipeline import start_job

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
tables = {name: pd.read_csv(path) for name, path in snakemake.input.items()}
for name, path in snakemake.output.items():
    figures.FIGURES[name](tables, job.settings.kv, path)
    log.info("wrote %s", path)
