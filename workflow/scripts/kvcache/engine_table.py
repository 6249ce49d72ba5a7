"""A model's runs replayed on the vLLM engine at each KV size: the table and its figure."""
import pandas as pd

from skillrepro.pipeline import start_job
from skillrepro.store import write_text
from skillrepro.studies.kvcache import engine

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
t = engine.table(pd.concat([pd.read_parquet(p) for p in snakemake.input], ignore_index=True))
write_text(snakemake.output.table, t.to_csv(index=False))
engine.figure(t, snakemake.output.figure)
job.log.info("engine replays:\n%s", t.to_string(index=False))
