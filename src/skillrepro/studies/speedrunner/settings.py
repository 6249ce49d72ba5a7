"""SpeedRunner's online wake/sleep loop as a study of the workflow: its typed settings, a job's, the fingerprint of
what each kind of its jobs reads, and its contract object (`SPEEDRUNNER`, listed in skillrepro.check.STUDIES)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from skillrepro.config import (ActorConfig, BenchmarkConfig, InducerLimits, LLMConfig, MethodConfig, Protocol,
                               actor_config, benchmarks, file_digest, fingerprint, inducer_limits, llm_config, methods,
                               protocol, sandbox_require)
from skillrepro.methods import Variant, bind, get_method
from skillrepro.studies.contract import Study, config_part


@dataclass(frozen=True)
class SpeedRunnerSettings:
    """The online wake/sleep loop's typed settings (its rules' module-level values, rules/common.smk)."""

    llm: LLMConfig
    inducer: InducerLimits
    protocol: Protocol
    benchmarks: dict[str, BenchmarkConfig]  # name -> instance
    methods: dict[str, MethodConfig]  # variant -> method
    actor: ActorConfig
    sandbox_require: tuple[str, ...]  # config key sandbox.require: layers every sandbox of a run must have


def speedrunner_settings(config: dict[str, Any]) -> SpeedRunnerSettings:
    """The main schema (config.validate) checks the loop's sections; this only types them."""
    return SpeedRunnerSettings(llm_config(config), inducer_limits(config), protocol(config),
                               {b.name: b for b in benchmarks(config)}, {m.variant: m for m in methods(config)},
                               actor_config(config), sandbox_require(config))


@dataclass(frozen=True)
class LoopJob:
    """One loop job's typed settings (skillrepro.pipeline.start_job): the loop's, and its run's benchmark instance
    and variant where its wildcards name them (`bench`, `variant`)."""

    loop: SpeedRunnerSettings
    bench: BenchmarkConfig | None
    method: Variant | None  # the variant bound to its method, its options parsed


def loop_job(config: dict[str, Any], loop: SpeedRunnerSettings, kind: str, keyed: dict[str, Any],
             params: Any) -> LoopJob:
    """SPEEDRUNNER.job: a loop job's typed settings, for its `bench` and `variant` (None where it has none)."""
    bench, variant = keyed["bench"], keyed["variant"]
    return LoopJob(loop, loop.benchmarks[bench] if bench else None, bind(loop.methods[variant]) if variant else None)


def run_fingerprint(config: dict[str, Any], built: Any, kind: str, *, bench: str | None = None,
                    variant: str | None = None) -> str:
    """A loop job's: what its kind reads (SPEEDRUNNER.reads) of its run's `bench` and `variant`."""
    return loop_fingerprint(config, SPEEDRUNNER.kind(kind), bench=bench, variant=variant)


def loop_fingerprint(config: dict[str, Any], reads: tuple[str, ...], *, bench: str | None = None,
                     variant: str | None = None) -> str:
    """Fingerprint of the parts `reads` names of the run `bench` x `variant`. Beside the shared parts
    (contract.settings_fingerprint), "actor" is the section with its prompt files' contents, and "method" the
    variant's method with its options, their defaults filled in (writing a default out is no change) and the
    contents of the files they name (a prompt file the user replaces in place is a new setting too)."""
    chosen: dict[str, Any] = {}
    for part in reads:
        if part == "method":
            m = config["methods"][variant]
            options = get_method(m["method"]).parse_options(m.get("options"), variant)
            chosen[part] = {"method": m["method"], "options": options}
            files = {f.name: ([file_digest(x) for x in v] if isinstance(v, (list, tuple)) else file_digest(v))
                     for f in dataclasses.fields(options)
                     if f.name.endswith("_file") and (v := getattr(options, f.name))}
            if files:
                chosen[part]["file_contents"] = files
        elif part == "actor":
            chosen[part] = {**config["actor"], "file_contents": {name: file_digest(path) for name, path in
                                                                 actor_config(config).prompt_files}}
        else:
            chosen[part] = config_part(config, part, bench)
    return fingerprint(chosen)


SPEEDRUNNER = Study(
    name="speedrunner",
    sections=("methods", "benchmarks", "protocol"),
    schema="config.schema.yaml",
    builder=speedrunner_settings,
    # "benchmark", "call_budget" and "method" are the job's own benchmarks.<bench> (without its call budget and
    # evaluate_on), benchmarks.<bench>.llm_call_budget and methods.<variant> (run_fingerprint)
    reads={
        "run": ("llm", "actor", "benchmark", "call_budget", "method"),  # a run's rollouts, sleep phases, evaluations
        "sleep": ("inducer",),  # a sleep phase's limits and model, beside its run's
        "tasks": ("benchmark",),  # a benchmark's task lists
        "instance": ("benchmark", "call_budget"),  # another instance a run is evaluated on (its `bench`)
        # the tables and figures of every run: what analysis.study_of reads, and the model figure 3 prices
        "tables": ("llm.model", "methods", "benchmarks", "protocol.sleep_every", "protocol.train_rollouts"),
    },
    keyed_by=("bench", "variant"),
    fingerprint=run_fingerprint,
    job=loop_job,
    parts={"benchmark": "benchmarks.{bench}", "call_budget": "benchmarks.{bench}.llm_call_budget",
           "method": "methods.{variant}"},
    wildcards=("bench", "variant", "seed", "k", "split", "target", "n"),
)
