"""SkillScaffold: Scout i of every query, skill-free (section 4.1). Each Scout index samples with its own seed."""
import json
from pathlib import Path

from skillrepro.studies.scaffold.rollouts import episode_variant, phase_seed, play
from skillrepro.pipeline import start_job

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
w, p = snakemake.wildcards, snakemake.params
tasks = json.loads(Path(snakemake.input.queries).read_text())
plan = [(t, "", episode_variant("", "scout")) for t in tasks]
play(bench=job.settings.bench, llm=phase_seed(job.settings.llm, "scout", int(w.i)), library_dir=Path(snakemake.input.library).parent,
     plan=plan, run_id=f"scaffold/{w.sbench}", cycle=0, out_dir=Path(snakemake.output.episodes).parent,
     wall_s=p.wall_s, logger=log, policy=job.settings.policy)
