"""stats.csv: two-sided paired t-tests of SpeedRunner against each baseline at the final checkpoint."""
import pandas as pd

from skillrepro.studies.speedrunner import analysis
from skillrepro.studies.speedrunner.analysis import statistics
from skillrepro.pipeline import start_job
from skillrepro.store import write_text

job = start_job(snakemake)
log = job.log
study = analysis.study_of(job.settings.loop, snakemake.params.config_name)
tests = statistics.paired_tests(pd.read_parquet(snakemake.input[0]), study)
write_text(snakemake.output[0], tests.to_csv(index=False))
log.info("paired tests:\n%s", tests.to_string(index=False))
