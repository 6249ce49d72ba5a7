"""Section 2-1: where each request stops sharing its episode's previous prompt, and the reuse ceiling that
leaves, per (format, seed) run of one model."""
import dataclasses

import pandas as pd

from skillrepro.studies.kvcache import study
from skillrepro.studies.kvcache.tokenizers import get_tokenizer
from skillrepro.pipeline import start_job
from skillrepro.store import write_text

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
kv = job.settings.kv
# the recorded ids are the prefix tokenizer's in replay mode; a live server's need not be, so no decoding
decode = get_tokenizer(kv.prefix_tokenizer).decode if kv.replay and kv.prefix_tokenizer == "qwen2.5" else None
rows, runs = [], []
for fmt, seed, path in snakemake.params.runs:
    stream = study.read_stream(path)
    b = pd.DataFrame([dataclasses.asdict(r) for r in study.break_points(stream, kv.block_size, decode)],
                     columns=list(study.BreakRow.__dataclass_fields__))
    total = sum(len(r.token_ids) for r in stream)
    # from step 2 on both prompts carry the skills (SkillRL's step 0 has none): the steady break point
    late = b[b.step >= 2]
    runs.append(dict(format=fmt, seed=seed, requests=len(stream), requests_from_step2=len(late),
                     break_fraction_median=late.break_fraction.median(), break_fraction_min=late.break_fraction.min(),
                     break_fraction_max=late.break_fraction.max(),
                     # the most an own-episode prefix cache could reuse over the whole run (first steps give none)
                     reuse_ceiling=b.ceiling_tokens.sum() / max(total, 1),
                     break_text_most_common=late.break_text.mode().iloc[0] if decode and len(late) else ""))
    rows.append(b.assign(format=fmt, seed=seed))
table = pd.DataFrame(runs)
write_text(snakemake.output.table, table.to_csv(index=False))
write_text(snakemake.output.requests, pd.concat(rows).to_csv(index=False))
log.info("break points:\n%s", table.to_string(index=False))
