# The library view, the sleep phase view and the episode view of every run (src/skillrepro/studies/speedrunner/views.py): HTML pages
# made from the run's records, in the report under "Libraries", "Sleep phases" and "Episodes". Their sizes are
# bounded by analysis.views; the helpers that name their files are in rules/common.smk.
VIEW_LIMITS = _RUN.analysis["views"]
VIEW_TABLES = ("episodes", "steps", "skill_calls", "llm_calls")  # of every checkpoint (eval/v{k}/)
# One report label per page, unique in its table. Snakemake 9's report turns any label after the first that has
# two values, each on half of a table's results, into a toggle, and then looks each row up under the toggle's
# value: a row without a result for that value (with two episode pages, page 1 is at v2, not at page 0's v0;
# a variant that runs on another benchmark than the other) has none, and the whole report goes blank
# (TypeError reading 'mime_type'). Episode pages are numbered in checkpoint order; the report sorts labels as
# text, hence the zero-padding.
LIBRARY_LABEL = lambda w: {"run": f"{w.bench} / {w.variant} / seed{w.seed}"}  # noqa: E731
EPISODE_LABEL = lambda w: {"episode page": f"{int(w.index):03d} (library v{w.version})"}  # noqa: E731
SLEEP_LABEL = lambda w: {"sleep phase": f"{int(w.version):03d} (v{int(w.version) - 1} to v{w.version})"}  # noqa: E731


rule library_view:
    input:
        libraries=view_libraries,
        # what each sleep phase did: an empty library's page lists the writes they refused, and why
        transcripts=view_transcripts,
        **{t: view_evaluations(t) for t in VIEW_TABLES},
    output:
        report(library_page("{bench}", "{variant}", "{seed}"), caption=f"{CAPTIONS}/library_view.rst",
               category="Libraries", labels=LIBRARY_LABEL),
    params:
        run_id=lambda w: run_id(w.bench, w.variant, w.seed),
        sleep_pages=view_sleep_pages,  # each version links the page of the sleep phase that made it
        limits=VIEW_LIMITS,
        settings=settings("speedrunner", "views"),
        config_name=CONFIG_NAME,
    log:
        "logs/views/library.{bench}.{variant}.seed{seed}.log",
    benchmark:
        f"{TIMINGS}/views/library.{{bench}}.{{variant}}.seed{{seed}}.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/library_view.py"


rule episode_view:
    input:
        libraries=view_libraries,
        **{t: view_evaluations(t) for t in VIEW_TABLES},
    output:
        report(directory(f"{VIEWS}/episodes/{{bench}}/{{variant}}/seed{{seed}}"),
               caption=f"{CAPTIONS}/episode_view.rst", category="Episodes",
               subcategory="{bench}/{variant}/seed{seed}", patterns=["{name}.v{version}.{index}.html"],
               labels=EPISODE_LABEL),
    params:
        run_id=lambda w: run_id(w.bench, w.variant, w.seed),
        library_page=view_library_page,
        limits=VIEW_LIMITS,
        settings=settings("speedrunner", "views"),
        config_name=CONFIG_NAME,
    log:
        "logs/views/episodes.{bench}.{variant}.seed{seed}.log",
    benchmark:
        f"{TIMINGS}/views/episodes.{{bench}}.{{variant}}.seed{{seed}}.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/episode_view.py"


# One page per sleep phase of a run whose method does sleep phase work, every inducer request in order.
rule sleep_view:
    input:
        libraries=view_libraries,
        transcripts=view_transcripts,
    output:
        report(directory(sleep_pages("{bench}", "{variant}", "{seed}")),
               caption=f"{CAPTIONS}/sleep_view.rst", category="Sleep phases",
               subcategory="{bench}/{variant}/seed{seed}", patterns=["{name}.v{version}.html"],
               labels=SLEEP_LABEL),
    wildcard_constraints:
        variant=variants_whose_sleep(works=True),
    params:
        run_id=lambda w: run_id(w.bench, w.variant, w.seed),
        library_page=view_library_page,
        limits=VIEW_LIMITS,
        config_name=CONFIG_NAME,
    log:
        "logs/views/sleep.{bench}.{variant}.seed{seed}.log",
    benchmark:
        f"{TIMINGS}/views/sleep.{{bench}}.{{variant}}.seed{{seed}}.tsv"
    conda:
        "../../envs/skillrepro.yaml"
    script:
        "../../workflow/scripts/speedrunner/sleep_view.py"


VIEW_TARGETS = [
    f
    for b in BENCHMARKS
    for v, m in METHODS.items()
    if m.runs_on(b)
    for s in PROTOCOL.seeds
    for f in (library_page(b, v, s), f"{VIEWS}/episodes/{b}/{v}/seed{s}",
              *([sleep_pages(b, v, s)] if has_sleep_pages(v) else []))
]


# The study's targets: the paper's tables and figures (figures.smk) and every run's pages; none without runs.
rule speedrunner_all:
    input:
        PAPER_TARGETS, VIEW_TARGETS,


# Every run's library page, sleep phase pages and episode pages alone: `snakemake views`, then `snakemake views --report report.html`.
rule views:
    input:
        VIEW_TARGETS,
