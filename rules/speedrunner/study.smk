# What the results rules share: the study the config declares, the protocol variants' runs, and the declared
# record files the tables read (never a glob of results/).
from skillrepro.studies.speedrunner.analysis import cross_model_labels, cross_model_tables, study_of
from skillrepro.methods import get_method

ANALYSIS_STUDY = study_of(_RUN, CONFIG_NAME)
CAPTIONS = "../../report"
PHASED = [b for b, d in BENCHMARKS.items() if d.after]
TRUNCATION = _RUN.analysis.get("truncation")


def v0_shows_skills(bench, variant):
    """Whether a run's library v0 already shows skills (a fixed library, as `reference`'s, or a start_library).
    Table 8's N=0 row is then not the v0 checkpoint, as the paper takes it for Voyager's empty v0, but a
    re-evaluation with no skill shown, made as the truncations are."""
    method = METHODS[variant]
    impl = get_method(method.method)
    return bool(method.start_library) or bool(
        impl.initial(BENCHMARKS[bench], impl.parse_options(method.options, variant)).public())


TRUNCATION_FILES = [
    f"{RUN.format(bench=TRUNCATION['benchmark'], variant=TRUNCATION['variant'], seed=s)}/truncated/n{n}/{table}.parquet"
    for s in (TRUNCATION.get("seeds") or PROTOCOL.seeds[:1])
    # "all": the full library, evaluated as the truncations are (table 8's full-library row)
    for n in [*([0] if v0_shows_skills(TRUNCATION["benchmark"], TRUNCATION["variant"]) else []),
              *TRUNCATION["sizes"], "all"]
    for table in ("episodes", "llm_calls", "skill_calls")
] if TRUNCATION else []
CROSS_MODEL = _RUN.analysis["cross_model"]
# Appendix G.2: figure number -> the model whose runs it shows (analysis.cross_model_figures).
CROSS_FIGURES = {int(k.removeprefix("figure")): v for k, v in _RUN.analysis["cross_model_figures"].items()}


def cross_model_folder(label, what):
    """The results/tables folder of `label`'s finished run (this run's own, or analysis.cross_model's entry);
    asked for a figure or table whose run does not exist, the DAG fails here, before any job, saying why."""
    return cross_model_tables(label, LLM.model, CROSS_MODEL, what)


def table7_models():
    """The models table 7 compares: this run's own and analysis.cross_model's, once a cross-model run is
    among them (one of the models figures 9 and 10 show)."""
    labels = cross_model_labels(LLM.model, CROSS_MODEL)
    if not set(labels) & set(CROSS_FIGURES.values()):
        raise ValueError(
            f"table 7 compares the cross-model runs of appendix G.2 ({', '.join(CROSS_FIGURES.values())}, "
            f"analysis.cross_model_figures), but this config's model is {LLM.model} and analysis.cross_model lists "
            f"{', '.join(CROSS_MODEL) or 'no run'}: run configs/cross-model-*.yaml in their own directories and list "
            f"their results/tables/main.csv under analysis.cross_model")
    return labels


def _declared(label):
    return label == LLM.model or label in CROSS_MODEL


# In `all` only where their runs are declared; asked for otherwise (target cross_model), they fail.
CROSS_MODEL_TARGETS = [f"{FIGURES}/figure{n}.png" for n, label in CROSS_FIGURES.items() if _declared(label)] + (
    [f"{TABLES}/table7.csv"] if any(map(_declared, CROSS_FIGURES.values())) else [])


def cross_eval_files(names):
    """Every extra test set of every run, at every checkpoint."""
    return [
        f"{RUN.format(bench=b, variant=v, seed=s)}/eval_on/{t}/v{k}/{name}"
        for b, bench in BENCHMARKS.items()
        for t in bench.eval_targets
        for v, m in METHODS.items()
        if m.runs_on(b)
        for s in PROTOCOL.seeds
        for k in PROTOCOL.checkpoints
        for name in names
    ]


def sleep_files():
    """The sleep phases' own LLM calls (induce/v{k}), which figure 3's cost counts too."""
    return run_files([f"induce/v{k}/llm_calls.parquet" for k in range(1, PROTOCOL.n_cycles + 1)])


def final_libraries(benchmarks=None):
    return [f for f in run_files([f"library/v{PROTOCOL.n_cycles}/manifest.json"])
            if benchmarks is None or f.split("/")[2] in benchmarks]
