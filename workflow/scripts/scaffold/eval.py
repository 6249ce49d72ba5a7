"""SkillScaffold validation: evaluation rollout i of every query with each format-valid candidate injected."""
from pathlib import Path

from skillrepro.studies.scaffold.records import CandidateRecord, read_rows
from skillrepro.studies.scaffold.rollouts import episode_variant, phase_seed, play
from skillrepro.pipeline import start_job

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
w, p = snakemake.wildcards, snakemake.params
plan = [(c.task_id, c.card, episode_variant(w.svariant, "eval", c.candidate))
        for c in read_rows(snakemake.input.candidates, CandidateRecord) if c.valid]
play(bench=job.settings.bench, llm=phase_seed(job.settings.llm, "eval", int(w.i)), library_dir=Path(snakemake.input.library).parent,
     plan=plan, run_id=f"scaffold/{w.sbench}/{w.svariant}", cycle=2,
     out_dir=Path(snakemake.output.episodes).parent, wall_s=p.wall_s, logger=log, policy=job.settings.policy)
log.info("%d query-candidate pairs evaluated", len(plan))
