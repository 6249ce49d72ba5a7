"""Sleep phase view of one run: a page for each sleep phase (v{k-1} -> v{k}) showing every line of its
transcript in order: for SpeedRunner each inducer request, its reply, the tool it called and what came of it."""
import os
from pathlib import Path

from skillrepro.studies.speedrunner import views
from skillrepro.pipeline import start_job
from skillrepro.skills import Library
from skillrepro.store import atomic_dir, write_text

log = start_job(snakemake).log
limits = views.ViewLimits(**snakemake.params.limits)
limits.check()
run_id = snakemake.params.run_id
libraries = {lib.version: lib for lib in (Library.load(Path(m).parent) for m in snakemake.input.libraries)}
out = Path(snakemake.output[0])
# Pages link to the library page by its path beside them on disk (results/views/library/).
library_href = os.path.relpath(snakemake.params.library_page, out)
with atomic_dir(out) as tmp:  # the folder appears whole or not at all
    for transcript in map(Path, snakemake.input.transcripts):
        k = int(transcript.parent.name.removeprefix("v"))  # induce/v{k}/: the phase that made v{k}
        entries = views.read_transcript(transcript)
        page = views.fit(lambda lim: views.sleep_page(run_id, entries, libraries.get(k - 1), libraries[k],
                                                      library_href, lim), limits, views.sleep_shortened)
        write_text(tmp / views.sleep_page_name(run_id, k), page)
        log.info("sleep phase v%d -> v%d: %d transcript entries, %d KB", k - 1, k, len(entries),
                 len(page.encode()) // 1024)
    os.replace(tmp, out)
log.info("%s: %d sleep phase pages", out, len(snakemake.input.transcripts))
