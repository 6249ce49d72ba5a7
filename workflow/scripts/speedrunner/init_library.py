"""Library v0: what the variant's method starts from (empty for every learning method, as skills are learned
online from nothing; the reference method's fixed library), or the variant's start_library folder. Its manifest
records the fingerprint of the run's settings; every later job of the run checks it."""
from dataclasses import replace
from pathlib import Path

from skillrepro.pipeline import start_job
from skillrepro.skills import Library

job = start_job(snakemake)
log = job.log
folder = Path(snakemake.output[0]).parent
variant = job.settings.method
start = variant.config.start_library
library = Library.from_folder(start) if start else variant.impl.initial(job.settings.bench, variant.options)
meta = {"method": "init", **library.meta, **({"start_library": start} if start else {}),
        "settings": snakemake.params.settings}
replace(library, version=0, meta=meta).write(folder)
log.info("wrote library v0 %s: %d functions (%d public), settings %s", folder, len(library.functions),
         len(library.public()), snakemake.params.settings)
