"""SkillScaffold: utility of every candidate from the paired scores (eq. 8 grp, eq. 9 anc)."""
from pathlib import Path

from skillrepro.studies import scaffold as ss
from skillrepro.pipeline import setup_logging
from skillrepro.store import write_records

log = setup_logging(snakemake)
w = snakemake.wildcards
scouts = ss.load_trajectories(Path(f).parent for f in snakemake.input.scouts)
l_none = {s.episode_id: s.mean_logprob for s in ss.read_rows(snakemake.input.scores_free, ss.ScoreRecord)}
l_cand = {(s.candidate, s.episode_id): s.mean_logprob for s in ss.read_rows(snakemake.input.scores, ss.ScoreRecord)}
cands = ss.read_rows(snakemake.input.candidates, ss.CandidateRecord)
records = []
for task_id in sorted({c.task_id for c in cands}):
    records += ss.utilities_for_query(w.sbench, w.svariant, [t for t in scouts if t.task_id == task_id],
                                      [c for c in cands if c.task_id == task_id], l_none, l_cand)
write_records(snakemake.output[0], records, ss.UtilityRecord)
for r in records:
    log.info("task=%s candidate=%d kind=%s U=%.4f eligible=%s", r.task_id, r.candidate, r.kind, r.utility, r.eligible)
