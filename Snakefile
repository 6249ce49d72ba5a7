# skillrepro: what skills do to an LLM agent's success and cost.
#   snakemake --cores 8          (every table and figure; `snakemake --report report.html` bundles them)
# The config is checked before anything is scheduled; one LLM server serves every job of this invocation.
import os

from snakemake.utils import min_version

min_version("9.0")


# A preset given with --configfile replaces config.yaml instead of merging into it, so its benchmarks
# and methods are exactly the ones it lists.
if not workflow.overwrite_configfiles:
    workflow.configfile(os.path.join(workflow.basedir, "config.yaml"))


from skillrepro.check import billing_problems, check_config, configured

# A billed backend's key and prices are not needed to plan (`-n`): they are listed here, and a real run
# refuses before its first job without them (on_start, rules/common.smk).
config.update(check_config(config, billing=False))
for _need in billing_problems(config):
    logger.warning(f"a real run will refuse to start until this is fixed: {_need}")
# Named in report captions and empty-state figures: which configuration produced (or would produce) a result.
CONFIG_NAME = " ".join(map(str, workflow.overwrite_configfiles)) or "config.yaml"


report: "report/workflow.rst"


# What every study's rules share (the LLM server, resources, settings), then each study's own: rules/<study>/,
# with its scripts in workflow/scripts/<study>/ (skillrepro.check.STUDIES lists the studies).
include: "rules/common.smk"
include: "rules/speedrunner/common.smk"
include: "rules/speedrunner/tasks.smk"
include: "rules/speedrunner/learn.smk"
include: "rules/speedrunner/evaluate.smk"
include: "rules/speedrunner/study.smk"
include: "rules/speedrunner/protocols.smk"
include: "rules/speedrunner/analytics.smk"
include: "rules/speedrunner/figures.smk"
include: "rules/speedrunner/views.smk"
include: "rules/kvcache/common.smk"
include: "rules/kvcache/runs.smk"
include: "rules/kvcache/analysis.smk"
include: "rules/scaffold/common.smk"
include: "rules/scaffold/scouts.smk"
include: "rules/scaffold/grpo.smk"
include: "rules/scaffold/heldout.smk"


# A GPU only for the LLM jobs of a backend that needs one (see rules/common.smk).
request_gpus(workflow.rules)


# Every configured study's targets (a study is configured where the config sets one of its sections): its rule
# `<study>_all`. `snakemake --report report.html` afterwards bundles them.
rule all:
    input:
        [getattr(rules, f"{study.name}_all").input for study in configured(config)],
    default_target: True


onstart:
    on_start()


onsuccess:
    on_success()


onerror:
    stop_llm_server()
