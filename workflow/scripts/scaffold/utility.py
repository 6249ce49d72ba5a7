"""SkillScaffold: utility of every candidate from the paired scores (eq. 8 grp, eq. 9 anc)."""
from pathlib import Path

from skillrepro.studies.scaffold.records import (CandidateRecord, ScoreRecord, UtilityRecord, load_trajectories,
                                                 read_rows)
from skillrepro.studies.scaffold.selection import utilities_for_query
from skillrepro.pipeline import start_job
from skillrepro.store import write_records

log = start_job(snakemake).log
w = snakemake.wildcards
scouts = load_trajectories(Path(f).parent for f in snakemake.input.scouts)
l_none = {s.episode_id: s.mean_logprob for s in read_rows(snakemake.input.scores_free, ScoreRecord)}
l_cand = {(s.candidate, s.episode_id): s.mean_logprob for s in read_rows(snakemake.input.scores, ScoreRecord)}
cands = read_rows(snakemake.input.candidates, CandidateRecord)
records = []
for task_id in sorted({c.task_id for c in cands}):
    records += utilities_for_query(w.sbench, w.svariant, [t for t in scouts if t.task_id == task_id],
                                   [c for c in cands if c.task_id == task_id], l_none, l_cand)
write_records(snakemake.output[0], records, UtilityRecord)
for r in records:
    log.info("task=%s candidate=%d kind=%s U=%.4f eligible=%s", r.task_id, r.candidate, r.kind, r.utility, r.eligible)
