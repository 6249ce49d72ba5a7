# SpeedRunner's settings, paths and input functions, shared by its rules (tasks.smk ... views.smk): snakemake
# --lint asks for a rule file's functions to live apart from its rules. What every study shares is in
# rules/common.smk.
from skillrepro.studies.speedrunner.paths import RUN, RUN_LOG, RUN_TIMING


def variants_whose_sleep(works):
    """The variants whose sleep phase does work (rule induce) or only carries the library forward (rule
    carry_library), as a wildcard pattern; one that matches nothing when there are none."""
    from skillrepro.methods import get_method

    names = [v for v, m in METHODS.items() if get_method(m.method).sleeps == works]
    return "|".join(names) or "(?!)"


# what SpeedRunner's wildcards match (the Snakefile's wildcard_constraints)
SPEEDRUNNER_WILDCARDS = dict(bench="|".join(BENCHMARKS), variant="|".join(METHODS), seed=r"\d+", k=r"\d+",
                             split="train|test")


def run_path(wildcards, name):
    """A file of one run."""
    return f"{RUN.format(bench=wildcards.bench, variant=wildcards.variant, seed=wildcards.seed)}/{name}"


def previous_batch(wildcards):
    """Training batch k-1 (none before batch 1), the last of the batches 0..k-1 that rollout k and sleep
    phase k read (pipeline.training_history): each batch is an ancestor of the next through the library
    chain, so one edge keeps them all in order. Listing every earlier batch made the paper preset's DAG
    quadratic in the cycles: 43,200 of its 61,784 input edges."""
    k = int(wildcards.k)
    return [run_path(wildcards, f"train/batch{k - 1}/episodes.parquet")] if k else []


def run_files(names):
    """Every name in `names`, for every run of the config."""
    return [
        f"{RUN.format(bench=b, variant=v, seed=s)}/{name}"
        for b in BENCHMARKS
        for v, m in METHODS.items()
        if m.runs_on(b)
        for s in PROTOCOL.seeds
        for name in names
    ]


_server = None


# The library, sleep phase and episode views of a run (views.smk).
def library_page(bench, variant, seed):
    """A run's library page: unique by file name, which is how the report's captions link results."""
    return f"results/views/library/library.{bench}.{variant}.seed{seed}.html"


def view_libraries(wildcards):
    """Every library version of one run, v0 to the last sleep phase's."""
    return [run_path(wildcards, f"library/v{k}/manifest.json") for k in range(PROTOCOL.n_cycles + 1)]


def view_evaluations(table):
    """One record table of every evaluation checkpoint of one run."""

    def files(wildcards):
        return [run_path(wildcards, f"eval/v{k}/{table}.parquet") for k in PROTOCOL.checkpoints]

    return files


def view_library_page(wildcards):
    return library_page(wildcards.bench, wildcards.variant, wildcards.seed)


def view_transcripts(wildcards):
    """What each sleep phase of one run did: induce/v{k}/transcript.jsonl, k = 1 .. the last."""
    return [run_path(wildcards, f"induce/v{k}/transcript.jsonl") for k in range(1, PROTOCOL.n_cycles + 1)]


def sleep_pages(bench, variant, seed):
    """The folder of a run's sleep phase pages (rule sleep_view)."""
    return f"results/views/sleep/{bench}/{variant}/seed{seed}"


def has_sleep_pages(variant):
    """Whether a variant's runs get sleep phase pages: its method's sleep phase does work (rule induce), and
    there is one. A method that learns nothing (react, reference: rule carry_library) writes an empty transcript."""
    from skillrepro.methods import get_method

    return PROTOCOL.n_cycles > 0 and get_method(METHODS[variant].method).sleeps


def view_sleep_pages(wildcards):
    """The library page's link to the run's sleep phase pages, relative to it; "" when it has none."""
    if not has_sleep_pages(wildcards.variant):
        return ""
    page = library_page(wildcards.bench, wildcards.variant, wildcards.seed)
    return os.path.relpath(sleep_pages(wildcards.bench, wildcards.variant, wildcards.seed), os.path.dirname(page))
