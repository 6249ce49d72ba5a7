"""Figure 11: the performance-efficiency plane of this config's model and of every analysis.cross_model run."""
import pandas as pd

from skillrepro.studies.speedrunner import analysis
from skillrepro.studies.speedrunner.analysis import figures
from skillrepro.pipeline import start_job

job = start_job(snakemake)
log = job.log
study = analysis.study_of(job.settings.loop, snakemake.params.config_name)
tables = [snakemake.input.main, *snakemake.input.others]
figures.plane_figure(dict(zip(snakemake.params.labels, map(pd.read_csv, tables))), study, snakemake.output[0])
log.info("wrote %s from %s", snakemake.output[0], ", ".join(tables))
