# skillrepro: what skills do to an LLM agent's success and cost.
#   snakemake --cores 8 results/tables/main.csv
# The config is checked before anything is scheduled; one LLM server serves every job of this invocation.
import os

from snakemake.utils import min_version

min_version("9.0")


# A preset given with --configfile replaces config.yaml instead of merging into it, so its benchmarks
# and methods are exactly the ones it lists.
if not workflow.overwrite_configfiles:
    workflow.configfile(os.path.join(workflow.basedir, "config.yaml"))


from skillrepro.config import check_config

config.update(check_config(config))


include: "rules/common.smk"
include: "rules/tasks.smk"
include: "rules/learn.smk"
include: "rules/evaluate.smk"
include: "rules/analytics.smk"
include: "rules/kvcache.smk"
include: "rules/scaffold.smk"


rule all:
    input:
        "results/tables/main.csv",
        "results/figures/learning_curves.png",
        "results/tables/callgraph.csv",
    default_target: True


onstart:
    on_start()


onsuccess:
    on_success()


onerror:
    stop_llm_server()
