"""SkillScaffold validation: evaluation rollout i of every query with each format-valid candidate injected."""
from pathlib import Path

from skillrepro.studies import scaffold as ss
from skillrepro.pipeline import setup_logging

log = setup_logging(snakemake)
w, p = snakemake.wildcards, snakemake.params
plan = [(c.task_id, c.card, ss.episode_variant(w.svariant, "eval", c.candidate))
        for c in ss.read_rows(snakemake.input.candidates, ss.CandidateRecord) if c.valid]
ss.play(bench=p.bench, llm=ss.phase_seed(p.llm, "eval", int(w.i)), library_dir=Path(snakemake.input.library).parent,
        plan=plan, run_id=f"scaffold/{w.sbench}/{w.svariant}", cycle=2,
        out_dir=Path(snakemake.output.episodes).parent, wall_s=p.wall_s, logger=log, policy=p.policy)
log.info("%d query-candidate pairs evaluated", len(plan))
