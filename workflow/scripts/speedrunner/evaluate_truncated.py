"""Appendix F: a final library re-evaluated on the test set with only its last N skills shown to the actor
(N clipped to the library's size; n "all": every visible skill, table 8's full-library row, evaluated under the
same options as the truncated rows, a retrieval top_k raised to N); the others stay callable from the visible ones."""
import json
from dataclasses import replace
from pathlib import Path

from skillrepro.agent import EpisodeSpec
from skillrepro.studies.speedrunner.analysis.tables import truncate
from skillrepro.methods import bind
from skillrepro.pipeline import start_job
from skillrepro.studies.speedrunner.paths import run_id
from skillrepro.studies.speedrunner.settings import run_settings
from skillrepro.runner import run_batch
from skillrepro.skills import Library

job = start_job(snakemake)
log = job.log
w, p, out = snakemake.wildcards, snakemake.params, snakemake.output
final_dir = Path(snakemake.input.library).parent
run = run_settings(job.settings, snakemake, final_dir)
method = bind(replace(run.method.config, options={**run.method.config.options, **p.options}))
final = Library.load(final_dir)
shown = truncate(final, len(final.public()) if w.n == "all" else int(w.n))
shown.write(Path(out.library).parent)
# Every row shows its N skills whole (the paper's "only the last N"), whatever a retrieval top_k would list
top_k = getattr(method.options, "top_k", None)
if top_k is not None:
    method = bind(replace(method.config, options={**method.config.options, "top_k": max(top_k, shown.meta["truncated_to"])}))
log.info("v%d: showing %d of %d visible skills", final.version, shown.meta["truncated_to"], shown.meta["visible_before"])
task_ids = json.loads(Path(snakemake.input.tasks).read_text())
# Same split and cycle as the final checkpoint: the same sampling draws, only the visible skills differ.
spec = EpisodeSpec(run_id(w.bench, w.variant, w.seed), w.bench, method.config.method, w.variant, int(w.seed), "test", final.version, final.version)
run_batch(bench=run.bench, llm=run.llm, library_dir=Path(out.library).parent, task_ids=task_ids, spec=spec,
          out_dir=Path(out.episodes).parent, wall_s=p.wall_s, method=method, logger=log, sandbox=run.sandbox, prompts=run.prompts)
