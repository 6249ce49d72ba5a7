"""SkillScaffold: the fixed queries of a benchmark, and the empty library every scaffold episode uses."""
import json

from skillrepro.pipeline import start_job
from skillrepro.studies.scaffold.rollouts import sample_queries
from skillrepro.skills import Library
from skillrepro.store import write_text

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
p = snakemake.params
tasks = sample_queries(job.settings.bench, job.settings.scaffold, p.task_seed)
Library(version=0, meta={"method": "skillscaffold"}).write(snakemake.output.library.removesuffix("/manifest.json"))
write_text(snakemake.output.queries, json.dumps(tasks))
log.info("%d %s queries: %s", len(tasks), job.settings.scaffold.split, tasks)
