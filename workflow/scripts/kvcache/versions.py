"""What changes when the simulator follows vLLM 0.33.0 (what `pip install vllm` gives) instead of 0.11.0 (the
seminar's pin): every simulated setting of every (format, seed) run of one model under both versions."""
import pandas as pd

from skillrepro.studies.kvcache import study
from skillrepro.pipeline import start_job
from skillrepro.store import write_text

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
kv = job.settings.kv
rows = []
for fmt, seed, path in snakemake.params.runs:
    rows += [dict(format=fmt, seed=seed, **r) for r in study.version_comparison(study.read_stream(path), kv)]
table = pd.DataFrame(rows)
write_text(snakemake.output[0], table.to_csv(index=False))
log.info("vLLM 0.11.0 vs 0.33.0:\n%s", table.to_string(index=False))
