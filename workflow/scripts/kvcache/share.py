"""Seed 001, 2-2's "87 %": the tokens two same-category episodes' prompts share from the start, as a share of the
whole prompt and of the prompt without its per-step parts, per format, beside the seminar's numbers."""
import dataclasses

import pandas as pd

from skillrepro.studies.kvcache import formats as F
from skillrepro.studies.kvcache.replay import prefix_views
from skillrepro.studies.kvcache.tokenizers import get_tokenizer
from skillrepro.pipeline import start_job
from skillrepro.store import write_text

# the seminar's step-2 example in the skills-first order: 920 of 1,421 tokens shared, called "87 % of the
# prompt"; its per-step parts (2 history items, observation, admissible actions) are 363 tokens
SEMINAR = dict(seminar_shared_tokens=920, seminar_prompt_tokens=1421, seminar_claim=0.87,
               seminar_share_of_prompt=920 / 1421, seminar_share_of_fixed_part=920 / (1421 - 363))

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
kv = job.settings.kv
views = prefix_views(kv, job.settings.bench, snakemake.input.tasks, snakemake.input.get("trajectories"))
bank, tpl, encode = F.load_bank(kv.bank), F.Templates(kv.templates_dir), get_tokenizer(kv.prefix_tokenizer).encode
pairs = pd.DataFrame([dataclasses.asdict(r) for fmt in kv.formats for r in F.share_of_prompt(fmt, bank, views, encode, tpl)],
                     columns=list(F.ShareRow.__dataclass_fields__))
table = pairs.groupby("format", sort=False).agg(
    pairs=("shared_tokens", "size"), shared_tokens_mean=("shared_tokens", "mean"),
    prompt_tokens_mean=("prompt_tokens", "mean"), step_tokens_mean=("step_tokens", "mean"),
    share_of_prompt_mean=("share_of_prompt", "mean"), share_of_fixed_part_mean=("share_of_fixed_part", "mean"))
# a format whose games hold no two of one category has no pair: its row says 0 pairs, its shares are empty
table = table.reindex(list(kv.formats)).fillna({"pairs": 0}).astype({"pairs": int}).rename_axis("format").reset_index()
if pairs.empty:
    log.warning("the %d games have no two of the same category: no pair to compare (raise kvcache.n_games)", len(views))
table = table.assign(step=kv.prefix_step, tokenizer=kv.prefix_tokenizer, bank=F.bank_summary(bank), **SEMINAR)
write_text(snakemake.output[0], table.to_csv(index=False))
log.info("shared share of the prompt:\n%s", table.to_string(index=False))
