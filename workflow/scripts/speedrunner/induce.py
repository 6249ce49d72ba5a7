"""Sleep phase k: the variant's method turns library v{k-1} and the training history into v{k}."""
from contextlib import nullcontext
from pathlib import Path

from skillrepro.llm.servers import own_server
from skillrepro.methods import InduceContext
from skillrepro.pipeline import start_job
from skillrepro.studies.speedrunner.paths import run_id, training_history
from skillrepro.studies.speedrunner.settings import run_settings
from skillrepro.progress import Progress
from skillrepro.skills import Library
from skillrepro.store import LLMCall, write_records, write_text

job = start_job(snakemake)
log = job.log
w, p, out = snakemake.wildcards, snakemake.params, snakemake.output
previous = Path(snakemake.input.library).parent
run = run_settings(job.settings, snakemake, previous)
limits = job.settings.loop.inducer
ctx = InduceContext(
    library=Library.load(previous), cycle=int(w.k) - 1,
    history_dirs=training_history(previous, int(w.k)),
    library_root=previous.parent, out_dir=Path(out.library).parent, record_dir=Path(out.llm_calls).parent,
    run_id=run_id(w.bench, w.variant, w.seed), bench=run.bench, method=run.method.config, llm=limits.sleep_llm(run.llm), request_budget=p.request_budget,
    sandbox=run.sandbox, trajectory_tokens=p.trajectory_tokens, prompts=run.prompts,
    limits=limits,
)
method = run.method.impl
what = (f"sleep phase (v{int(w.k) - 1} -> v{w.k}, at most {p.request_budget} inducer requests on {ctx.llm.model})"
        if method.sleeps else f"sleep phase (v{int(w.k) - 1} -> v{w.k}: {method.name} carries its library forward)")
# on the console: the phase's start, a line a minute while it runs, its end
# inducer.model other than the shared server's: this job's own server (the rule then takes every llm unit)
with own_server(ctx.llm) if method.sleeps and limits.own_server(run.llm) else nullcontext(), \
        Progress(1, what) as progress:
    library = method.sleep(ctx)
    progress.update()
# Every sleep phase leaves the same declared records, even a method that makes no LLM call.
if not Path(out.llm_calls).exists():
    write_records(out.llm_calls, [], LLMCall)
if not Path(out.transcript).exists():
    write_text(out.transcript, "")
library.write(ctx.out_dir)
log.info("v%d -> v%d: %d functions (%d public)", int(w.k) - 1, library.version, len(library.functions), len(library.public()))
