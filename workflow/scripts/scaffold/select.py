"""SkillScaffold: positive-gated selection per query (eq. 10): the best eligible card if its utility > threshold."""
from pathlib import Path

from skillrepro.studies.scaffold.records import (CandidateRecord, SelectionRecord, UtilityRecord, load_trajectories,
                                                 read_rows)
from skillrepro.studies.scaffold.selection import selection_for_query
from skillrepro.pipeline import start_job
from skillrepro.store import write_records

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
w, p = snakemake.wildcards, snakemake.params
scouts = load_trajectories(Path(f).parent for f in snakemake.input.scouts)
cands = read_rows(snakemake.input.candidates, CandidateRecord)
utils = read_rows(snakemake.input.utilities, UtilityRecord)
ablation = job.settings.scaffold.ablation(w.svariant)  # the paper's rule unless svariant names an ablation
records = []
for task_id in sorted({t.task_id for t in scouts}):
    records.append(selection_for_query(w.sbench, w.svariant, [t for t in scouts if t.task_id == task_id],
                                       [c for c in cands if c.task_id == task_id],
                                       [u for u in utils if u.task_id == task_id], p.threshold,
                                       ablation.selection, ablation.gate))
write_records(snakemake.output[0], records, SelectionRecord)
for r in records:
    log.info("task=%s kind=%s selected=%d U=%.4f eligible=%d", r.task_id, r.kind, r.selected, r.utility, r.n_eligible)
