"""SkillScaffold: l(s; tau) for every Scout of a query under each of its format-valid candidates (eq. 7)."""
from pathlib import Path

from skillrepro.studies import scaffold as ss
from skillrepro.pipeline import setup_logging
from skillrepro.store import write_records

log = setup_logging(snakemake)
w, p = snakemake.wildcards, snakemake.params
scouts = ss.load_trajectories(Path(f).parent for f in snakemake.input.scouts)
cands = [c for c in ss.read_rows(snakemake.input.candidates, ss.CandidateRecord) if c.valid]
records = []
# a checkpoint scored through vLLM's prompt_logprobs needs its own server; the CPU scorer loads its GGUF
with ss.policy_server(p.llm, p.policy if cands and ss.scorer_backend(p.scaffold, p.llm) == "vllm" else ""):
    scorer = ss.load_scorer(p.scaffold, p.llm) if cands else None
    for task_id in sorted({c.task_id for c in cands}):
        contexts = {c.candidate: c.card for c in cands if c.task_id == task_id}
        records += ss.score_contexts(scorer, [t for t in scouts if t.task_id == task_id], contexts, bench=p.bench,
                                     llm=p.llm, library_dir=Path(snakemake.input.library).parent,
                                     benchmark=w.sbench, variant=w.svariant)
write_records(snakemake.output[0], records, ss.ScoreRecord)
log.info("%d valid candidates, %d Scout x candidate scores", len(cands), len(records))
