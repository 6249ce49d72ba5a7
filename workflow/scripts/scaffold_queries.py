"""SkillScaffold: the fixed queries of a benchmark, and the empty library every scaffold episode uses."""
import json

from skillrepro.check import scaffold_job
from skillrepro.pipeline import setup_logging
from skillrepro.studies.scaffold.rollouts import sample_queries
from skillrepro.skills import Library
from skillrepro.store import write_text

log = setup_logging(snakemake)
job = scaffold_job(snakemake)  # the typed settings, checked against the rule's fingerprint
p = snakemake.params
tasks = sample_queries(job.bench, job.scaffold, p.task_seed)
Library(version=0, meta={"method": "skillscaffold"}).write(snakemake.output.library.removesuffix("/manifest.json"))
write_text(snakemake.output.queries, json.dumps(tasks))
log.info("%d %s queries: %s", len(tasks), job.scaffold.split, tasks)
