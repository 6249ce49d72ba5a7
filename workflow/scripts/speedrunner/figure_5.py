"""Figure 5: final progression relative to ReAct at each zombie frequency, with the %Combat overlay."""
from pathlib import Path

import pandas as pd

from skillrepro.studies.speedrunner import analysis
from skillrepro.studies.speedrunner.analysis import figures, tables
from skillrepro.pipeline import start_job
from skillrepro.studies.speedrunner.paths import Run
from skillrepro.skills import Library
from skillrepro.store import write_text

job = start_job(snakemake)
log = job.log
study = analysis.study_of(job.settings.loop, snakemake.params.config_name)
combat = pd.DataFrame([
    {"benchmark": Run.of(m).bench, "variant": Run.of(m).variant, "combat_share": tables.combat_share(Library.load(Path(m).parent))}
    for m in snakemake.input.libraries  # results/runs/{bench}/{variant}/seed{seed}/library/v{k}/manifest.json
], columns=["benchmark", "variant", "combat_share"])
table = tables.zombie_table(pd.read_parquet(snakemake.input.checkpoints), combat, study)
write_text(snakemake.output.table, table.to_csv(index=False))
figures.zombie_figure(table, study, snakemake.output.figure)
log.info("figure 5:\n%s", table.to_string(index=False))
