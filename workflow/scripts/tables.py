"""main.csv (final checkpoint per benchmark x method x variant) and checkpoints.csv (every checkpoint)."""
import pandas as pd

from skillrepro import analysis
from skillrepro.pipeline import setup_logging
from skillrepro.store import write_text

log = setup_logging(snakemake)
per_seed = pd.read_parquet(snakemake.input.checkpoints)
main = analysis.main_table(per_seed)
write_text(snakemake.output.main, main.to_csv(index=False))
write_text(snakemake.output.checkpoints, analysis.checkpoint_table(per_seed).to_csv(index=False))
log.info("main table:\n%s", main.to_string(index=False))
