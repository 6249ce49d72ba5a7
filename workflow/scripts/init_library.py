"""Library v0: empty for every method (skills are learned online, from nothing). Its manifest records the
fingerprint of the run's settings; every later job of the run checks it."""
from pathlib import Path

from skillrepro.pipeline import setup_logging
from skillrepro.skills import Library

log = setup_logging(snakemake)
folder = Path(snakemake.output[0]).parent
Library(version=0, meta={"method": "init", "settings": snakemake.params.settings}).write(folder)
log.info("wrote empty library %s (settings %s)", folder, snakemake.params.settings)
