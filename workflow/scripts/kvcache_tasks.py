"""The games every (format, seed) run plays: n_games ids of the configured split."""
import json

from skillrepro.studies.kvcache import formats as F
from skillrepro.studies.kvcache.actor import format_benchmark
from skillrepro.pipeline import setup_logging
from skillrepro.store import write_text

log = setup_logging(snakemake)
kv = snakemake.params.kv
ids = format_benchmark(snakemake.params.bench).sample_tasks(kv.split, kv.n_games, kv.task_seed)
bank = F.bank_summary(F.load_bank(kv.bank))
log.info("skill bank %s", bank)
write_text(snakemake.output[0], json.dumps({"split": kv.split, "tasks": ids, "bank": bank}, indent=1))
log.info("%d %s games: %s", len(ids), kv.split, ", ".join(ids))
