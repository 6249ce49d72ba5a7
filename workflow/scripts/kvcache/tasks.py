"""The games every (format, seed) run plays: n_games ids of the configured split. The study's first job, so it
says which games (official ALFWorld or generated) in its log and on the console."""
import json
import logging

from skillrepro.progress import PROGRESS_LOGGER
from skillrepro.studies.kvcache import formats as F
from skillrepro.studies.kvcache import settings
from skillrepro.studies.kvcache.actor import format_benchmark
from skillrepro.pipeline import start_job
from skillrepro.store import write_text

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
kv = job.settings.kv
bench = format_benchmark(job.settings.bench)
ids = bench.sample_tasks(kv.split, kv.n_games, kv.task_seed)
bank = F.bank_summary(F.load_bank(kv.bank))
games = settings.games_note(ids, kv.split, getattr(bench, "data_path", None), kv.benchmark)
logging.getLogger(PROGRESS_LOGGER).info("%s; skill bank %s", games, bank)  # console and log
write_text(snakemake.output[0], json.dumps({"split": kv.split, "tasks": ids, "bank": bank, "games": games}, indent=1))
log.info("%d %s games: %s", len(ids), kv.split, ", ".join(ids))
