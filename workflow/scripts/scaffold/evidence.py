"""SkillScaffold: the Generator's evidence per query (grp: every Scout with its outcome; anc: the first success)."""
from pathlib import Path

from skillrepro.studies.scaffold.evidence import build_evidence, token_counter
from skillrepro.studies.scaffold.records import EvidenceRecord, load_trajectories
from skillrepro.pipeline import start_job
from skillrepro.store import write_records

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
w, p = snakemake.wildcards, snakemake.params
scouts = load_trajectories(Path(f).parent for f in snakemake.input.scouts)
by_task = {}
for t in scouts:
    by_task.setdefault(t.task_id, []).append(t)
# scaffold.evidence_max_tokens: a budget in the Generator's tokens; else evidence_max_chars characters
tokens = job.settings.scaffold.evidence_max_tokens
count = token_counter(job.settings.generator_llm) if tokens else None
records = [build_evidence(w.sbench, w.svariant, ts, tokens or job.settings.scaffold.evidence_max_chars, count)
           for ts in by_task.values()]
write_records(snakemake.output[0], records, EvidenceRecord)
for r in records:
    log.info("task=%s kind=%s successes=%d/%d skip=%s evidence=%d %s, %d turns omitted", r.task_id, r.kind,
             r.n_success, r.n_scouts, r.skip, r.evidence_size, r.budget_unit, r.n_turns_omitted)
cut = [r.task_id for r in records if r.n_turns_omitted]
if cut:
    log.warning("the evidence budget binds for %d of %d queries (Scout turns elided in the middle): %s", len(cut),
                len(records), cut)
