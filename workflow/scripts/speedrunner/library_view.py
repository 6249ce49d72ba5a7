"""Library view of one run: every library version's functions, diff, call graph, the writes its sleep phase
refused (and why) with a link to that sleep phase's page, and use in evaluation."""
from pathlib import Path

from skillrepro.studies.speedrunner import views
from skillrepro.pipeline import start_job
from skillrepro.store import write_text

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
limits = views.ViewLimits(**snakemake.params.limits)
limits.check()
run = views.RunRecords(snakemake.params.run_id, tuple(Path(m).parent for m in snakemake.input.libraries),
                       tuple(Path(e).parent for e in snakemake.input.episodes),
                       tuple(Path(t) for t in snakemake.input.transcripts))
libraries, episodes, steps, frames, calls = run.tables(job.settings.loop.prices)
use = views.function_use(frames, episodes)
evaluated = sorted(set(episodes.library_version))
phases = run.sleep_phases()  # what each sleep phase kept and refused: an empty library says why
# each version links the page of the sleep phase that made it (rule sleep_view), if its method does such work
sleep_pages = snakemake.params.sleep_pages or None
page = views.fit(lambda lim: views.library_page(run, libraries, use, evaluated, lim, phases, sleep_pages), limits)
write_text(snakemake.output[0], page)
log.info("%s: %d versions, %d functions called in evaluation, %d writes refused in sleep phases, %d KB",
         snakemake.output[0], len(libraries), len(use), sum(len(p.refused) for p in phases.values()),
         len(page.encode()) // 1024)
