"""DuckDB over exactly the declared record files: every test episode (with its actor cost and skill calls), per-seed
checkpoint metrics, the cost of every training cycle (all its calls plus the sleep phase after it), and how every
episode ended (terminations.csv, a warning in the log for each row an episode ended by a full context)."""
from pathlib import Path

import pyarrow as pa

from skillrepro import store
from skillrepro.studies.speedrunner import analysis
from skillrepro.pipeline import start_job

job = start_job(snakemake)
log = job.log
inp, out, p = snakemake.input, snakemake.output, snakemake.params
study = analysis.study_of(job.settings.loop, p.config_name)
if not inp.test_episodes:  # a SpeedRunner table asked of a config that runs none: an empty table would pass for one
    why = (f"{p.config_name} declares no SpeedRunner runs (config section `methods` is not set), so there is nothing "
           "to tabulate; set `methods` or ask for another study's target")
    log.error(why)
    raise SystemExit(why)


def siblings(episode_files, name):
    """The record `name` written by the same job as each episodes.parquet (the rule lists one file a job)."""
    return [str(Path(f).with_name(name)) for f in episode_files]


test = analysis.episodes(inp.test_episodes, siblings(inp.test_episodes, "llm_calls.parquet"),
                         siblings(inp.test_episodes, "skill_calls.parquet"), job.settings.loop.prices)
train_calls = siblings(inp.train_episodes, "llm_calls.parquet")
train = analysis.episodes(inp.train_episodes, train_calls, siblings(inp.train_episodes, "skill_calls.parquet"), job.settings.loop.prices)
calls = analysis.batch_calls([*train_calls, *inp.sleep_calls], job.settings.loop.prices)
per_seed = analysis.checkpoint_metrics(test, study)
training = analysis.training_cost(train, calls, study)
for path, frame in ((out.episodes, test), (out.checkpoints, per_seed), (out.training, training)):
    store.write_table(path, pa.Table.from_pandas(frame, preserve_index=False))
terminations = analysis.termination_counts(test, train)
store.write_text(out.terminations, terminations.to_csv(index=False))
for row in terminations[terminations.flag != ""].itertuples():
    log.warning("%s/%s %s v%d on %s: %s", row.run_benchmark, row.variant, row.split, row.library_version,
                row.eval_benchmark, row.flag)
log.info("%d test episodes from %d files, %d checkpoint rows, %d training cycles (%d sleep phases)",
         len(test), len(inp.test_episodes), len(per_seed), len(training), len(inp.sleep_calls))
