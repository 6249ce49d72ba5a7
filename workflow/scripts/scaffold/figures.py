"""SkillScaffold figures: (a) success rate per decision rule, (b) measured gain per utility quintile; and the
exploration view (Scout vs Post-Scout success and injection rate per Scout-group kind); figure 3(b) (candidate
effects by skill-free competence, with the best effect's null band)."""
import pandas as pd

from skillrepro.pipeline import start_job
from skillrepro.studies.scaffold.figures import competence_figure, exploration_figure, validation_figure

log = start_job(snakemake).log
i, o = snakemake.input, snakemake.output
validation_figure(pd.read_csv(i.rules), pd.read_csv(i.quintiles), o.validation)
exploration_figure(pd.read_csv(i.exploration), o.exploration)
competence_figure(pd.read_csv(i.competence), o.competence)
log.info("figures written")
