# What the results rules share: the study the config declares (plain values for params), the protocol
# variants' runs, and the declared record files the tables read (never a glob of results/).
from skillrepro.analysis import Study, study_params

STUDY = study_params(config, CONFIG_NAME)
ANALYSIS_STUDY = Study(**STUDY)
CAPTIONS = "../report"
PHASED = [b for b, d in BENCHMARKS.items() if d.after]
TRUNCATION = (config.get("analysis") or {}).get("truncation")
TRUNCATION_FILES = [
    f"results/runs/{TRUNCATION['benchmark']}/{TRUNCATION['variant']}/seed{s}/truncated/n{n}/{table}.parquet"
    for s in (TRUNCATION.get("seeds") or PROTOCOL.seeds[:1])
    for n in TRUNCATION.get("sizes", [50, 100, 200, 400, 800])
    for table in ("episodes", "llm_calls", "skill_calls")
] if TRUNCATION else []
CROSS_MODEL = (config.get("analysis") or {}).get("cross_model") or {}


def cross_eval_files(names):
    """Every extra test set of every run, at every checkpoint."""
    return [
        f"results/runs/{b}/{v}/seed{s}/eval_on/{t}/v{k}/{name}"
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
