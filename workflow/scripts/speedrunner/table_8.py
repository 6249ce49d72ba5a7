"""Table 8: a final library re-evaluated showing only its last N skills, with the N=0 and full-library
checkpoints of the same run as reference points."""
import json
from pathlib import Path

import pandas as pd

from skillrepro.studies.speedrunner import analysis
from skillrepro.studies.speedrunner.analysis import tables
from skillrepro.pipeline import start_job
from skillrepro.store import write_text

job = start_job(snakemake)
log = job.log
inp, p = snakemake.input, snakemake.params
study = analysis.study_of(job.settings.loop, p.config_name)
episodes = analysis.episodes(inp.episodes, inp.calls, inp.skill_calls, job.settings.loop.prices)
def requested(episodes: str) -> int | str:
    """N of a truncated evaluation's folder (truncated/n{N}/), or "all"."""
    n = Path(episodes).parent.name.removeprefix("n")
    return n if n == "all" else int(n)


shown = {e: (requested(e), json.loads(Path(m).read_text())["meta"]["truncated_to"])
         for e, m in zip(inp.episodes, inp.libraries)}
trunc = tables.truncation_metrics(episodes, shown, study)
table = tables.table8(trunc, pd.read_parquet(inp.checkpoints), study)
write_text(snakemake.output[0], table.to_csv(index=False))
log.info("table 8:\n%s", table.to_string(index=False))
