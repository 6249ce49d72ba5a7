"""Section 2-2: distinct places each episode's `go to` commands reach, per (format, seed) run of one model."""
import pandas as pd

from skillrepro.studies.kvcache import study
from skillrepro.pipeline import start_job
from skillrepro.store import write_text

log = start_job(snakemake).log
per_ep = []
for fmt, seed, path in snakemake.params.runs:
    per_ep.append(study.new_locations(pd.read_parquet(path)).assign(format=fmt, seed=seed))
eps = pd.concat(per_ep)
runs = eps.groupby(["format", "seed"], sort=False).agg(
    episodes=("episode_id", "size"), new_locations_mean=("new_locations", "mean"),
    go_to_commands_mean=("go_to_commands", "mean"), steps_mean=("steps", "mean")).reset_index()
table = runs.groupby("format", sort=False).agg(
    seeds=("seed", "size"), episodes=("episodes", "sum"), new_locations_mean=("new_locations_mean", "mean"),
    new_locations_sd=("new_locations_mean", "std"), go_to_commands_mean=("go_to_commands_mean", "mean"),
    steps_mean=("steps_mean", "mean")).reset_index().assign(mode=snakemake.params.mode)
write_text(snakemake.output[0], table.to_csv(index=False))
log.info("new locations per episode:\n%s", table.to_string(index=False))
