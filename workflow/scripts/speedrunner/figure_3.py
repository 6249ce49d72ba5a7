"""Figure 3: dollar cost per training episode over training, every call counted (actor + sleep phase)."""
import pandas as pd

from skillrepro.studies.speedrunner import analysis
from skillrepro.studies.speedrunner.analysis import figures
from skillrepro.pipeline import start_job

log = start_job(snakemake).log
study = analysis.Study(**snakemake.params.study)
figures.cost_curves(pd.read_parquet(snakemake.input[0]), study, snakemake.output[0], model=snakemake.config["llm"]["model"])
log.info("wrote %s", snakemake.output[0])
