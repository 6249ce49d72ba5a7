"""SkillScaffold validation: skill-free evaluation rollout i of every query (evaluation only, never scored)."""
import json
from pathlib import Path

from skillrepro.studies.scaffold.rollouts import episode_variant, phase_seed, play
from skillrepro.check import scaffold_job
from skillrepro.pipeline import setup_logging

log = setup_logging(snakemake)
job = scaffold_job(snakemake)  # the typed settings, checked against the rule's fingerprint
w, p = snakemake.wildcards, snakemake.params
plan = [(t, "", episode_variant("", "eval_free")) for t in json.loads(Path(snakemake.input.queries).read_text())]
play(bench=job.bench, llm=phase_seed(job.llm, "eval", int(w.i)), library_dir=Path(snakemake.input.library).parent,
     plan=plan, run_id=f"scaffold/{w.sbench}", cycle=2, out_dir=Path(snakemake.output.episodes).parent,
     wall_s=p.wall_s, logger=log, policy=job.policy)
