"""Figures 9 and 10 (appendix G.2): the main comparison's headline metric and output tokens per episode over
training for the model analysis.cross_model_figures names, from its own run's checkpoints.csv."""
import pandas as pd

from skillrepro.studies.speedrunner import analysis
from skillrepro.studies.speedrunner.analysis import figures
from skillrepro.pipeline import start_job

job = start_job(snakemake)
log = job.log
study = analysis.study_of(job.settings.loop, snakemake.params.config_name)
source = snakemake.input[0]
figures.cross_model_figure(pd.read_csv(source), snakemake.params.model, int(snakemake.wildcards.n), study,
                           snakemake.output[0], source)
log.info("wrote %s from %s", snakemake.output[0], source)
