"""Static analysis: shared-prefix length between two episodes' prompts, same vs different category."""
import dataclasses

import pandas as pd

from skillrepro.studies.kvcache import formats as F
from skillrepro.studies.kvcache.replay import prefix_views
from skillrepro.studies.kvcache.tokenizers import get_tokenizer
from skillrepro.pipeline import start_job
from skillrepro.store import write_text

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
kv = job.settings.kv
views = prefix_views(kv, job.settings.bench, snakemake.input.tasks, snakemake.input.get("trajectories"))
bank = F.load_bank(kv.bank)
rows = F.shared_prefix_table(kv.formats, bank, views, get_tokenizer(kv.prefix_tokenizer).encode,
                             F.Templates(kv.templates_dir))
table = pd.DataFrame([dataclasses.asdict(r) for r in rows]).assign(step=kv.prefix_step, tokenizer=kv.prefix_tokenizer,
                                                                  bank=F.bank_summary(bank))
write_text(snakemake.output[0], table.to_csv(index=False))
log.info("shared prefix:\n%s", table.to_string(index=False))
