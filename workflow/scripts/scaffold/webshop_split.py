"""SkillScaffold: WebShop goals split by domain and goal index (appendix A.1), with counts per split and domain."""
import json
from pathlib import Path

import pandas as pd

from skillrepro.pipeline import start_job
from skillrepro.store import write_text
from skillrepro.studies.scaffold.data import load_webshop_goals, webshop_splits

log = start_job(snakemake).log
goals = load_webshop_goals(Path(snakemake.input.human).parent)
splits = webshop_splits(goals)
write_text(snakemake.output.splits, json.dumps({k: [g.index for g in v] for k, v in splits.items()}))
counts = pd.DataFrame([{"split": k, "domain": g.domain} for k, v in splits.items() for g in v])
counts = counts.groupby(["split", "domain"]).size().rename("n_goals").reset_index()
counts.to_csv(snakemake.output.counts, index=False)
log.info("%d goals; split sizes %s\n%s", len(goals), {k: len(v) for k, v in splits.items()}, counts)
