"""SkillScaffold: l(s; tau) for every Scout of a query under each of its format-valid candidates (eq. 7)."""
from pathlib import Path

from skillrepro.studies.scaffold.records import CandidateRecord, ScoreRecord, load_trajectories, read_rows
from skillrepro.studies.scaffold.rollouts import policy_server
from skillrepro.studies.scaffold.scoring import load_scorer, score_contexts, scorer_backend
from skillrepro.pipeline import start_job
from skillrepro.progress import Progress
from skillrepro.store import write_records

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
w, p = snakemake.wildcards, snakemake.params
scouts = load_trajectories(Path(f).parent for f in snakemake.input.scouts)
cands = [c for c in read_rows(snakemake.input.candidates, CandidateRecord) if c.valid]
records = []
tasks = sorted({c.task_id for c in cands})
pairs = sum(sum(t.task_id == task_id for t in scouts) * sum(c.task_id == task_id for c in cands) for task_id in tasks)
# a checkpoint scored through vLLM's prompt_logprobs needs its own server; the CPU scorer loads its GGUF
with policy_server(job.settings.llm, job.settings.policy if cands and scorer_backend(job.settings.scaffold, job.settings.llm) == "vllm" else ""):
    scorer = load_scorer(job.settings.scaffold, job.settings.llm) if cands else None
    with Progress(pairs, "scored trajectories (Scout x candidate)") as progress:
        for task_id in tasks:
            contexts = {c.candidate: c.card for c in cands if c.task_id == task_id}
            records += score_contexts(scorer, [t for t in scouts if t.task_id == task_id], contexts,
                                      bench=job.settings.bench, llm=job.settings.llm, library_dir=Path(snakemake.input.library).parent,
                                      benchmark=w.sbench, variant=w.svariant, on_scored=progress.update)
write_records(snakemake.output[0], records, ScoreRecord)
log.info("%d valid candidates, %d Scout x candidate scores", len(cands), len(records))
