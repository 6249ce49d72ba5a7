"""SkillScaffold validation tables: decision rules and utility quintiles (section 5.4), exploration view (fig. 6)."""
import pandas as pd

from skillrepro.studies import scaffold as ss
from skillrepro.pipeline import setup_logging

log = setup_logging(snakemake)
i, p = snakemake.input, snakemake.params
read = lambda files: pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)  # noqa: E731
utils = read(i.utilities)
evals = ss.eval_table(read(i.eval_free), read(i.evals), p.variants)
rules = ss.decision_rules(utils, evals, p.threshold)
quintiles = ss.utility_quintiles(utils, evals)
exploration = ss.exploration_view(read(i.selections), read(i.post).assign(variant=lambda d: d.variant.str.split("/").str[0]))
rules.to_csv(snakemake.output.rules, index=False)
quintiles.to_csv(snakemake.output.quintiles, index=False)
exploration.to_csv(snakemake.output.exploration, index=False)
evals.to_csv(snakemake.output.evals, index=False)
log.info("rules:\n%s\nquintiles:\n%s\nexploration:\n%s", rules, quintiles, exploration)
