"""Non-prefix reuse (seed 001, 2-4): chunk K/V computed elsewhere, re-rotated, vs full recomputation."""
import dataclasses

import pandas as pd

from skillrepro.llm.models import resolve
from skillrepro.studies.kvcache import blend, figures
from skillrepro.studies.kvcache import formats as F
from skillrepro.studies.kvcache.replay import read_trajectories
from skillrepro.pipeline import start_job
from skillrepro.progress import Progress
from skillrepro.store import write_text

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
kv = job.settings.kv
b = kv.blend_settings
targets = blend.targets_from_trajectories(read_trajectories(snakemake.input.trajectories), F.load_bank(kv.bank),
                                          b["min_step"], b["samples"], F.Templates(kv.templates_dir), b["spread"])
samples = blend.sample_rows(targets)
invalid = sum(not s.format_valid for s in samples)
log.info("%d samples (%s spread) from %d episodes; %d replies break the action format and are not scored",
         len(samples), b["spread"], len({s.episode for s in samples}), invalid)
blender = blend.Blender.from_gguf(str(resolve(b["model"])), threads=b["threads"])
rows = []
with Progress(len(targets), "samples") as progress:  # samples done of N on the console
    for i, target in enumerate(targets, 1):
        rows += blender.run(target)
        log.info("sample %d/%d (%s step %d): %d cells", i, len(targets), target.episode, target.step, len(rows))
        progress.update()
table = pd.DataFrame([dataclasses.asdict(r) for r in rows],
                     columns=list(blend.BlendRow.__dataclass_fields__)).assign(model=b["model"])
summary = blend.summarize(rows, b["threshold"], samples).assign(model=b["model"])
write_text(snakemake.output.table, table.to_csv(index=False))
write_text(snakemake.output.summary, summary.to_csv(index=False))
write_text(snakemake.output.samples,
           pd.DataFrame([dataclasses.asdict(s) for s in samples]).assign(model=b["model"]).to_csv(index=False))
figures.blend(table, summary, snakemake.output.figure)
log.info("summary:\n%s", summary.to_string(index=False))
