"""Library v0: what the variant's method starts from (empty for every learning method, as skills are learned
online from nothing; the reference method's fixed library). Its manifest records the fingerprint of the
run's settings; every later job of the run checks it."""
from dataclasses import replace
from pathlib import Path

from skillrepro import config as cfg
from skillrepro.methods import get_method
from skillrepro.pipeline import start_job

log = start_job(snakemake).log
folder = Path(snakemake.output[0]).parent
w, c = snakemake.wildcards, snakemake.config
bench, method = cfg.benchmark(c, w.bench), cfg.method(c, w.variant)
impl = get_method(method.method)
library = impl.initial(bench, impl.parse_options(method.options, method.variant))
meta = {"method": "init", **library.meta, "settings": snakemake.params.settings}
replace(library, version=0, meta=meta).write(folder)
log.info("wrote library v0 %s: %d functions (%d public), settings %s", folder, len(library.functions),
         len(library.public()), snakemake.params.settings)
