"""A phase change (distribution shift): v0 of this run is the earlier phase's final library (functions and
notes) unchanged, recording this run's settings like every v0."""
from dataclasses import replace
from pathlib import Path

from skillrepro.pipeline import start_job
from skillrepro.skills import Library

log = start_job(snakemake).log
source = Path(snakemake.input[0]).parent
library = Library.load(source)
meta = {**library.meta, "continued_from": str(source), "settings": snakemake.params.settings}
replace(library, version=0, meta=meta).write(Path(snakemake.output[0]).parent)
log.info("v0 = %s: %d functions, %d characters of notes", source, len(library.functions), len(library.notes))
