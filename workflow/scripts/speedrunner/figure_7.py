"""Figure 7: the inducer without its code interpreter: headline metric and output tokens per episode over training, mean ± 1 s.d. over seeds."""
import pandas as pd

from skillrepro.studies.speedrunner import analysis
from skillrepro.studies.speedrunner.analysis import figures
from skillrepro.pipeline import start_job

job = start_job(snakemake)
log = job.log
study = analysis.study_of(job.settings.loop, snakemake.params.config_name)
figures.comparison_figure(pd.read_csv(snakemake.input[0]), "fig7", study, snakemake.output[0])
log.info("wrote %s", snakemake.output[0])
