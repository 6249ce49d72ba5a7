"""DuckDB over every Parquet record under results/: per-seed checkpoint metrics and training episodes."""
import pyarrow as pa

from skillrepro import analysis, store
from skillrepro.pipeline import setup_logging

log = setup_logging(snakemake)
con = store.connect("results/runs")
per_seed = analysis.checkpoint_metrics(con, snakemake.params.pricing, snakemake.params.protocol.sleep_every)
training = analysis.training_episodes(con)
store.write_table(snakemake.output.checkpoints, pa.Table.from_pandas(per_seed, preserve_index=False))
store.write_table(snakemake.output.training, pa.Table.from_pandas(training, preserve_index=False))
log.info("%d checkpoint rows, %d training episodes", len(per_seed), len(training))
