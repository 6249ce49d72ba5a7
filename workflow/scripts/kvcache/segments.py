"""Per-segment token breakdown of every format's prompt at kvcache.prefix_step (seed 001, 1-1 and 2-3), and the
2-3 prompt example figure (one request per format of the first game)."""

import pandas as pd

from skillrepro.studies.kvcache import figures
from skillrepro.studies.kvcache import formats as F
from skillrepro.studies.kvcache.replay import prefix_views
from skillrepro.studies.kvcache.tokenizers import get_tokenizer
from skillrepro.pipeline import start_job
from skillrepro.store import write_text

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
kv = job.settings.kv
views = prefix_views(kv, job.settings.bench, snakemake.input.tasks, snakemake.input.get("trajectories"))
bank, tpl, encode = F.load_bank(kv.bank), F.Templates(kv.templates_dir), get_tokenizer(kv.prefix_tokenizer).encode
rows = []
for fmt in kv.formats:
    for v in views:
        for i, (name, chars, tokens) in enumerate(F.prompt_segments(fmt, bank, v, encode, tpl)):
            rows.append(dict(format=fmt, episode=v.episode, category=v.category, order=i, segment=name,
                             chars=chars, tokens=tokens))
table = pd.DataFrame(rows).assign(step=kv.prefix_step, tokenizer=kv.prefix_tokenizer, bank=F.bank_summary(bank))
write_text(snakemake.output.table, table.to_csv(index=False))
figures.segments(table, kv.prefix_step, kv.prefix_tokenizer, snakemake.output.figure)  # the 2-3 prompt example
named = table[table.segment != "template"].groupby(["format", "segment"], sort=False).tokens.mean().round(1)
log.info("mean tokens per named segment:\n%s", named.to_string())
