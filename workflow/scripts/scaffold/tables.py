"""SkillScaffold validation tables: decision rules and utility quintiles (section 5.4), exploration view (fig. 6)."""
from pathlib import Path

import pandas as pd

from skillrepro.studies.scaffold.validation import (COMPETENCE_COLUMNS, decision_rules, eval_table, exploration_view,
                                                    pilot_competence, pilot_rollout_estimates, rollout_outcomes,
                                                    split_probes, utility_quintiles)
from skillrepro.pipeline import start_job

log = start_job(snakemake).log
i, p = snakemake.input, snakemake.params
read = lambda files: pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)  # noqa: E731
# Downstream rollouts tagged with their index k (from .../k{k}/episodes.parquet) for the pilot diagnostics.
read_k = lambda files: pd.concat([pd.read_parquet(f).assign(k=int(Path(f).parent.name[1:])) for f in files], ignore_index=True)  # noqa: E731
utils = read(i.utilities)
# the first n_eval skill-free rollouts are the baseline, the next n_probes figure 3(b)'s competence probes
free, probes = split_probes(read_k(i.eval_free), p.n_eval)
cand = read_k(i.evals)
evals = eval_table(free, cand, p.variants)
outcomes = rollout_outcomes(free, cand, p.variants)
pilot_rollout_estimates(outcomes, p.pilot_ks).to_csv(snakemake.output.pilot_rollout, index=False)
(pilot_competence(outcomes, probes, p.n_probes, interval=p.interval) if p.n_probes
 else pd.DataFrame(columns=COMPETENCE_COLUMNS)).to_csv(snakemake.output.pilot_competence, index=False)
rules = decision_rules(utils, evals, p.threshold)
quintiles = utility_quintiles(utils, evals)
exploration = exploration_view(read(i.selections), read(i.post).assign(variant=lambda d: d.variant.str.split("/").str[0]))
rules.to_csv(snakemake.output.rules, index=False)
quintiles.to_csv(snakemake.output.quintiles, index=False)
exploration.to_csv(snakemake.output.exploration, index=False)
evals.to_csv(snakemake.output.evals, index=False)
log.info("rules:\n%s\nquintiles:\n%s\nexploration:\n%s", rules, quintiles, exploration)
