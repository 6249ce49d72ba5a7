"""Library v0: empty for every method (skills are learned online, from nothing)."""
from pathlib import Path

from skillrepro.pipeline import setup_logging
from skillrepro.skills import Library

log = setup_logging(snakemake)
folder = Path(snakemake.output[0]).parent
Library(version=0, meta={"method": "init"}).write(folder)
log.info("wrote empty library %s", folder)
