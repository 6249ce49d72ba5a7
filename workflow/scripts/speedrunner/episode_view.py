"""Episode view of one run: a page for each of a bounded sample of its evaluated episodes."""
import os
from pathlib import Path

from skillrepro.studies.speedrunner import views
from skillrepro.pipeline import start_job
from skillrepro.store import atomic_dir, write_text

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
limits = views.ViewLimits(**snakemake.params.limits)
limits.check()
run_id = snakemake.params.run_id
run = views.RunRecords(run_id, tuple(Path(m).parent for m in snakemake.input.libraries),
                       tuple(Path(e).parent for e in snakemake.input.episodes))
libraries, episodes, steps, frames, calls = run.tables(job.settings.loop.prices)
by_version = {lib.version: lib for lib in libraries}
sample = views.sample_episodes(episodes, limits.episodes_per_run)
out = Path(snakemake.output[0])
# Pages link to the library page by its path beside them on disk (results/views/library/).
library_href = os.path.relpath(snakemake.params.library_page, out)
with atomic_dir(out) as tmp:  # the folder appears whole or not at all
    for i, ep in enumerate(sample.itertuples()):
        mine = lambda df: df[df.episode_id == ep.episode_id]  # noqa: E731
        page = views.fit(lambda lim: views.episode_page(ep, mine(steps), mine(frames), mine(calls),
                                                        by_version[ep.library_version], library_href, lim), limits)
        write_text(tmp / views.episode_page_name(run_id, ep.library_version, i), page)
    os.replace(tmp, out)
log.info("%s: %d of %d evaluated episodes have a page", out, len(sample), len(episodes))
