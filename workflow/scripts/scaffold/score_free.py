"""SkillScaffold: l(empty; tau) for every Scout, computed once and shared by every variant and candidate."""
from pathlib import Path

from skillrepro.studies.scaffold.records import ScoreRecord, load_trajectories
from skillrepro.studies.scaffold.rollouts import policy_server
from skillrepro.studies.scaffold.scoring import load_scorer, score_contexts, scorer_backend
from skillrepro.pipeline import start_job
from skillrepro.progress import Progress
from skillrepro.store import write_records

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
w, p = snakemake.wildcards, snakemake.params
scouts = load_trajectories(Path(f).parent for f in snakemake.input.scouts)
with policy_server(job.settings.llm, job.settings.policy if scorer_backend(job.settings.scaffold, job.settings.llm) == "vllm" else ""):
    scorer = load_scorer(job.settings.scaffold, job.settings.llm)
    with Progress(len(scouts), "scored trajectories (Scouts, skill-free)") as progress:
        records = score_contexts(scorer, scouts, {-1: ""}, bench=job.settings.bench, llm=job.settings.llm,
                                 library_dir=Path(snakemake.input.library).parent, benchmark=w.sbench, variant="",
                                 on_scored=progress.update)
write_records(snakemake.output[0], records, ScoreRecord)
log.info("%d Scouts scored skill-free with %s (%s), %d actor tokens", len(records), scorer.name, scorer.model,
         sum(r.n_tokens for r in records))
