# KV-cache reuse study (seed 001, issue 5): ALFWorld actor runs per (prompt format, seed) recording every
# request's token ids and the server's cached tokens -> request streams -> prefix-cache simulations (retain
# vs flush, capacities, lockstep concurrency) -> tables -> the seminar's figures. Target: kvcache_all.
from snakemake.utils import validate as _kv_validate

from skillrepro import config as _kv_cfg
from skillrepro.studies.kvcache.study import KVConfig

config.setdefault("kvcache", {})
# The schema ships with the package (like the main one), so a copied workflow folder validates too.
_kv_validate(config["kvcache"], str(_kv_cfg.ROOT / "schemas" / "kvcache.schema.yaml"), set_default=True)
KV = KVConfig.from_config(config)
_KV_LLM = _kv_cfg.llm_config(config)
_KV_BENCH = KV.bench(config)
_KV_WALL = config.get("budgets", {}).get("rollout_wall_s", 1800)

_KV_RUN = "results/kvcache/runs/{kvfmt}/seed{kvseed}"
_KV_SIM = "results/kvcache/sim/{kvfmt}/seed{kvseed}"
_KV_CONSTRAINTS = dict(kvfmt="|".join(KV.formats), kvseed=r"\d+")


# every (format, seed) instance of a path pattern
_kv_all = lambda pattern: [pattern.format(kvfmt=f, kvseed=s) for f in KV.formats for s in KV.seeds]


KV_TABLES = [f"results/tables/kvcache_{n}.csv" for n in ("reuse", "steps", "load", "success", "server")]
KV_FIGURES = [
    f"results/figures/kvcache_{n}.png"
    for n in ("reuse", "prefix", "load", "reuse_steps", "recomputed", "preemptions", "success", "server")
]


rule kvcache_all:
    input:
        "results/tables/kvcache_prefix.csv",
        KV_TABLES,
        KV_FIGURES,


rule kvcache_tasks:
    output:
        "results/kvcache/tasks.json",
    params:
        bench=_KV_BENCH,
        kv=KV,
    log:
        "logs/kvcache/tasks.log",
    benchmark:
        "results/benchmarks/kvcache/tasks.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_tasks.py"


rule kvcache_run:
    input:
        tasks="results/kvcache/tasks.json",
    output:
        episodes=f"{_KV_RUN}/episodes.parquet",
        steps=f"{_KV_RUN}/steps.parquet",
        llm_calls=f"{_KV_RUN}/llm_calls.parquet",
        requests=f"{_KV_RUN}/requests.jsonl",
    wildcard_constraints:
        **_KV_CONSTRAINTS,
    params:
        bench=_KV_BENCH,
        kv=KV,
        llm=_KV_LLM,
        wall_s=_KV_WALL,
    resources:
        # a run with P episodes in flight takes P server slots, so runs do not crowd each other's batch
        llm=min(KV.parallel_episodes, _KV_LLM.slots),
        mem_mb=4000,
    log:
        "logs/kvcache/run_{kvfmt}_seed{kvseed}.log",
    benchmark:
        "results/benchmarks/kvcache/run_{kvfmt}_seed{kvseed}.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_run.py"


rule kvcache_simulate:
    input:
        requests=f"{_KV_RUN}/requests.jsonl",
    output:
        summary=f"{_KV_SIM}/summary.parquet",
        steps=f"{_KV_SIM}/steps.parquet",
        load=f"{_KV_SIM}/load.parquet",
        server=f"{_KV_SIM}/server.parquet",
    wildcard_constraints:
        **_KV_CONSTRAINTS,
    params:
        kv=KV,
        slots=KV.server_slots,
    log:
        "logs/kvcache/simulate_{kvfmt}_seed{kvseed}.log",
    benchmark:
        "results/benchmarks/kvcache/simulate_{kvfmt}_seed{kvseed}.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_simulate.py"


rule kvcache_prefix:
    input:
        tasks="results/kvcache/tasks.json",
    output:
        report("results/tables/kvcache_prefix.csv", caption="../report/kvcache_prefix_table.rst", category="KV cache"),
    params:
        bench=_KV_BENCH,
        kv=KV,
    log:
        "logs/kvcache/prefix.log",
    benchmark:
        "results/benchmarks/kvcache/prefix.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_prefix.py"


rule kvcache_tables:
    input:
        summary=_kv_all(f"{_KV_SIM}/summary.parquet"),
        steps=_kv_all(f"{_KV_SIM}/steps.parquet"),
        load=_kv_all(f"{_KV_SIM}/load.parquet"),
        server=_kv_all(f"{_KV_SIM}/server.parquet"),
        episodes=_kv_all(f"{_KV_RUN}/episodes.parquet"),
    output:
        **{n: report(f"results/tables/kvcache_{n}.csv", caption=f"../report/kvcache_{n}_table.rst", category="KV cache")
           for n in ("reuse", "steps", "load", "success", "server")},
    params:
        kv=KV,
        backend=_KV_LLM.backend,
    log:
        "logs/kvcache/tables.log",
    benchmark:
        "results/benchmarks/kvcache/tables.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_tables.py"


rule kvcache_figures:
    input:
        prefix="results/tables/kvcache_prefix.csv",
        **{n: f"results/tables/kvcache_{n}.csv" for n in ("reuse", "steps", "load", "success", "server")},
    output:
        **{n: report(f"results/figures/kvcache_{n}.png", caption=f"../report/kvcache_{n}.rst", category="KV cache")
           for n in ("reuse", "prefix", "load", "reuse_steps", "recomputed", "preemptions", "success", "server")},
    params:
        kv=KV,
    log:
        "logs/kvcache/figures.log",
    benchmark:
        "results/benchmarks/kvcache/figures.tsv"
    conda:
        "../envs/skillrepro.yaml"
    script:
        "../workflow/scripts/kvcache_figures.py"
