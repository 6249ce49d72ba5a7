"""SkillScaffold: the Generator's evidence per query (grp: every Scout with its outcome; anc: the first success)."""
from pathlib import Path

from skillrepro.studies import scaffold as ss
from skillrepro.pipeline import setup_logging
from skillrepro.store import write_records

log = setup_logging(snakemake)
w, p = snakemake.wildcards, snakemake.params
scouts = ss.load_trajectories(Path(f).parent for f in snakemake.input.scouts)
by_task = {}
for t in scouts:
    by_task.setdefault(t.task_id, []).append(t)
records = [ss.build_evidence(w.sbench, w.svariant, ts, p.scaffold.evidence_max_chars) for ts in by_task.values()]
write_records(snakemake.output[0], records, ss.EvidenceRecord)
for r in records:
    log.info("task=%s kind=%s successes=%d/%d skip=%s", r.task_id, r.kind, r.n_success, r.n_scouts, r.skip)
