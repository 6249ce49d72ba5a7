"""Checkpoint: the held-out test tasks played with library v{k} (no learning happens here)."""
import json
from pathlib import Path

from skillrepro.agent import EpisodeSpec
from skillrepro.pipeline import run_id, seeded, setup_logging
from skillrepro.runner import run_batch

log = setup_logging(snakemake)
w, p = snakemake.wildcards, snakemake.params
task_ids = json.loads(Path(snakemake.input.tasks).read_text())["test"]
spec = EpisodeSpec(run_id(w), w.bench, p.method.method, w.variant, int(w.seed), "test", int(w.k), int(w.k))
run_batch(bench=p.bench, llm=seeded(p.llm, w.seed), library_dir=Path(snakemake.input.library).parent,
          task_ids=task_ids, spec=spec, out_dir=Path(snakemake.output.episodes).parent, wall_s=p.wall_s,
          method=p.method, logger=log)
