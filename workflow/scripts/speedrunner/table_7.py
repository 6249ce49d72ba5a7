"""Table 7 (appendix G.2): per model, the main comparison at its first and final checkpoint, with the paired
t-tests of SpeedRunner against each variant, from each model's checkpoints.csv and stats.csv."""
import pandas as pd

from skillrepro.studies.speedrunner import analysis
from skillrepro.studies.speedrunner.analysis import tables
from skillrepro.pipeline import start_job
from skillrepro.store import write_text

job = start_job(snakemake)
log = job.log
study = analysis.study_of(job.settings.loop, snakemake.params.config_name)
files = list(snakemake.input)
runs = {model: (pd.read_csv(files[2 * i]), pd.read_csv(files[2 * i + 1]))
        for i, model in enumerate(snakemake.params.models)}
table = tables.table7(runs, study)
if table.empty:  # a finished run has its v0 checkpoint at least: no row means no run was read
    raise ValueError(f"table 7: no test checkpoint of a main comparison in {', '.join(files)}")
write_text(snakemake.output[0], table.to_csv(index=False))
log.info("table 7:\n%s", table.to_string(index=False))
