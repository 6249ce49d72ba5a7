"""Figure 3: dollar cost per training episode over training, every call counted (actor + sleep phase)."""
import pandas as pd

from skillrepro.studies.speedrunner import analysis
from skillrepro.studies.speedrunner.analysis import figures
from skillrepro.pipeline import start_job

job = start_job(snakemake)
log = job.log
study = analysis.study_of(job.settings.loop, snakemake.params.config_name)
figures.cost_curves(pd.read_parquet(snakemake.input[0]), study, snakemake.output[0], model=job.settings.loop.llm.model)
log.info("wrote %s", snakemake.output[0])
