"""Sleep phase k: the method's learner turns library v{k-1} and the training history into v{k}."""
from pathlib import Path

from skillrepro.learners import InduceContext, get_learner
from skillrepro.pipeline import run_id, seeded, setup_logging
from skillrepro.skills import Library

log = setup_logging(snakemake)
w, p = snakemake.wildcards, snakemake.params
previous = Path(snakemake.input.library).parent
ctx = InduceContext(
    library=Library.load(previous), cycle=int(w.k) - 1,
    history_dirs=tuple(Path(b).parent for b in snakemake.input.batches),
    library_root=previous.parent, out_dir=Path(snakemake.output[0]).parent, run_id=run_id(w),
    bench=p.bench, method=p.method, llm=seeded(p.llm, w.seed), request_budget=p.request_budget,
)
library = get_learner(p.method.learner).induce(ctx)
library.write(ctx.out_dir)
log.info("v%d -> v%d: %d functions (%d public)", int(w.k) - 1, library.version, len(library.functions), len(library.public()))
