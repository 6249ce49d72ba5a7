"""SkillScaffold validation: skill-free evaluation rollout i of every query (evaluation only, never scored)."""
import json
from pathlib import Path

from skillrepro.studies.scaffold.rollouts import episode_variant, phase_seed, play
from skillrepro.pipeline import start_job

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
w, p = snakemake.wildcards, snakemake.params
plan = [(t, "", episode_variant("", "eval_free")) for t in json.loads(Path(snakemake.input.queries).read_text())]
play(bench=job.settings.bench, llm=phase_seed(job.settings.llm, "eval", int(w.i)), library_dir=Path(snakemake.input.library).parent,
     plan=plan, run_id=f"scaffold/{w.sbench}", cycle=2, out_dir=Path(snakemake.output.episodes).parent,
     wall_s=p.wall_s, logger=log, policy=job.settings.policy)
